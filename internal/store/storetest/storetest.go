// Package storetest is the behaviour suite every store.Store backend must
// pass. Each invariant of SPEC §2 that lives in the storage layer is tested
// here once, and each backend's own tests call Exercise, so SQLite and
// PostgreSQL are held to the same contract (river's riverdrivertest pattern).
//
// Nothing in this package may assume a particular backend: it talks only to
// the store.Store interface and compares JSON semantically (a backend may
// store jsonb and hand back different whitespace).
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Options tune Exercise for what a backend's constructor supports.
type Options struct {
	// OpenReadOnly, if set, returns a fresh writable store and a read-only
	// store (store.Options{ReadOnly: true}) on the same, otherwise empty,
	// database. Both must be closed through t.Cleanup. When nil, the
	// read-only subtests are skipped.
	OpenReadOnly func(t *testing.T) (rw, ro store.Store)
}

// Timing used throughout. Short leases keep the suite fast; every wait for
// one to expire polls with a generous deadline instead of sleeping a fixed
// time, so a slow machine makes the suite slower, never flaky.
const (
	shortLease = 50 * time.Millisecond
	longLease  = time.Minute
	waitFor    = 10 * time.Second
	pollEvery  = 10 * time.Millisecond
)

// Exercise runs the whole suite against a backend. open must return a
// fresh, empty store on every call and register its Close with t.Cleanup.
// At most one Options may be given.
func Exercise(t *testing.T, open func(t *testing.T) store.Store, opts ...Options) {
	t.Helper()
	var o Options
	if len(opts) > 1 {
		t.Fatalf("storetest.Exercise: at most one Options, got %d", len(opts))
	}
	if len(opts) == 1 {
		o = opts[0]
	}

	t.Run("CreateOrGet", func(t *testing.T) { testCreateOrGet(t, open) })
	t.Run("RetryReset", func(t *testing.T) { testRetryReset(t, open) })
	t.Run("ConcurrentCreateOrGet", func(t *testing.T) { testConcurrentCreateOrGet(t, open) })
	t.Run("ClaimNext", func(t *testing.T) { testClaimNext(t, open) })
	t.Run("ConcurrentClaimNext", func(t *testing.T) { testConcurrentClaimNext(t, open) })
	t.Run("LeaseExpiryTakeover", func(t *testing.T) { testLeaseExpiryTakeover(t, open) })
	t.Run("Succeed", func(t *testing.T) { testSucceed(t, open) })
	t.Run("Fail", func(t *testing.T) { testFail(t, open) })
	t.Run("EffectUniqueness", func(t *testing.T) { testEffectUniqueness(t, open) })
	t.Run("RecoverExpired", func(t *testing.T) { testRecoverExpired(t, open) })
	t.Run("Release", func(t *testing.T) { testRelease(t, open) })
	t.Run("Get", func(t *testing.T) { testGet(t, open) })
	t.Run("ListCalls", func(t *testing.T) { testListCalls(t, open) })
	t.Run("ListEffects", func(t *testing.T) { testListEffects(t, open) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, open) })
	t.Run("StatsAttemptsDupes", func(t *testing.T) { testStatsAttemptsDupes(t, open) })
	t.Run("Ping", func(t *testing.T) { testPing(t, open) })
	t.Run("ReadOnly", func(t *testing.T) {
		if o.OpenReadOnly == nil {
			t.Skip("backend gave no OpenReadOnly")
		}
		testReadOnly(t, o.OpenReadOnly)
	})
}

// ---------------------------------------------------------------- helpers

// newCallID returns "c_" + 16 lowercase hex, the format SPEC §3 fixes.
func newCallID(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "c_" + hex.EncodeToString(b[:])
}

// effectIDFor derives an effect id from a call id; the real server derives
// it deterministically too (SPEC §3), the suite only needs it stable.
func effectIDFor(callID string) string {
	return "eff_" + callID[len(callID)-16:]
}

// newCall builds a NewCall for key whose fingerprint is fp.
func newCall(t *testing.T, key, fp string) store.NewCall {
	t.Helper()
	return store.NewCall{
		CallID:      newCallID(t),
		IdemKey:     key,
		Fingerprint: fp,
		Tool:        "charge",
		ArgsJSON:    json.RawMessage(`{"amount":100}`),
	}
}

// create records a new call and fails the test unless it was Created.
func create(t *testing.T, s store.Store, key string) store.Call {
	t.Helper()
	c, out, err := s.CreateOrGet(t.Context(), newCall(t, key, "fp-"+key))
	if err != nil {
		t.Fatalf("CreateOrGet(%q): %v", key, err)
	}
	if out != store.Created {
		t.Fatalf("CreateOrGet(%q) outcome = %v, want created", key, out)
	}
	return c
}

// claimOnly claims with limit 1 and fails unless exactly wantID was claimed.
func claimOnly(t *testing.T, s store.Store, owner string, lease time.Duration, wantID string) store.Call {
	t.Helper()
	got, err := s.ClaimNext(t.Context(), owner, lease, 1)
	if err != nil {
		t.Fatalf("ClaimNext(%s): %v", owner, err)
	}
	if len(got) != 1 || got[0].CallID != wantID {
		t.Fatalf("ClaimNext(%s) = %v, want exactly %s", owner, ids(got), wantID)
	}
	return got[0]
}

// createAndClaim creates a call and claims it for owner.
func createAndClaim(t *testing.T, s store.Store, key, owner string, lease time.Duration) store.Call {
	t.Helper()
	c := create(t, s, key)
	return claimOnly(t, s, owner, lease, c.CallID)
}

// completion is the fencing token of a claimed call plus a charge result
// and its effect.
func completion(c store.Call) store.Completion {
	amount := int64(100)
	eff := effectIDFor(c.CallID)
	return store.Completion{
		CallID:  c.CallID,
		Owner:   *c.Owner,
		Attempt: c.Attempt,
		Result:  json.RawMessage(fmt.Sprintf(`{"charged":100,"effect_id":%q}`, eff)),
		Effect:  &store.Effect{EffectID: eff, CallID: c.CallID, Tool: c.Tool, Amount: &amount},
	}
}

// failure is the fencing token of a claimed call plus an error object.
func failure(c store.Call, retryable bool) store.Completion {
	return store.Completion{
		CallID:  c.CallID,
		Owner:   *c.Owner,
		Attempt: c.Attempt,
		Error:   json.RawMessage(fmt.Sprintf(`{"code":"tool_failed","message":"boom","retryable":%t}`, retryable)),
	}
}

func ids(cs []store.Call) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.CallID
	}
	return out
}

func get(t *testing.T, s store.Store, id string) store.Call {
	t.Helper()
	c, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return c
}

func stats(t *testing.T, s store.Store) store.Stats {
	t.Helper()
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func audit(t *testing.T, s store.Store, callID string) []store.AuditEvent {
	t.Helper()
	evs, err := s.Audit(t.Context(), callID, 0)
	if err != nil {
		t.Fatalf("Audit(%q): %v", callID, err)
	}
	return evs
}

func events(evs []store.AuditEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Event
	}
	return out
}

func countEvent(evs []store.AuditEvent, name string) int {
	n := 0
	for _, e := range evs {
		if e.Event == name {
			n++
		}
	}
	return n
}

func effects(t *testing.T, s store.Store) []store.Effect {
	t.Helper()
	effs, err := s.ListEffects(t.Context(), 0)
	if err != nil {
		t.Fatalf("ListEffects: %v", err)
	}
	return effs
}

// jsonEq reports whether a and b hold the same JSON value.
func jsonEq(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// eventually polls f until it returns true or the deadline passes.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(pollEvery)
	}
}

// tick makes sure the next row gets a strictly later timestamp than the last
// one even on a backend whose clock has coarse resolution, so ordering
// assertions ("oldest first", "newest first") are well defined.
func tick() { time.Sleep(2 * time.Millisecond) }

// ----------------------------------------------------------------- tests

func testCreateOrGet(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("Created", func(t *testing.T) {
		s := open(t)
		clientID, seq := "demo", int64(7)
		n := newCall(t, "k1", "fp1")
		n.ClientID, n.Seq = &clientID, &seq
		c, out, err := s.CreateOrGet(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		if out != store.Created {
			t.Fatalf("outcome = %v, want created", out)
		}
		if c.CallID != n.CallID || c.IdemKey != "k1" || c.Fingerprint != "fp1" || c.Tool != "charge" {
			t.Fatalf("call = %+v, want the fields of %+v", c, n)
		}
		if c.Status != store.StatusPending || c.Attempt != 0 || c.Owner != nil || c.LeaseUntil != nil {
			t.Fatalf("new call = %+v, want pending, attempt 0, no owner or lease", c)
		}
		if c.ClientID == nil || *c.ClientID != "demo" || c.Seq == nil || *c.Seq != 7 {
			t.Fatalf("client_id/seq = %v/%v, want demo/7", c.ClientID, c.Seq)
		}
		if !jsonEq(t, c.ArgsJSON, n.ArgsJSON) {
			t.Fatalf("args = %s, want %s", c.ArgsJSON, n.ArgsJSON)
		}
		if c.ResultJSON != nil || c.ErrorJSON != nil || c.EffectID != nil {
			t.Fatalf("new call has result/error/effect: %+v", c)
		}
		if c.CreatedAt <= 0 || c.UpdatedAt < c.CreatedAt {
			t.Fatalf("created_at=%v updated_at=%v", c.CreatedAt, c.UpdatedAt)
		}
		// The stored row is what was returned.
		if g := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, c)) {
			t.Fatalf("Get = %+v, CreateOrGet returned %+v", g, c)
		}
		evs := audit(t, s, c.CallID)
		if len(evs) != 1 || evs[0].Event != store.EventCreated || evs[0].Detail != "charge" || evs[0].CallID != c.CallID {
			t.Fatalf("audit = %+v, want one created event with detail charge", evs)
		}
	})

	t.Run("NilClientIDAndArgs", func(t *testing.T) {
		s := open(t)
		n := newCall(t, "k1", "fp1")
		n.ArgsJSON = json.RawMessage(`{}`)
		c, _, err := s.CreateOrGet(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientID != nil || c.Seq != nil {
			t.Fatalf("client_id/seq = %v/%v, want nil", c.ClientID, c.Seq)
		}
		if !jsonEq(t, c.ArgsJSON, json.RawMessage(`{}`)) {
			t.Fatalf("args = %s, want {}", c.ArgsJSON)
		}
	})

	t.Run("Existing", func(t *testing.T) {
		s := open(t)
		first := create(t, s, "k1")
		// A retry of the same request carries a fresh call id the store
		// must ignore: one key is one logical call.
		again := newCall(t, "k1", "fp-k1")
		c, out, err := s.CreateOrGet(t.Context(), again)
		if err != nil {
			t.Fatal(err)
		}
		if out != store.Existing || c.CallID != first.CallID {
			t.Fatalf("got %s (%v), want existing %s", c.CallID, out, first.CallID)
		}
		if st := stats(t, s); st.Calls != 1 {
			t.Fatalf("calls = %d, want 1", st.Calls)
		}
		if n := countEvent(audit(t, s, ""), store.EventCreated); n != 1 {
			t.Fatalf("created events = %d, want 1", n)
		}
		if _, err := s.Get(t.Context(), again.CallID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the retry's own call id exists (err=%v)", err)
		}
	})

	t.Run("ConflictWritesNothing", func(t *testing.T) {
		s := open(t)
		first := create(t, s, "k1")
		auditBefore := audit(t, s, "")
		bad := newCall(t, "k1", "a-different-fingerprint")
		bad.Tool = "send_email"
		_, _, err := s.CreateOrGet(t.Context(), bad)
		wantErr(t, "CreateOrGet with another fingerprint", err, store.ErrConflict)
		if st := stats(t, s); st.Calls != 1 {
			t.Fatalf("calls = %d, want 1", st.Calls)
		}
		if after := audit(t, s, ""); len(after) != len(auditBefore) {
			t.Fatalf("audit grew on conflict: %v -> %v", events(auditBefore), events(after))
		}
		got := get(t, s, first.CallID)
		if !reflect.DeepEqual(normalize(t, got), normalize(t, first)) {
			t.Fatalf("conflict changed the call:\n%+v\n%+v", first, got)
		}
		if _, err := s.Get(t.Context(), bad.CallID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("conflicting call id exists (err=%v)", err)
		}
	})

	t.Run("ConflictOnFinalCall", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		if _, err := s.Succeed(t.Context(), completion(c)); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "other"))
		wantErr(t, "CreateOrGet with another fingerprint on a succeeded call", err, store.ErrConflict)
	})
}

func testRetryReset(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("RetryableFailureResets", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		if _, err := s.Fail(t.Context(), failure(c, true)); err != nil {
			t.Fatal(err)
		}
		r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
		if err != nil {
			t.Fatal(err)
		}
		if out != store.RetryReset || r.CallID != c.CallID {
			t.Fatalf("got %s (%v), want retry_reset of %s", r.CallID, out, c.CallID)
		}
		if r.Status != store.StatusPending || r.ErrorJSON != nil || r.Owner != nil || r.LeaseUntil != nil {
			t.Fatalf("reset call = %+v, want pending with no error, owner or lease", r)
		}
		if r.Attempt != 1 {
			t.Fatalf("attempt = %d, want 1 (attempt counts physical tries, a reset keeps it)", r.Attempt)
		}
		if g := get(t, s, c.CallID); g.Status != store.StatusPending || g.ErrorJSON != nil {
			t.Fatalf("stored call = %+v, want pending without error", g)
		}
		want := []string{store.EventCreated, store.EventClaimed, store.EventFailed, store.EventRetryReset}
		if got := events(audit(t, s, c.CallID)); !reflect.DeepEqual(got, want) {
			t.Fatalf("audit = %v, want %v", got, want)
		}
		// It runs again: the next claim is attempt 2.
		again := claimOnly(t, s, "w2", longLease, c.CallID)
		if again.Attempt != 2 {
			t.Fatalf("attempt after reset = %d, want 2", again.Attempt)
		}
		// A request while it is pending again is plain Existing.
		if _, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1")); err != nil || out != store.Existing {
			t.Fatalf("CreateOrGet on running call = %v, %v; want existing", out, err)
		}
	})

	t.Run("NonRetryableFailureStays", func(t *testing.T) {
		for name, errJSON := range map[string]string{
			"retryable false":   `{"code":"tool_failed","message":"no","retryable":false}`,
			"retryable missing": `{"code":"tool_failed","message":"no"}`,
			"retryable string":  `{"code":"tool_failed","message":"no","retryable":"true"}`,
		} {
			t.Run(name, func(t *testing.T) {
				s := open(t)
				c := createAndClaim(t, s, "k1", "w1", longLease)
				f := failure(c, false)
				f.Error = json.RawMessage(errJSON)
				if _, err := s.Fail(t.Context(), f); err != nil {
					t.Fatal(err)
				}
				r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
				if err != nil {
					t.Fatal(err)
				}
				if out != store.Existing || r.Status != store.StatusFailed || !jsonEq(t, r.ErrorJSON, f.Error) {
					t.Fatalf("got %v %+v, want existing failed call with its error", out, r)
				}
				if n := countEvent(audit(t, s, c.CallID), store.EventRetryReset); n != 0 {
					t.Fatalf("retry_reset events = %d, want 0", n)
				}
			})
		}
	})

	t.Run("SucceededStays", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		done, err := s.Succeed(t.Context(), completion(c))
		if err != nil {
			t.Fatal(err)
		}
		r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
		if err != nil {
			t.Fatal(err)
		}
		if out != store.Existing || r.Status != store.StatusSucceeded || !jsonEq(t, r.ResultJSON, done.ResultJSON) {
			t.Fatalf("got %v %+v, want the existing succeeded call", out, r)
		}
	})
}

func testConcurrentCreateOrGet(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	const n = 16
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		calls    = make([]store.Call, n)
		outcomes = make([]store.Outcome, n)
		errs     = make([]error, n)
	)
	for i := range n {
		nc := newCall(t, "same-key", "fp")
		wg.Go(func() {
			<-start // line them all up so they really race
			calls[i], outcomes[i], errs[i] = s.CreateOrGet(t.Context(), nc)
		})
	}
	close(start)
	wg.Wait()

	created := 0
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		seen[calls[i].CallID] = true
		switch outcomes[i] {
		case store.Created:
			created++
		case store.Existing:
		default:
			t.Fatalf("goroutine %d: outcome %v", i, outcomes[i])
		}
	}
	if len(seen) != 1 || created != 1 {
		t.Fatalf("%d distinct call ids, %d created; want 1 and 1", len(seen), created)
	}
	if st := stats(t, s); st.Calls != 1 {
		t.Fatalf("calls = %d, want 1", st.Calls)
	}
	if c := countEvent(audit(t, s, ""), store.EventCreated); c != 1 {
		t.Fatalf("created events = %d, want 1", c)
	}
}

func testClaimNext(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("OldestFirstAndFields", func(t *testing.T) {
		s := open(t)
		a := create(t, s, "a")
		tick()
		b := create(t, s, "b")
		tick()
		c := create(t, s, "c")

		got, err := s.ClaimNext(t.Context(), "w1", longLease, 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{a.CallID, b.CallID}; !reflect.DeepEqual(ids(got), want) {
			t.Fatalf("claimed %v, want oldest two %v", ids(got), want)
		}
		for _, g := range got {
			if g.Status != store.StatusRunning || g.Attempt != 1 || g.Owner == nil || *g.Owner != "w1" || g.LeaseUntil == nil {
				t.Fatalf("claimed call = %+v, want running attempt 1 owner w1 with a lease", g)
			}
			// The lease is now + lease by the database's clock; the
			// claim's updated_at is that same now.
			if d := *g.LeaseUntil - g.UpdatedAt; d < longLease.Seconds()-1 || d > longLease.Seconds()+1 {
				t.Fatalf("lease_until - updated_at = %.3fs, want about %v", d, longLease)
			}
			if stored := get(t, s, g.CallID); !reflect.DeepEqual(normalize(t, stored), normalize(t, g)) {
				t.Fatalf("stored %+v, ClaimNext returned %+v", stored, g)
			}
			evs := audit(t, s, g.CallID)
			if last := evs[len(evs)-1]; last.Event != store.EventClaimed || last.Detail != "w1" {
				t.Fatalf("last audit = %+v, want claimed by w1", last)
			}
		}

		// Live leases are not claimable; only c is left.
		claimOnly(t, s, "w2", longLease, c.CallID)
		if got, err := s.ClaimNext(t.Context(), "w3", longLease, 10); err != nil || len(got) != 0 {
			t.Fatalf("ClaimNext with everything leased = %v, %v; want nothing", ids(got), err)
		}
	})

	t.Run("FinalCallsNotClaimable", func(t *testing.T) {
		s := open(t)
		ok := createAndClaim(t, s, "ok", "w1", shortLease)
		if _, err := s.Succeed(t.Context(), completion(ok)); err != nil {
			t.Fatal(err)
		}
		bad := createAndClaim(t, s, "bad", "w1", shortLease)
		if _, err := s.Fail(t.Context(), failure(bad, true)); err != nil {
			t.Fatal(err)
		}
		// Even once the (cleared) leases would have expired.
		time.Sleep(2 * shortLease)
		if got, err := s.ClaimNext(t.Context(), "w2", longLease, 10); err != nil || len(got) != 0 {
			t.Fatalf("ClaimNext over final calls = %v, %v; want nothing", ids(got), err)
		}
	})

	t.Run("EmptyStore", func(t *testing.T) {
		s := open(t)
		got, err := s.ClaimNext(t.Context(), "w1", longLease, 5)
		if err != nil || len(got) != 0 {
			t.Fatalf("ClaimNext on empty store = %v, %v", ids(got), err)
		}
	})
}

func testConcurrentClaimNext(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	const calls, workers = 24, 4
	want := map[string]bool{}
	for i := range calls {
		want[create(t, s, fmt.Sprintf("k%d", i)).CallID] = true
	}
	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		wg      sync.WaitGroup
		start   = make(chan struct{})
		errs    = make([]error, workers)
	)
	for w := range workers {
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			<-start
			for {
				got, err := s.ClaimNext(t.Context(), owner, longLease, 3)
				if err != nil {
					errs[w] = err
					return
				}
				if len(got) == 0 {
					return // long leases: nothing comes back once drained
				}
				mu.Lock()
				for _, c := range got {
					if c.Owner == nil || *c.Owner != owner || c.Attempt != 1 {
						errs[w] = fmt.Errorf("claimed %+v as %s", c, owner)
					}
					claimed[c.CallID]++
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("call %s claimed %d times", id, n)
		}
		if !want[id] {
			t.Errorf("claimed unknown call %s", id)
		}
	}
	if len(claimed) != calls {
		t.Fatalf("claimed %d distinct calls, want %d", len(claimed), calls)
	}
	if n := countEvent(audit(t, s, ""), store.EventClaimed); n != calls {
		t.Fatalf("claimed events = %d, want %d", n, calls)
	}
}

// takeover claims a call as "old" with a short lease, waits for the lease to
// lapse and has "new" take it over. It returns both claims.
func takeover(t *testing.T, s store.Store) (stale, fresh store.Call) {
	t.Helper()
	stale = createAndClaim(t, s, "k1", "old", shortLease)
	eventually(t, "another owner to take over the expired lease", func() bool {
		got, err := s.ClaimNext(t.Context(), "new", longLease, 1)
		if err != nil {
			t.Fatalf("ClaimNext: %v", err)
		}
		if len(got) == 0 {
			return false
		}
		fresh = got[0]
		return true
	})
	return stale, fresh
}

func testLeaseExpiryTakeover(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	stale, fresh := takeover(t, s)
	if fresh.CallID != stale.CallID || fresh.Attempt != 2 || *fresh.Owner != "new" || fresh.Status != store.StatusRunning {
		t.Fatalf("takeover = %+v, want %s running attempt 2 owner new", fresh, stale.CallID)
	}
	if *fresh.LeaseUntil <= *stale.LeaseUntil {
		t.Fatalf("new lease %v not after old lease %v", *fresh.LeaseUntil, *stale.LeaseUntil)
	}
	want := []string{store.EventCreated, store.EventClaimed, store.EventClaimed}
	if got := events(audit(t, s, stale.CallID)); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
}

func testSucceed(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("WithEffect", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		comp := completion(c)
		done, err := s.Succeed(t.Context(), comp)
		if err != nil {
			t.Fatal(err)
		}
		if done.Status != store.StatusSucceeded || !jsonEq(t, done.ResultJSON, comp.Result) {
			t.Fatalf("succeeded call = %+v", done)
		}
		if done.EffectID == nil || *done.EffectID != comp.Effect.EffectID {
			t.Fatalf("effect_id = %v, want %s", done.EffectID, comp.Effect.EffectID)
		}
		if done.Owner != nil || done.LeaseUntil != nil || done.ErrorJSON != nil || done.Attempt != 1 {
			t.Fatalf("succeeded call keeps lease/owner/error or lost attempt: %+v", done)
		}
		if g := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, done)) {
			t.Fatalf("stored %+v, Succeed returned %+v", g, done)
		}
		effs := effects(t, s)
		if len(effs) != 1 || effs[0].EffectID != comp.Effect.EffectID || effs[0].CallID != c.CallID ||
			effs[0].Tool != "charge" || effs[0].Amount == nil || *effs[0].Amount != 100 || effs[0].CreatedAt <= 0 {
			t.Fatalf("effects = %+v, want the one charge effect", effs)
		}
		evs := audit(t, s, c.CallID)
		if last := evs[len(evs)-1]; last.Event != store.EventSucceeded || last.Detail != comp.Effect.EffectID {
			t.Fatalf("last audit = %+v, want succeeded with the effect id", last)
		}
	})

	t.Run("WithoutEffect", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		comp := completion(c)
		comp.Effect = nil
		comp.Result = json.RawMessage(`{"slept":0.1}`)
		done, err := s.Succeed(t.Context(), comp)
		if err != nil {
			t.Fatal(err)
		}
		if done.Status != store.StatusSucceeded || done.EffectID != nil || !jsonEq(t, done.ResultJSON, comp.Result) {
			t.Fatalf("succeeded call = %+v, want no effect id", done)
		}
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
		if n := countEvent(audit(t, s, c.CallID), store.EventSucceeded); n != 1 {
			t.Fatalf("succeeded events = %d, want 1", n)
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		s := open(t)
		stale, fresh := takeover(t, s)
		auditBefore := len(audit(t, s, stale.CallID))

		// The old owner wakes up from its pause and tries to commit.
		_, err := s.Succeed(t.Context(), completion(stale))
		wantErr(t, "stale Succeed", err, store.ErrFenced)
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("stale Succeed left effects %+v", effs)
		}
		if g := get(t, s, stale.CallID); g.Status != store.StatusRunning || *g.Owner != "new" || g.Attempt != 2 {
			t.Fatalf("stale Succeed changed the call: %+v", g)
		}
		evs := audit(t, s, stale.CallID)
		if len(evs) != auditBefore+1 || evs[len(evs)-1].Event != store.EventFenced {
			t.Fatalf("audit = %v, want one fenced row added", events(evs))
		}

		// A stale Fail is fenced the same way.
		_, err = s.Fail(t.Context(), failure(stale, false))
		wantErr(t, "stale Fail", err, store.ErrFenced)
		if g := get(t, s, stale.CallID); g.Status != store.StatusRunning {
			t.Fatalf("stale Fail changed the call: %+v", g)
		}

		// Same owner name but the old attempt number is stale too: the
		// token is (owner, attempt), not owner alone.
		sameOwner := completion(fresh)
		sameOwner.Attempt = stale.Attempt
		_, err = s.Succeed(t.Context(), sameOwner)
		wantErr(t, "Succeed with the current owner but an old attempt", err, store.ErrFenced)

		// The current owner commits.
		done, err := s.Succeed(t.Context(), completion(fresh))
		if err != nil {
			t.Fatalf("current owner's Succeed: %v", err)
		}
		if done.Status != store.StatusSucceeded || done.Attempt != 2 {
			t.Fatalf("call = %+v, want succeeded at attempt 2", done)
		}
		if effs := effects(t, s); len(effs) != 1 {
			t.Fatalf("effects = %d, want exactly 1", len(effs))
		}
		if n := countEvent(audit(t, s, stale.CallID), store.EventFenced); n != 3 {
			t.Fatalf("fenced events = %d, want 3", n)
		}
	})

	t.Run("Twice", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		first, err := s.Succeed(t.Context(), completion(c))
		if err != nil {
			t.Fatal(err)
		}
		second := completion(c)
		second.Result = json.RawMessage(`{"charged":999}`)
		_, err = s.Succeed(t.Context(), second)
		wantErr(t, "second Succeed", err, store.ErrFenced)
		if g := get(t, s, c.CallID); !jsonEq(t, g.ResultJSON, first.ResultJSON) {
			t.Fatalf("second Succeed overwrote result: %s", g.ResultJSON)
		}
		if effs := effects(t, s); len(effs) != 1 {
			t.Fatalf("effects = %d, want 1", len(effs))
		}
		_, err = s.Fail(t.Context(), failure(c, true))
		wantErr(t, "Fail after Succeed", err, store.ErrFenced)
		if g := get(t, s, c.CallID); g.Status != store.StatusSucceeded {
			t.Fatalf("Fail after Succeed changed status to %s", g.Status)
		}
	})

	t.Run("PendingCallIsFenced", func(t *testing.T) {
		s := open(t)
		c := create(t, s, "k1")
		owner := "w1"
		c.Owner, c.Attempt = &owner, 1
		_, err := s.Succeed(t.Context(), completion(c))
		wantErr(t, "Succeed on an unclaimed call", err, store.ErrFenced)
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
	})

	t.Run("UnknownCall", func(t *testing.T) {
		s := open(t)
		owner := "w1"
		ghost := store.Call{CallID: newCallID(t), Owner: &owner, Attempt: 1, Tool: "charge"}
		if _, err := s.Succeed(t.Context(), completion(ghost)); err == nil {
			t.Fatal("Succeed of an unknown call succeeded")
		}
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
	})
}

func testFail(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	c := createAndClaim(t, s, "k1", "w1", longLease)
	f := failure(c, false)
	done, err := s.Fail(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != store.StatusFailed || !jsonEq(t, done.ErrorJSON, f.Error) || done.ResultJSON != nil {
		t.Fatalf("failed call = %+v", done)
	}
	if done.Owner != nil || done.LeaseUntil != nil || done.EffectID != nil || done.Attempt != 1 {
		t.Fatalf("failed call keeps lease/owner or has an effect: %+v", done)
	}
	if g := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, done)) {
		t.Fatalf("stored %+v, Fail returned %+v", g, done)
	}
	if effs := effects(t, s); len(effs) != 0 {
		t.Fatalf("Fail wrote effects %+v", effs)
	}
	want := []string{store.EventCreated, store.EventClaimed, store.EventFailed}
	if got := events(audit(t, s, c.CallID)); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	// Final: a second Fail is fenced and changes nothing.
	_, err = s.Fail(t.Context(), failure(c, true))
	wantErr(t, "second Fail", err, store.ErrFenced)
	if g := get(t, s, c.CallID); !jsonEq(t, g.ErrorJSON, f.Error) {
		t.Fatalf("second Fail overwrote the error: %s", g.ErrorJSON)
	}
}

func testEffectUniqueness(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("OnePerCallUnderRace", func(t *testing.T) {
		// Several workers finish the same attempt at once (a duplicated
		// delivery of one completion): exactly one commits.
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		const n = 8
		var (
			wg   sync.WaitGroup
			errs = make([]error, n)
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Succeed(t.Context(), completion(c))
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrFenced):
			default:
				t.Fatalf("Succeed %d: %v", i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d completions committed, want 1", ok)
		}
		if effs := effects(t, s); len(effs) != 1 {
			t.Fatalf("effects = %d, want 1", len(effs))
		}
		if d, err := s.Dupes(t.Context()); err != nil || len(d) != 0 {
			t.Fatalf("Dupes = %+v, %v; want none", d, err)
		}
	})

	t.Run("EffectIDIsUnique", func(t *testing.T) {
		// effect_id is the downstream idempotency key: two calls can never
		// share one. The second commit is refused as a whole.
		s := open(t)
		a := createAndClaim(t, s, "a", "w1", longLease)
		if _, err := s.Succeed(t.Context(), completion(a)); err != nil {
			t.Fatal(err)
		}
		b := createAndClaim(t, s, "b", "w1", longLease)
		comp := completion(b)
		comp.Effect.EffectID = effectIDFor(a.CallID)
		if _, err := s.Succeed(t.Context(), comp); err == nil {
			t.Fatal("Succeed reusing another call's effect id committed")
		}
		if effs := effects(t, s); len(effs) != 1 || effs[0].CallID != a.CallID {
			t.Fatalf("effects = %+v, want only a's", effs)
		}
		if g := get(t, s, b.CallID); g.Status != store.StatusRunning || g.EffectID != nil {
			t.Fatalf("refused commit changed b: %+v", g)
		}
	})
}

func testRecoverExpired(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	live := createAndClaim(t, s, "live", "w-live", longLease)
	done := createAndClaim(t, s, "done", "w-done", shortLease)
	if _, err := s.Succeed(t.Context(), completion(done)); err != nil {
		t.Fatal(err)
	}
	failed := createAndClaim(t, s, "failed", "w-failed", shortLease)
	if _, err := s.Fail(t.Context(), failure(failed, true)); err != nil {
		t.Fatal(err)
	}
	expired := createAndClaim(t, s, "expired", "w-dead", shortLease)
	// Created last so that the claims above do not pick it up.
	pending := create(t, s, "pending")

	var recovered []string
	eventually(t, "the expired lease to be recovered", func() bool {
		got, err := s.RecoverExpired(t.Context())
		if err != nil {
			t.Fatalf("RecoverExpired: %v", err)
		}
		recovered = append(recovered, got...)
		return len(recovered) > 0
	})
	if !reflect.DeepEqual(recovered, []string{expired.CallID}) {
		t.Fatalf("recovered %v, want only %s", recovered, expired.CallID)
	}
	g := get(t, s, expired.CallID)
	if g.Status != store.StatusPending || g.Owner != nil || g.LeaseUntil != nil || g.Attempt != 1 {
		t.Fatalf("recovered call = %+v, want pending, no owner or lease, attempt kept", g)
	}
	evs := audit(t, s, expired.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventRecover {
		t.Fatalf("last audit = %+v, want recover", last)
	}

	// Nothing else moved.
	if g := get(t, s, live.CallID); g.Status != store.StatusRunning || *g.Owner != "w-live" || g.Attempt != 1 {
		t.Fatalf("live lease touched: %+v", g)
	}
	for c, want := range map[string]store.Status{pending.CallID: store.StatusPending, done.CallID: store.StatusSucceeded, failed.CallID: store.StatusFailed} {
		if g := get(t, s, c); g.Status != want {
			t.Fatalf("%s: status %s, want %s", c, g.Status, want)
		}
	}
	for _, c := range []string{live.CallID, pending.CallID, done.CallID, failed.CallID} {
		if n := countEvent(audit(t, s, c), store.EventRecover); n != 0 {
			t.Fatalf("%s has %d recover events", c, n)
		}
	}
	if again, err := s.RecoverExpired(t.Context()); err != nil || len(again) != 0 {
		t.Fatalf("second RecoverExpired = %v, %v; want nothing", again, err)
	}
	// The recovered call is claimable again as attempt 2.
	got, err := s.ClaimNext(t.Context(), "w2", longLease, 10)
	if err != nil {
		t.Fatal(err)
	}
	var claimedAgain bool
	for _, c := range got {
		if c.CallID == expired.CallID {
			claimedAgain = c.Attempt == 2
		}
	}
	if !claimedAgain {
		t.Fatalf("recovered call not reclaimed as attempt 2: %+v", got)
	}
}

func testRelease(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	c := createAndClaim(t, s, "k1", "w1", longLease)

	wantErr(t, "Release by another owner", s.Release(t.Context(), c.CallID, "w2", c.Attempt, "x"), store.ErrNotClaimable)
	wantErr(t, "Release of another attempt", s.Release(t.Context(), c.CallID, "w1", c.Attempt+1, "x"), store.ErrNotClaimable)
	if g := get(t, s, c.CallID); g.Status != store.StatusRunning || *g.Owner != "w1" {
		t.Fatalf("refused Release changed the call: %+v", g)
	}

	if err := s.Release(t.Context(), c.CallID, "w1", c.Attempt, "owner pid 4242 gone"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	g := get(t, s, c.CallID)
	if g.Status != store.StatusPending || g.Owner != nil || g.LeaseUntil != nil || g.Attempt != 1 {
		t.Fatalf("released call = %+v, want pending without owner or lease, attempt kept", g)
	}
	evs := audit(t, s, c.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventRecover || last.Detail != "owner pid 4242 gone" {
		t.Fatalf("last audit = %+v, want recover with the reason", last)
	}
	wantErr(t, "second Release", s.Release(t.Context(), c.CallID, "w1", c.Attempt, "x"), store.ErrNotClaimable)

	// A final call cannot be released.
	d := claimOnly(t, s, "w3", longLease, c.CallID)
	if _, err := s.Succeed(t.Context(), completion(d)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Release of a succeeded call", s.Release(t.Context(), d.CallID, "w3", d.Attempt, "x"), store.ErrNotClaimable)
	if g := get(t, s, d.CallID); g.Status != store.StatusSucceeded {
		t.Fatalf("Release changed a final call to %s", g.Status)
	}

	wantErr(t, "Release of an unknown call", s.Release(t.Context(), newCallID(t), "w1", 1, "x"), store.ErrNotFound)
}

func testGet(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	c := create(t, s, "k1")
	byKey, err := s.GetByKey(t.Context(), "k1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(t, byKey), normalize(t, c)) {
		t.Fatalf("GetByKey = %+v, want %+v", byKey, c)
	}
	_, err = s.Get(t.Context(), newCallID(t))
	wantErr(t, "Get of an unknown id", err, store.ErrNotFound)
	_, err = s.GetByKey(t.Context(), "nope")
	wantErr(t, "GetByKey of an unknown key", err, store.ErrNotFound)
	// Keys are compared exactly (no case folding, no trimming).
	_, err = s.GetByKey(t.Context(), "K1")
	wantErr(t, "GetByKey with other case", err, store.ErrNotFound)
}

func testListCalls(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if got, err := s.ListCalls(t.Context(), store.ListFilter{}); err != nil || len(got) != 0 {
		t.Fatalf("ListCalls on empty store = %v, %v", ids(got), err)
	}
	var made []string
	for i := range 5 {
		made = append(made, create(t, s, fmt.Sprintf("k%d", i)).CallID)
		tick()
	}
	// Newest first.
	all, err := s.ListCalls(t.Context(), store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{made[4], made[3], made[2], made[1], made[0]}
	if !reflect.DeepEqual(ids(all), want) {
		t.Fatalf("ListCalls = %v, want newest first %v", ids(all), want)
	}
	limited, err := s.ListCalls(t.Context(), store.ListFilter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(limited), want[:2]) {
		t.Fatalf("ListCalls limit 2 = %v, want %v", ids(limited), want[:2])
	}

	// Claim the two oldest and finish one.
	got, err := s.ClaimNext(t.Context(), "w1", longLease, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("ClaimNext = %v, %v", ids(got), err)
	}
	if _, err := s.Succeed(t.Context(), completion(got[0])); err != nil {
		t.Fatal(err)
	}
	for status, want := range map[store.Status][]string{
		store.StatusSucceeded: {made[0]},
		store.StatusRunning:   {made[1]},
		store.StatusPending:   {made[4], made[3], made[2]},
		store.StatusFailed:    {},
	} {
		got, err := s.ListCalls(t.Context(), store.ListFilter{Status: status})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids(got), want) {
			t.Fatalf("ListCalls(%s) = %v, want %v", status, ids(got), want)
		}
		for _, c := range got {
			if c.Status != status {
				t.Fatalf("ListCalls(%s) returned a %s call", status, c.Status)
			}
		}
	}
	pend, err := s.ListCalls(t.Context(), store.ListFilter{Status: store.StatusPending, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(pend), []string{made[4]}) {
		t.Fatalf("ListCalls(pending, 1) = %v, want %v", ids(pend), made[4])
	}
	// Rows carry their columns.
	for _, c := range all {
		if !jsonEq(t, c.ArgsJSON, json.RawMessage(`{"amount":100}`)) || c.Fingerprint == "" || c.IdemKey == "" {
			t.Fatalf("listed call lacks columns: %+v", c)
		}
	}
}

func testListEffects(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if effs, err := s.ListEffects(t.Context(), 0); err != nil || len(effs) != 0 {
		t.Fatalf("ListEffects on empty store = %v, %v", effs, err)
	}
	var made []string
	for i := range 3 {
		c := createAndClaim(t, s, fmt.Sprintf("k%d", i), "w1", longLease)
		comp := completion(c)
		if i == 1 {
			comp.Effect.Tool, comp.Effect.Amount = "send_email", nil
		}
		if _, err := s.Succeed(t.Context(), comp); err != nil {
			t.Fatal(err)
		}
		made = append(made, comp.Effect.EffectID)
		tick()
	}
	effs := effects(t, s)
	var got []string
	for _, e := range effs {
		got = append(got, e.EffectID)
	}
	if want := []string{made[2], made[1], made[0]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEffects = %v, want newest first %v", got, want)
	}
	if effs[1].Tool != "send_email" || effs[1].Amount != nil {
		t.Fatalf("email effect = %+v, want tool send_email and no amount", effs[1])
	}
	lim, err := s.ListEffects(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(lim) != 2 || lim[0].EffectID != made[2] || lim[1].EffectID != made[1] {
		t.Fatalf("ListEffects(2) = %+v", lim)
	}
}

func testAudit(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if evs, err := s.Audit(t.Context(), "", 0); err != nil || len(evs) != 0 {
		t.Fatalf("Audit on empty store = %v, %v", evs, err)
	}
	a := createAndClaim(t, s, "a", "w1", longLease)
	b := createAndClaim(t, s, "b", "w2", longLease)
	if _, err := s.Succeed(t.Context(), completion(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fail(t.Context(), failure(b, false)); err != nil {
		t.Fatal(err)
	}

	all := audit(t, s, "")
	wantAll := []string{
		store.EventCreated, store.EventClaimed, // a
		store.EventCreated, store.EventClaimed, // b
		store.EventSucceeded, store.EventFailed,
	}
	if !reflect.DeepEqual(events(all), wantAll) {
		t.Fatalf("Audit(all) = %v, want %v", events(all), wantAll)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID || all[i].TS < all[i-1].TS {
			t.Fatalf("audit out of order at %d: %+v then %+v", i, all[i-1], all[i])
		}
	}
	for _, e := range all {
		if e.TS <= 0 || e.CallID == "" {
			t.Fatalf("audit row lacks ts or call id: %+v", e)
		}
	}

	onlyA := audit(t, s, a.CallID)
	if want := []string{store.EventCreated, store.EventClaimed, store.EventSucceeded}; !reflect.DeepEqual(events(onlyA), want) {
		t.Fatalf("Audit(a) = %v, want %v", events(onlyA), want)
	}
	for _, e := range onlyA {
		if e.CallID != a.CallID {
			t.Fatalf("Audit(a) returned a row of %s", e.CallID)
		}
	}
	if onlyA[1].Detail != "w1" {
		t.Fatalf("claimed detail = %q, want the owner w1", onlyA[1].Detail)
	}

	// With a limit: the newest rows, still oldest first.
	last2, err := s.Audit(t.Context(), "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(last2, all[len(all)-2:]) {
		t.Fatalf("Audit(all, 2) = %+v, want %+v", last2, all[len(all)-2:])
	}
	lastB, err := s.Audit(t.Context(), b.CallID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{store.EventClaimed, store.EventFailed}; !reflect.DeepEqual(events(lastB), want) {
		t.Fatalf("Audit(b, 2) = %v, want %v", events(lastB), want)
	}
	if evs, err := s.Audit(t.Context(), newCallID(t), 0); err != nil || len(evs) != 0 {
		t.Fatalf("Audit of unknown call = %v, %v; want empty", evs, err)
	}
}

func testStatsAttemptsDupes(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	st := stats(t, s)
	if st.Calls != 0 || st.Effects != 0 {
		t.Fatalf("empty stats = %+v", st)
	}
	if a, err := s.Attempts(t.Context()); err != nil || len(a) != 0 {
		t.Fatalf("Attempts on empty store = %v, %v", a, err)
	}

	// running (1), succeeded with effect (1), failed (1), succeeded after
	// a takeover (2), and last a pending call (0), created last so that
	// no claim above picks it up.
	createAndClaim(t, s, "running", "w1", longLease)
	ok := createAndClaim(t, s, "ok", "w1", longLease)
	if _, err := s.Succeed(t.Context(), completion(ok)); err != nil {
		t.Fatal(err)
	}
	bad := createAndClaim(t, s, "bad", "w1", longLease)
	if _, err := s.Fail(t.Context(), failure(bad, false)); err != nil {
		t.Fatal(err)
	}
	slow := createAndClaim(t, s, "slow", "w1", shortLease)
	var again store.Call
	eventually(t, "the short lease to be taken over", func() bool {
		got, err := s.ClaimNext(t.Context(), "w2", longLease, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			again = got[0]
		}
		return len(got) == 1
	})
	if again.CallID != slow.CallID {
		t.Fatalf("took over %s, want %s", again.CallID, slow.CallID)
	}
	if _, err := s.Succeed(t.Context(), completion(again)); err != nil {
		t.Fatal(err)
	}
	create(t, s, "pending")

	st = stats(t, s)
	if st.Calls != 5 || st.Effects != 2 {
		t.Fatalf("stats = %+v, want 5 calls 2 effects", st)
	}
	for status, want := range map[store.Status]int64{
		store.StatusPending: 1, store.StatusRunning: 1, store.StatusSucceeded: 2, store.StatusFailed: 1,
	} {
		if got := st.ByStatus[status]; got != want {
			t.Fatalf("by_status[%s] = %d, want %d (%+v)", status, got, want, st.ByStatus)
		}
	}

	att, err := s.Attempts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []store.AttemptBucket{{Attempt: 0, Calls: 1}, {Attempt: 1, Calls: 3}, {Attempt: 2, Calls: 1}}
	if !reflect.DeepEqual(att, want) {
		t.Fatalf("Attempts = %+v, want %+v", att, want)
	}
	if !sort.SliceIsSorted(att, func(i, j int) bool { return att[i].Attempt < att[j].Attempt }) {
		t.Fatalf("Attempts not ascending: %+v", att)
	}

	d, err := s.Dupes(t.Context())
	if err != nil || len(d) != 0 {
		t.Fatalf("Dupes = %+v, %v; want none (effects.call_id is UNIQUE)", d, err)
	}
}

func testPing(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with a canceled context succeeded")
	}
}

func testReadOnly(t *testing.T, openRO func(t *testing.T) (rw, ro store.Store)) {
	rw, ro := openRO(t)
	c := createAndClaim(t, rw, "k1", "w1", longLease)

	// Reads work and see the writer's commits.
	if g, err := ro.Get(t.Context(), c.CallID); err != nil || g.Status != store.StatusRunning {
		t.Fatalf("read-only Get = %+v, %v", g, err)
	}
	if _, err := ro.GetByKey(t.Context(), "k1"); err != nil {
		t.Fatalf("read-only GetByKey: %v", err)
	}
	if st, err := ro.Stats(t.Context()); err != nil || st.Calls != 1 {
		t.Fatalf("read-only Stats = %+v, %v", st, err)
	}
	if err := ro.Ping(t.Context()); err != nil {
		t.Fatalf("read-only Ping: %v", err)
	}
	for name, read := range map[string]func() error{
		"ListCalls":   func() error { _, err := ro.ListCalls(t.Context(), store.ListFilter{}); return err },
		"ListEffects": func() error { _, err := ro.ListEffects(t.Context(), 0); return err },
		"Audit":       func() error { _, err := ro.Audit(t.Context(), "", 0); return err },
		"Dupes":       func() error { _, err := ro.Dupes(t.Context()); return err },
		"Attempts":    func() error { _, err := ro.Attempts(t.Context()); return err },
	} {
		if err := read(); err != nil {
			t.Fatalf("read-only %s: %v", name, err)
		}
	}

	// Every write is refused with ErrReadOnly.
	for name, write := range map[string]func() error{
		"CreateOrGet": func() error { _, _, err := ro.CreateOrGet(t.Context(), newCall(t, "k2", "fp")); return err },
		"ClaimNext":   func() error { _, err := ro.ClaimNext(t.Context(), "w2", longLease, 1); return err },
		"Succeed":     func() error { _, err := ro.Succeed(t.Context(), completion(c)); return err },
		"Fail":        func() error { _, err := ro.Fail(t.Context(), failure(c, true)); return err },
		"RecoverExpired": func() error {
			_, err := ro.RecoverExpired(t.Context())
			return err
		},
		"Release": func() error { return ro.Release(t.Context(), c.CallID, "w1", c.Attempt, "x") },
	} {
		wantErr(t, "read-only "+name, write(), store.ErrReadOnly)
	}

	// Nothing changed.
	if st := stats(t, rw); st.Calls != 1 || st.Effects != 0 {
		t.Fatalf("stats after refused writes = %+v", st)
	}
	if g := get(t, rw, c.CallID); g.Status != store.StatusRunning || *g.Owner != "w1" {
		t.Fatalf("refused writes changed the call: %+v", g)
	}

	// And the writer still works after the reader was used.
	if _, err := rw.Succeed(t.Context(), completion(c)); err != nil {
		t.Fatalf("writer after read-only use: %v", err)
	}
	if g, err := ro.Get(t.Context(), c.CallID); err != nil || g.Status != store.StatusSucceeded {
		t.Fatalf("reader does not see the later commit: %+v, %v", g, err)
	}
}

// normalize re-encodes the JSON columns of c so calls read back through
// different paths compare equal regardless of how the backend formats JSON.
func normalize(t *testing.T, c store.Call) store.Call {
	t.Helper()
	re := func(m json.RawMessage) json.RawMessage {
		if m == nil {
			return nil
		}
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatalf("bad JSON %q: %v", m, err)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	c.ArgsJSON, c.ResultJSON, c.ErrorJSON = re(c.ArgsJSON), re(c.ResultJSON), re(c.ErrorJSON)
	return c
}
