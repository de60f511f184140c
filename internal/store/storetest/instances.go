package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// instances opens n stores on one fresh database, as n server processes
// sharing it would.
func (su suite) instances(t *testing.T, n int) []store.Store {
	t.Helper()
	db, first := su.fresh(t)
	out := []store.Store{first}
	for len(out) < n {
		out = append(out, su.openOn(t, db, store.Options{}))
	}
	return out
}

// testInstances: two stores on one database keep every invariant that one
// store keeps: one call per key, one reset per failure, one claim per call,
// live leases respected, a dead instance's call recovered by the other.
func testInstances(t *testing.T, su suite) {
	t.Run("CreateOrGetOneCall", func(t *testing.T) {
		inst := su.instances(t, 2)
		const perInstance = 12
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			mu       sync.Mutex
			callIDs  = map[string]int{}
			outcomes = map[store.Outcome]int{}
			errs     []error
		)
		for _, s := range inst {
			for range perInstance {
				n := newCall(t, "one-key", "fp") // each request brings its own call id
				wg.Go(func() {
					<-start
					c, out, err := s.CreateOrGet(t.Context(), n)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					callIDs[c.CallID]++
					outcomes[out]++
				})
			}
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("CreateOrGet errors: %v", errs)
		}
		if len(callIDs) != 1 || outcomes[store.Created] != 1 || outcomes[store.Existing] != 2*perInstance-1 {
			t.Fatalf("call ids %v, outcomes %v; want one id, 1 created, %d existing", callIDs, outcomes, 2*perInstance-1)
		}
		for _, s := range inst {
			if st := stats(t, s); st.Calls != 1 {
				t.Fatalf("stats = %+v; want 1 call", st)
			}
		}
		if n := countEvent(audit(t, inst[1], ""), store.EventCreated); n != 1 {
			t.Fatalf("created audit rows = %d, want 1", n)
		}
	})

	t.Run("RetryResetOnce", func(t *testing.T) {
		inst := su.instances(t, 2)
		c := createAndClaim(t, inst[0], "flaky", "w", longLease)
		if _, err := inst[0].Fail(t.Context(), failure(c, true)); err != nil {
			t.Fatal(err)
		}
		const perInstance = 8
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			mu       sync.Mutex
			outcomes = map[store.Outcome]int{}
			errs     []error
		)
		for _, s := range inst {
			for range perInstance {
				n := newCall(t, "flaky", "fp-flaky")
				wg.Go(func() {
					<-start
					r, out, err := s.CreateOrGet(t.Context(), n)
					mu.Lock()
					defer mu.Unlock()
					if err == nil && (r.CallID != c.CallID || r.Status != store.StatusPending) {
						err = fmt.Errorf("got %+v, want %s pending", r, c.CallID)
					}
					if err != nil {
						errs = append(errs, err)
					}
					outcomes[out]++
				})
			}
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("CreateOrGet errors: %v", errs)
		}
		if outcomes[store.RetryReset] != 1 || outcomes[store.Existing] != 2*perInstance-1 {
			t.Fatalf("outcomes = %v, want 1 retry_reset and %d existing", outcomes, 2*perInstance-1)
		}
		if n := countEvent(audit(t, inst[1], c.CallID), store.EventRetryReset); n != 1 {
			t.Fatalf("retry_reset audit rows = %d, want 1", n)
		}
	})

	t.Run("ClaimEachCallOnce", func(t *testing.T) {
		inst := su.instances(t, 2)
		const calls, workersPerInstance = 40, 3
		for i := range calls {
			create(t, inst[i%2], fmt.Sprintf("k%d", i))
		}
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			claimed = map[string][]string{}
			errs    []error
		)
		for i, s := range inst {
			for w := range workersPerInstance {
				owner := fmt.Sprintf("inst%d-w%d", i, w)
				wg.Go(func() {
					<-start
					for {
						got, err := s.ClaimNext(t.Context(), owner, longLease, 4)
						mu.Lock()
						if err != nil {
							errs = append(errs, err)
						}
						for _, c := range got {
							claimed[c.CallID] = append(claimed[c.CallID], owner)
						}
						mu.Unlock()
						if err != nil || len(got) == 0 {
							return
						}
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("ClaimNext errors: %v", errs)
		}
		if len(claimed) != calls {
			t.Fatalf("claimed %d distinct calls, want %d", len(claimed), calls)
		}
		for id, owners := range claimed {
			if len(owners) != 1 {
				t.Errorf("call %s claimed %d times, by %v", id, len(owners), owners)
			}
		}
		running, err := inst[0].ListCalls(t.Context(), store.ListFilter{Status: store.StatusRunning})
		if err != nil {
			t.Fatal(err)
		}
		if len(running) != calls {
			t.Fatalf("running calls = %d, want %d", len(running), calls)
		}
		for _, c := range running {
			if c.Attempt != 1 {
				t.Fatalf("call %s at attempt %d, want 1", c.CallID, c.Attempt)
			}
		}
		if n := countEvent(audit(t, inst[1], ""), store.EventClaimed); n != calls {
			t.Fatalf("claimed audit rows = %d, want %d", n, calls)
		}
	})

	t.Run("LiveLeaseNeverTakenByOtherInstance", func(t *testing.T) {
		inst := su.instances(t, 2)
		a, b := inst[0], inst[1]
		ctx := t.Context()

		held := createAndClaim(t, a, "live", "A", longLease)
		if got, err := b.ClaimNext(ctx, "B", longLease, 10); err != nil || len(got) != 0 {
			t.Fatalf("B claimed under A's live lease: %v, %v", ids(got), err)
		}
		if rec, err := b.RecoverExpired(ctx); err != nil || len(rec) != 0 {
			t.Fatalf("B recovered A's live lease: %v, %v", rec, err)
		}
		wantErr(t, "B's Release of A's call", b.Release(ctx, store.Lease{CallID: held.CallID, Owner: "B", Attempt: held.Attempt}, "B thinks it is dead"), store.ErrNotHeld)
		forged := completion(held)
		forged.Owner = "B"
		_, err := b.Succeed(ctx, forged)
		wantErr(t, "B's Succeed with its own name", err, store.ErrFenced)
		if g := get(t, b, held.CallID); g.Status != store.StatusRunning || *g.Owner != "A" || g.Attempt != 1 {
			t.Fatalf("A's call after B's attempts = %+v; want running by A, attempt 1", g)
		}

		// A short lease held by A, which then stalls.
		short := create(t, a, "short")
		stale := claimOnly(t, a, "A", 300*time.Millisecond, short.CallID)
		var taken store.Call
		eventually(t, "B to take over the expired lease", func() bool {
			got, err := b.ClaimNext(ctx, "B", longLease, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 1 {
				taken = got[0]
			}
			return len(got) == 1
		})
		if taken.CallID != short.CallID || taken.Attempt != 2 {
			t.Fatalf("B took %+v, want %s at attempt 2", taken, short.CallID)
		}
		// The takeover's "now" (its updated_at, the database's clock) is
		// at or after A's deadline: B did not move early.
		if taken.UpdatedAt < *stale.LeaseUntil {
			t.Fatalf("B took over at db time %.6f, before A's lease ended at %.6f", taken.UpdatedAt, *stale.LeaseUntil)
		}
		_, err = a.Succeed(ctx, completion(stale))
		wantErr(t, "A's late Succeed", err, store.ErrFenced)
		if _, err := b.Succeed(ctx, completion(taken)); err != nil {
			t.Fatalf("B's Succeed: %v", err)
		}
		var mine []store.Effect
		for _, e := range effects(t, a) {
			if e.CallID == short.CallID {
				mine = append(mine, e)
			}
		}
		if len(mine) != 1 {
			t.Fatalf("effects of the taken-over call = %+v, want exactly 1", mine)
		}
		if n := countEvent(audit(t, a, short.CallID), store.EventFenced); n != 1 {
			t.Fatalf("fenced audit rows = %d, want 1", n)
		}
	})

	t.Run("RecoversDeadInstancesCall", func(t *testing.T) {
		db, dead := su.fresh(t)
		survivor := su.openOn(t, db, store.Options{})
		c := createAndClaim(t, dead, "k", "dead", 200*time.Millisecond)
		if err := dead.Close(); err != nil { // the instance is gone; its lease remains
			t.Fatal(err)
		}
		var recovered []string
		eventually(t, "the survivor to recover the dead instance's call", func() bool {
			got, err := survivor.RecoverExpired(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			recovered = append(recovered, got...)
			return len(recovered) > 0
		})
		if !reflect.DeepEqual(recovered, []string{c.CallID}) {
			t.Fatalf("recovered %v, want [%s]", recovered, c.CallID)
		}
		again := claimOnly(t, survivor, "survivor", longLease, c.CallID)
		if again.Attempt != 2 {
			t.Fatalf("survivor's claim at attempt %d, want 2", again.Attempt)
		}
		if done, err := survivor.Succeed(t.Context(), completion(again)); err != nil || done.Status != store.StatusSucceeded {
			t.Fatalf("survivor's Succeed = %+v, %v", done, err)
		}
		if st := stats(t, survivor); st.Calls != 1 || st.Effects != 1 {
			t.Fatalf("stats = %+v; want 1 call 1 effect", st)
		}
		want := []string{store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventRecover, store.EventClaimed, store.EventSucceeded}
		if got := events(audit(t, survivor, c.CallID)); !reflect.DeepEqual(got, want) {
			t.Fatalf("audit = %v, want %v", got, want)
		}
	})
}

// testClosedStore: once closed, every method of a store fails with
// ErrUnavailable (never a driver's own "closed" error, never a hang), a
// second Close is harmless, and another store on the same database is not
// affected.
func testClosedStore(t *testing.T, su suite) {
	db, s := su.fresh(t)
	c := createAndClaim(t, s, "k1", "w1", longLease)
	other := su.openOn(t, db, store.Options{})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"CreateOrGet": func() error { _, _, err := s.CreateOrGet(ctx, newCall(t, "k2", "fp")); return err },
		"ClaimNext":   func() error { _, err := s.ClaimNext(ctx, "w2", longLease, 1); return err },
		"Succeed":     func() error { _, err := s.Succeed(ctx, completion(c)); return err },
		"Fail": func() error {
			_, err := s.Fail(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: "w1", Attempt: 1}, Error: json.RawMessage(`{}`)})
			return err
		},
		"RecoverExpired": func() error { _, err := s.RecoverExpired(ctx); return err },
		"Release":        func() error { return s.Release(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: 1}, "x") },
		"ExtendLease": func() error {
			return s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: 1}, longLease)
		},
		"Queue":       func() error { _, err := s.Queue(ctx); return err },
		"Get":         func() error { _, err := s.Get(ctx, c.Principal, c.CallID); return err },
		"GetAny":      func() error { _, err := s.GetAny(ctx, c.CallID); return err },
		"GetByKey":    func() error { _, err := s.GetByKey(ctx, store.DefaultPrincipal, "k1"); return err },
		"ListCalls":   func() error { _, err := s.ListCalls(ctx, store.ListFilter{}); return err },
		"ListEffects": func() error { _, err := s.ListEffects(ctx, 0); return err },
		"Audit":       func() error { _, err := s.Audit(ctx, "", 0); return err },
		"Dupes":       func() error { _, err := s.Dupes(ctx); return err },
		"Attempts":    func() error { _, err := s.Attempts(ctx); return err },
		"Stats":       func() error { _, err := s.Stats(ctx); return err },
		"Ping":        func() error { return s.Ping(ctx) },
	} {
		if err := call(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s on a closed store: err = %v, want ErrUnavailable", name, err)
		}
	}
	if g := get(t, other, c.CallID); g.Status != store.StatusRunning || *g.Owner != "w1" {
		t.Fatalf("the other store sees %+v; want the call untouched", g)
	}
}
