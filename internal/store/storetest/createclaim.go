package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// claimed is n with a claim at creation by owner for lease.
func claimed(n store.NewCall, owner string, lease time.Duration) store.NewCall {
	n.Claim = &store.CreateClaim{Owner: owner, Lease: lease}
	return n
}

// testCreateClaim: a new key created with NewCall.Claim is inserted running
// at attempt 1 under the claim's owner, its lease ending the lease's length
// after its creation by the database's clock, and returned exactly as
// stored; its one audit row is created, which ClaimOf reads as a claim by
// that owner. No live lease is claimable by another worker. Without a
// claim, the call is pending as before, also returned as stored.
func testCreateClaim(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()

	c, out, err := s.CreateOrGet(ctx, claimed(newCall(t, "k1", "fp-k1"), "w1", longLease))
	if err != nil || out != store.Created {
		t.Fatalf("claimed create = %v, %v; want created", out, err)
	}
	if c.Status != store.StatusRunning || c.Attempt != 1 || c.Owner == nil || *c.Owner != "w1" || c.LeaseUntil == nil {
		t.Fatalf("claimed create returned %+v, want running at attempt 1 under w1 with a lease", c)
	}
	// created_at is the database's now of the create; the lease counts
	// from it, and is in the future by that clock.
	if d := *c.LeaseUntil - c.CreatedAt; d < longLease.Seconds()-1 || d > longLease.Seconds()+1 {
		t.Fatalf("lease_until - created_at = %.3fs, want about %v", d, longLease)
	}
	if c.UpdatedAt != c.CreatedAt {
		t.Fatalf("updated_at %v, created_at %v: want one instant", c.UpdatedAt, c.CreatedAt)
	}
	if stored := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, stored), normalize(t, c)) {
		t.Fatalf("stored %+v\nCreateOrGet returned %+v", stored, c)
	}
	evs := audit(t, s, c.CallID)
	if len(evs) != 1 || evs[0].Event != store.EventCreated || evs[0].Detail != store.DetailCreatedClaimed("charge", "w1") {
		t.Fatalf("audit = %+v, want one created row claimed at creation by w1", evs)
	}
	if owner, ok := store.ClaimOf(evs[0]); !ok || owner != "w1" {
		t.Fatalf("ClaimOf(%+v) = %q, %v; want w1, true", evs[0], owner, ok)
	}
	if got, err := s.ClaimNext(ctx, "w2", longLease, 10); err != nil || len(got) != 0 {
		t.Fatalf("ClaimNext over a live claim made at creation = %v, %v; want nothing", ids(got), err)
	}
	if q, err := s.Queue(ctx); err != nil || q.Pending != 0 {
		t.Fatalf("Queue = %+v, %v; want nothing pending", q, err)
	}

	// Without a claim: pending, as stored, audited with the tool alone.
	n := newCall(t, "k2", "fp-k2")
	seq, client, notify := int64(7), "client-1", "https://hooks.example.com/h"
	n.Seq, n.ClientID, n.NotifyURL, n.TraceParent, n.Via = &seq, &client, &notify, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", store.ViaMCP
	p, out, err := s.CreateOrGet(ctx, n)
	if err != nil || out != store.Created || p.Status != store.StatusPending || p.Attempt != 0 || p.Owner != nil || p.LeaseUntil != nil {
		t.Fatalf("create without a claim = %+v, %v, %v; want a pending call at attempt 0", p, out, err)
	}
	if stored := get(t, s, p.CallID); !reflect.DeepEqual(normalize(t, stored), normalize(t, p)) {
		t.Fatalf("stored %+v\nCreateOrGet returned %+v", stored, p)
	}
	if p.Seq == nil || *p.Seq != seq || p.ClientID == nil || *p.ClientID != client || p.NotifyURL == nil || *p.NotifyURL != notify ||
		p.TraceParent != n.TraceParent || p.Via != store.ViaMCP || p.Tool != "charge" || p.Principal != n.Principal || p.IdemKey != "k2" {
		t.Fatalf("created %+v, want the NewCall's fields %+v", p, n)
	}
	if evs := audit(t, s, p.CallID); len(evs) != 1 || evs[0].Detail != "charge" {
		t.Fatalf("audit = %+v, want one created row with detail charge", evs)
	}
	if _, ok := store.ClaimOf(audit(t, s, p.CallID)[0]); ok {
		t.Fatal("ClaimOf reads a plain created row as a claim")
	}

	// A tool with a dedup rule creates through another path on some
	// backends: a new intent is claimed there too.
	d, out, err := s.CreateOrGet(ctx, claimed(dedupCall(t, "alice", "k3", "fp-k3", "intent-new", time.Minute), "w1", longLease))
	if err != nil || out != store.Created || d.Status != store.StatusRunning || d.Attempt != 1 || d.Owner == nil || *d.Owner != "w1" {
		t.Fatalf("claimed create with a dedup rule = %+v, %v, %v; want created running under w1", d, out, err)
	}
	if evs := audit(t, s, d.CallID); len(evs) != 1 || evs[0].Detail != store.DetailCreatedClaimed("charge", "w1") {
		t.Fatalf("audit = %+v, want one created row claimed at creation by w1", evs)
	}

	// A claim that is no claim is refused before anything is written.
	for _, bad := range []*store.CreateClaim{{Owner: "", Lease: longLease}, {Owner: "w1", Lease: 0}, {Owner: "w1", Lease: -time.Second}} {
		n := newCall(t, "bad", "fp-bad")
		n.Claim = bad
		if _, _, err := s.CreateOrGet(ctx, n); err == nil {
			t.Fatalf("CreateOrGet with claim %+v: no error", *bad)
		}
	}
	if _, err := s.GetByKey(ctx, "", "bad"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused claim recorded its key: %v", err)
	}
}

// testCreateClaimOnlyCreated: a claim passed with a key that is not new
// claims nothing and writes no audit row beyond what the outcome always
// writes: a replay of a pending call, a same-key reset of a retryable
// failure, an alias key, a deduplicated new key, a conflict, an expired
// key.
func testCreateClaimOnlyCreated(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	unclaimed := func(what string, c store.Call, want store.Status, rows int) {
		t.Helper()
		if c.Status != want || c.Owner != nil || c.LeaseUntil != nil {
			t.Fatalf("%s: call %+v, want %s and no owner or lease", what, c, want)
		}
		if stored := get(t, s, c.CallID); stored.Status != want || stored.Owner != nil {
			t.Fatalf("%s: stored %+v, want %s and no owner", what, stored, want)
		}
		evs := audit(t, s, c.CallID)
		if len(evs) != rows {
			t.Fatalf("%s: audit %v, want %d row(s)", what, events(evs), rows)
		}
		for _, ev := range evs {
			if owner, ok := store.ClaimOf(ev); ok {
				t.Fatalf("%s: audit row %+v is a claim by %s", what, ev, owner)
			}
		}
	}

	// A same-key reset of a retryable failure.
	f := createAndClaim(t, s, "failed", "w0", longLease)
	if _, err := s.Fail(ctx, failure(f, true)); err != nil {
		t.Fatal(err)
	}
	got, out, err := s.CreateOrGet(ctx, claimed(newCall(t, "failed", "fp-failed"), "w1", longLease))
	if err != nil || out != store.RetryReset || got.CallID != f.CallID || got.Attempt != 1 {
		t.Fatalf("reset with a claim = %+v, %v, %v; want a reset at attempt 1", got, out, err)
	}
	// created, claimed (w0), failed, retry_reset: no claim by w1.
	if evs := audit(t, s, f.CallID); len(evs) != 4 || evs[3].Event != store.EventRetryReset || countEvent(evs, store.EventClaimed) != 1 {
		t.Fatalf("audit after a reset with a claim = %v", events(evs))
	}
	if got.Status != store.StatusPending || got.Owner != nil {
		t.Fatalf("reset with a claim = %+v, want pending without an owner", got)
	}

	// A replay of a pending call.
	p := create(t, s, "pending")
	got, out, err = s.CreateOrGet(ctx, claimed(newCall(t, "pending", "fp-pending"), "w1", longLease))
	if err != nil || out != store.Existing || got.CallID != p.CallID {
		t.Fatalf("replay with a claim = %v, %v", out, err)
	}
	unclaimed("replay", got, store.StatusPending, 1)

	// A conflict.
	if _, _, err := s.CreateOrGet(ctx, claimed(newCall(t, "pending", "fp-other"), "w1", longLease)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("conflict with a claim: err = %v", err)
	}
	unclaimed("conflict", get(t, s, p.CallID), store.StatusPending, 1)

	// A deduplicated new key, then its alias replayed.
	first, out, err := s.CreateOrGet(ctx, dedupCall(t, "alice", "d1", "fp-d1", "intent-A", time.Minute))
	if err != nil || out != store.Created {
		t.Fatalf("dedup create = %v, %v", out, err)
	}
	for i, want := range []store.Outcome{store.Deduplicated, store.Existing} {
		got, out, err := s.CreateOrGet(ctx, claimed(dedupCall(t, "alice", "d2", "fp-d2", "intent-A", time.Minute), "w1", longLease))
		if err != nil || out != want || got.CallID != first.CallID {
			t.Fatalf("dedup %d with a claim = %v, %v; want %v of %s", i, out, err, want, first.CallID)
		}
		unclaimed("deduplicated", got, store.StatusPending, 2) // created, deduplicated
	}

	// An expired key.
	gone, _, err := s.CreateOrGet(ctx, claimed(newCall(t, "gone", "fp-gone"), "w0", longLease))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Succeed(ctx, completion(gone)); err != nil {
		t.Fatal(err)
	}
	purgeOld(t, su, db, s, gone.CallID, true)
	n := claimed(tombstoned(t, "", "gone", "fp-gone"), "w1", longLease)
	if _, _, err := s.CreateOrGet(ctx, n); !errors.Is(err, store.ErrKeyExpired) {
		t.Fatalf("expired key with a claim: err = %v", err)
	}
	if _, err := s.GetAny(ctx, n.CallID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired key with a claim recorded call %s: %v", n.CallID, err)
	}
	if evs := audit(t, s, n.CallID); len(evs) != 0 {
		t.Fatalf("expired key with a claim audited %v", events(evs))
	}
}

// testCreateClaimFencing: a call claimed at creation is fenced like any
// claimed call: a completion under another owner or another attempt is
// refused (no effect, a fenced row), and the claim's own token commits.
func testCreateClaimFencing(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	c, _, err := s.CreateOrGet(ctx, claimed(newCall(t, "k", "fp-k"), "w1", longLease))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []store.Lease{{CallID: c.CallID, Owner: "w2", Attempt: 1}, {CallID: c.CallID, Owner: "w1", Attempt: 2}, {CallID: c.CallID, Owner: "w1", Attempt: 0}} {
		stale := completion(c)
		stale.Lease = l
		if _, err := s.Succeed(ctx, stale); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("Succeed under %v: err = %v, want ErrFenced", l, err)
		}
		if err := s.ExtendLease(ctx, l, longLease); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("ExtendLease under %v: err = %v, want ErrNotHeld", l, err)
		}
	}
	if st := stats(t, s); st.Effects != 0 {
		t.Fatalf("effects after fenced completions = %d, want 0", st.Effects)
	}
	if n := countEvent(audit(t, s, c.CallID), store.EventFenced); n != 3 {
		t.Fatalf("fenced rows = %d, want 3", n)
	}
	if err := s.ExtendLease(ctx, store.LeaseOf(c), longLease); err != nil {
		t.Fatalf("ExtendLease under the claim's own token: %v", err)
	}
	done, err := s.Succeed(ctx, completion(c))
	if err != nil || done.Status != store.StatusSucceeded || done.Attempt != 1 {
		t.Fatalf("Succeed under the claim's own token = %+v, %v", done, err)
	}
	want := []string{store.EventCreated, store.EventFenced, store.EventFenced, store.EventFenced, store.EventSucceeded}
	if got := events(audit(t, s, c.CallID)); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
}

// testCreateClaimRecovered: a call claimed at creation whose owner stops
// (its lease lapses) is recovered like any claimed call: recover with the
// lapsed lease of attempt 1, its attempt abandoned (outcome_unknown), and
// the next claim runs attempt 2; the first owner's late completion is
// fenced.
func testCreateClaimRecovered(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	c, _, err := s.CreateOrGet(ctx, claimed(newCall(t, "k", "fp-k"), "w1", shortLease))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim made at creation to expire", func() bool {
		ids, err := s.RecoverExpired(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids) == 1 && ids[0] == c.CallID
	})
	r := get(t, s, c.CallID)
	if r.Status != store.StatusPending || r.Attempt != 1 || r.Unknown != wire.UnknownAbandoned {
		t.Fatalf("recovered call = %+v, want pending at attempt 1 with an abandoned attempt", r)
	}
	next := claimOnly(t, s, "w2", longLease, c.CallID)
	if next.Attempt != 2 {
		t.Fatalf("claim after recovery: attempt %d, want 2", next.Attempt)
	}
	if _, err := s.Succeed(ctx, completion(c)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("late completion of attempt 1: err = %v, want ErrFenced", err)
	}
	evs := audit(t, s, c.CallID)
	want := []string{store.EventCreated, store.EventOutcomeUnknown, store.EventRecover, store.EventClaimed, store.EventFenced}
	if got := events(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	l := store.Lease{CallID: c.CallID, Owner: "w1", Attempt: 1}
	if evs[2].Detail != store.DetailLeaseExpired(l) || evs[1].Detail != store.DetailTakenOver(l) {
		t.Fatalf("recover rows = %q, %q; want the lapsed lease of w1 attempt 1", evs[1].Detail, evs[2].Detail)
	}
	var claims []string
	for _, ev := range evs {
		if owner, ok := store.ClaimOf(ev); ok {
			claims = append(claims, owner)
		}
	}
	if !reflect.DeepEqual(claims, []string{"w1", "w2"}) {
		t.Fatalf("claims read from the audit = %v, want [w1 w2]", claims)
	}
}
