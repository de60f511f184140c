package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// dedupCall is a NewCall asking for intent deduplication within window.
func dedupCall(t *testing.T, principal, key, fp, intent string, window time.Duration) store.NewCall {
	t.Helper()
	n := newCall(t, key, fp)
	n.Principal, n.Intent, n.DedupWindow = principal, intent, window
	return n
}

// testIntentDedup: a new key with the intent of a recent call of the same
// principal becomes an alias of it (Deduplicated, audited with the new
// key); a later request with the alias key replays the call, or conflicts
// under another fingerprint; another intent, another principal, or a
// call older than the window creates a new call. An alias key never takes
// a real key's place, nor the other way round.
func testIntentDedup(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	do := func(n store.NewCall) (store.Call, store.Outcome, error) {
		t.Helper()
		return s.CreateOrGet(ctx, n)
	}
	must := func(n store.NewCall, want store.Outcome) store.Call {
		t.Helper()
		c, out, err := do(n)
		if err != nil || out != want {
			t.Fatalf("CreateOrGet(%s) = %v, %v; want %v", n.IdemKey, out, err, want)
		}
		return c
	}

	first := must(dedupCall(t, "alice", "k1", "fp-1", "intent-A", time.Minute), store.Created)

	// Within the window: the same call, the new key an alias of it.
	dup := must(dedupCall(t, "alice", "k2", "fp-2", "intent-A", time.Minute), store.Deduplicated)
	if dup.CallID != first.CallID || dup.IdemKey != "k1" {
		t.Fatalf("deduplicated to %s (key %s), want %s (k1)", dup.CallID, dup.IdemKey, first.CallID)
	}
	evs := audit(t, s, first.CallID)
	if got := events(evs); countEvent(evs, store.EventDeduplicated) != 1 || evs[len(evs)-1].Detail != "k2" {
		t.Fatalf("audit %v (last detail %q), want one deduplicated with detail k2", got, evs[len(evs)-1].Detail)
	}
	if st := stats(t, s); st.Calls != 1 {
		t.Fatalf("calls = %d after a deduplicated request, want 1", st.Calls)
	}

	// The alias key replays, by CreateOrGet (its own fingerprint, even
	// without a dedup window) and by GetByKey.
	if c := must(newCallFor("alice", "k2", "fp-2", t), store.Existing); c.CallID != first.CallID {
		t.Fatalf("alias replay = %s, want %s", c.CallID, first.CallID)
	}
	if c, err := s.GetByKey(ctx, "alice", "k2"); err != nil || c.CallID != first.CallID {
		t.Fatalf("GetByKey(alias) = %s, %v; want %s", c.CallID, err, first.CallID)
	}
	// Another fingerprint under the alias key: conflict naming the call.
	_, _, err := do(dedupCall(t, "alice", "k2", "fp-other", "intent-A", time.Minute))
	var ce *store.ConflictError
	if !errors.Is(err, store.ErrConflict) || !errors.As(err, &ce) || ce.CallID != first.CallID || ce.Key != "k2" {
		t.Fatalf("alias key, other fingerprint: err = %v, want a conflict on %s naming k2", err, first.CallID)
	}
	// An alias key is not another principal's.
	if _, err := s.GetByKey(ctx, "bob", "k2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetByKey(bob, alias of alice) err = %v, want ErrNotFound", err)
	}

	// Other args (another intent): a new call.
	other := must(dedupCall(t, "alice", "k3", "fp-3", "intent-B", time.Minute), store.Created)
	if other.CallID == first.CallID {
		t.Fatal("another intent was deduplicated")
	}
	// Another principal: a new call, even with the same intent.
	bobs := must(dedupCall(t, "bob", "k4", "fp-4", "intent-A", time.Minute), store.Created)
	if bobs.CallID == first.CallID {
		t.Fatal("another principal's intent was deduplicated")
	}
	// Without a window: no deduplication, a new call.
	if c := must(dedupCall(t, "alice", "k5", "fp-5", "intent-A", 0), store.Created); c.CallID == first.CallID {
		t.Fatal("deduplicated without a window")
	}

	// After the window: a new call. The earlier alice calls of intent-A
	// are moved back two minutes, out of a one-minute window.
	su.f.Exec(t, db, `UPDATE calls SET created_at = created_at - 120 WHERE principal = 'alice' AND intent = 'intent-A'`)
	late := must(dedupCall(t, "alice", "k6", "fp-6", "intent-A", time.Minute), store.Created)
	if late.CallID == first.CallID {
		t.Fatal("a call older than the window was deduplicated")
	}
	// ...and within a longer window, the newest such call is the one.
	if c := must(dedupCall(t, "alice", "k7", "fp-7", "intent-A", time.Hour), store.Deduplicated); c.CallID != late.CallID {
		t.Fatalf("deduplicated to %s, want the newest call %s", c.CallID, late.CallID)
	}

	// A real key cannot be recorded as an alias: a request with k1 under
	// dedup is a replay of k1's call (or a conflict), never an alias row.
	if _, _, err := do(dedupCall(t, "alice", "k1", "fp-x", "intent-A", time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("real key, other fingerprint, with dedup: err = %v, want ErrConflict", err)
	}
	// An alias key cannot become a real key: without dedup, k2 replays.
	if c := must(newCallFor("alice", "k2", "fp-2", t), store.Existing); c.CallID != first.CallID {
		t.Fatalf("alias key created %s, want a replay of %s", c.CallID, first.CallID)
	}
	if st := stats(t, s); st.Calls != 5 {
		t.Fatalf("calls = %d, want 5 (k1, k3, k4, k5, k6)", st.Calls)
	}
}

// newCallFor is newCall for principal, without intent.
func newCallFor(principal, key, fp string, t *testing.T) store.NewCall {
	t.Helper()
	n := newCall(t, key, fp)
	n.Principal = principal
	return n
}
