package storetest

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

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

	t.Run("LimitAndLease", func(t *testing.T) {
		s := open(t)
		c := create(t, s, "k1")
		for _, limit := range []int{0, -1} {
			got, err := s.ClaimNext(t.Context(), "w1", longLease, limit)
			if err != nil || got == nil || len(got) != 0 {
				t.Fatalf("ClaimNext(limit %d) = %#v, %v; want an empty, non-nil list", limit, got, err)
			}
		}
		if got, err := s.ClaimNext(t.Context(), "w1", -time.Second, 1); err == nil || len(got) != 0 {
			t.Fatalf("ClaimNext with a negative lease = %v, %v; want an error and nothing claimed", ids(got), err)
		}
		if g := get(t, s, c.CallID); g.Status != store.StatusPending || g.Attempt != 0 {
			t.Fatalf("call after refused claims = %+v, want pending at attempt 0", g)
		}
		if n := countEvent(audit(t, s, c.CallID), store.EventClaimed); n != 0 {
			t.Fatalf("claimed events = %d, want 0", n)
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
	// The attempt the takeover abandoned has an unknown outcome, audited
	// before the new claim, in its transaction (docs/lifecycle.md,
	// "Unknown outcomes").
	want := []string{store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventClaimed}
	evs := audit(t, s, stale.CallID)
	if got := events(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	wantDetail := fmt.Sprintf("abandoned: attempt 1 in flight, lease expired (owner %s, attempt 1)", *stale.Owner)
	if evs[2].Detail != wantDetail {
		t.Fatalf("outcome_unknown detail %q, want %q", evs[2].Detail, wantDetail)
	}
}

// testClaimQuotas: ClaimNext's per-tool quotas (per-tool concurrency)
// cap the calls of a tool one claim takes, pass over the calls of a full
// tool, pending or expired, without touching them, and cap nothing else.
func testClaimQuotas(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	mk := func(key, tool string) store.Call {
		t.Helper()
		n := newCall(t, key, "fp-"+key)
		n.Tool = tool
		c, out, err := s.CreateOrGet(t.Context(), n)
		if err != nil || out != store.Created {
			t.Fatalf("CreateOrGet(%s) = %v, %v", key, out, err)
		}
		tick()
		return c
	}
	// The oldest calls are of the capped tool, so an uncapped claim of
	// three would take only those.
	s1, s2, s3 := mk("s1", "sleep"), mk("s2", "sleep"), mk("s3", "sleep")
	c1, c2 := mk("c1", "charge"), mk("c2", "charge")

	got, err := s.ClaimNext(t.Context(), "w", longLease, 3, store.ToolQuota{Tool: "sleep", Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The candidates were the three oldest, all sleeps: one is taken, the
	// others passed over (the caller claims again without the full tool).
	if want := []string{s1.CallID}; !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("claim with sleep quota 1 = %v, want %v", ids(got), want)
	}
	for _, c := range []store.Call{s2, s3} {
		g := get(t, s, c.CallID)
		if g.Status != store.StatusPending || g.Attempt != 0 || len(audit(t, s, c.CallID)) != 1 {
			t.Fatalf("passed-over call %+v: want pending at attempt 0, nothing audited", g)
		}
	}
	// Full: none of the tool, whatever the limit; the others as usual.
	got, err = s.ClaimNext(t.Context(), "w", longLease, 5, store.ToolQuota{Tool: "sleep", Max: 0})
	if want := []string{c1.CallID, c2.CallID}; err != nil || !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("claim with sleep full = %v, %v; want %v", ids(got), err, want)
	}
	if got, err := s.ClaimNext(t.Context(), "w", longLease, 5, store.ToolQuota{Tool: "sleep", Max: 0}); err != nil || len(got) != 0 {
		t.Fatalf("claim with sleep full = %v, %v; want nothing", ids(got), err)
	}
	// A quota of another tool caps nothing here.
	got, err = s.ClaimNext(t.Context(), "w", longLease, 5, store.ToolQuota{Tool: "charge", Max: 0})
	if err != nil || !reflect.DeepEqual(ids(got), []string{s2.CallID, s3.CallID}) {
		t.Fatalf("claim with charge full = %v, %v; want s2, s3", ids(got), err)
	}

	// An expired lease of a full tool is passed over too.
	x := mk("x1", "sleep")
	xc := claimOnly(t, s, "dead", shortLease, x.CallID)
	// A call created after the lease's deadline (by the database's
	// clock) proves the claim below sees it expired. Of the full tool, so
	// the claim passes over it too.
	probes := 0
	eventually(t, "the lease to expire", func() bool {
		probes++
		return mk(fmt.Sprintf("probe%d", probes), "sleep").CreatedAt > *xc.LeaseUntil
	})
	if got, err := s.ClaimNext(t.Context(), "w", longLease, 5, store.ToolQuota{Tool: "sleep", Max: 0}); err != nil || len(got) != 0 {
		t.Fatalf("claim with sleep full = %v, %v; want the expired sleep passed over", ids(got), err)
	}
	claimOnly(t, s, "w", longLease, x.CallID)
}

// testClaimOldestAcrossPendingAndExpired: pending calls and running calls
// whose lease expired, interleaved by age, are claimed oldest first across
// both kinds, as one ORDER BY created_at over both would (SQLite reads
// them with two queries and merges them; PostgreSQL with one statement).
func testClaimOldestAcrossPendingAndExpired(t *testing.T, su suite) {
	db, s := su.fresh(t)
	var want []string
	for i := range 6 {
		c := create(t, s, fmt.Sprintf("k%d", i))
		want = append(want, c.CallID)
		// A strict age order, one second apart; the odd ones running
		// under a lease that expired long ago, the even ones pending.
		set := fmt.Sprintf("created_at = %d", 1001+i)
		if i%2 == 1 {
			set += ", status = 'running', owner = 'old', attempt = 1, lease_until = 1.0"
		}
		su.f.Exec(t, db, fmt.Sprintf("UPDATE calls SET %s WHERE call_id = '%s'", set, c.CallID))
	}
	for _, batch := range [][]string{want[:4], want[4:]} {
		got, err := s.ClaimNext(t.Context(), "new", longLease, 4)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids(got), batch) {
			t.Fatalf("claimed %v, want %v (oldest first across pending and expired)", ids(got), batch)
		}
		for _, c := range got {
			if c.Status != store.StatusRunning || c.Owner == nil || *c.Owner != "new" {
				t.Fatalf("claimed %+v, want running under new", c)
			}
			if stored := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, stored), normalize(t, c)) {
				t.Fatalf("stored %+v, ClaimNext returned %+v", stored, c)
			}
			// Each call's own story, whatever the others of its batch:
			// a taken-over attempt's outcome_unknown right before the
			// claim that took it over.
			wantEvents := []string{store.EventCreated, store.EventClaimed}
			if c.Attempt == 2 {
				wantEvents = []string{store.EventCreated, store.EventOutcomeUnknown, store.EventClaimed}
			}
			evs := audit(t, s, c.CallID)
			if got := events(evs); !reflect.DeepEqual(got, wantEvents) {
				t.Fatalf("audit of %s = %v, want %v", c.CallID, got, wantEvents)
			}
			if c.Attempt == 2 && evs[1].Detail != "abandoned: attempt 1 in flight, lease expired (owner old, attempt 1)" {
				t.Fatalf("outcome_unknown detail of %s = %q", c.CallID, evs[1].Detail)
			}
			if last := evs[len(evs)-1]; last.Detail != "new" {
				t.Fatalf("claimed detail of %s = %q, want the owner new", c.CallID, last.Detail)
			}
		}
	}
}
