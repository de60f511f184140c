package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// testExtendLease: a heartbeat keeps a short lease alive past its first
// deadline, so RecoverExpired and other claimers leave the call alone, and
// it writes no audit row; once the heartbeats stop, the lease expires as
// any other.
func testExtendLease(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	c := createAndClaim(t, s, "k", "w1", shortLease)
	before := len(audit(t, s, c.CallID))

	// Extend for a minute, then wait well past the claim's short lease.
	if err := s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, longLease); err != nil {
		t.Fatalf("ExtendLease: %v", err)
	}
	g := get(t, s, c.CallID)
	if g.LeaseUntil == nil || *c.LeaseUntil >= *g.LeaseUntil {
		t.Fatalf("lease_until %v after extension, claim's was %v; want later", g.LeaseUntil, *c.LeaseUntil)
	}
	if g.Status != store.StatusRunning || *g.Owner != "w1" || g.Attempt != c.Attempt || g.UpdatedAt != c.UpdatedAt {
		t.Fatalf("extension changed more than the lease: %+v", g)
	}
	time.Sleep(4 * shortLease)
	if rec, err := s.RecoverExpired(ctx); err != nil || len(rec) != 0 {
		t.Fatalf("RecoverExpired after an extension = %v, %v; want nothing", rec, err)
	}
	if got, err := s.ClaimNext(ctx, "w2", longLease, 10); err != nil || len(got) != 0 {
		t.Fatalf("ClaimNext of an extended lease = %v, %v; want nothing", ids(got), err)
	}
	if n := len(audit(t, s, c.CallID)); n != before {
		t.Fatalf("extension wrote %d audit row(s); heartbeats must write none", n-before)
	}
	// The holder completes normally.
	if _, err := s.Succeed(ctx, completion(c)); err != nil {
		t.Fatalf("Succeed after extensions: %v", err)
	}

	// A non-positive lease is refused and changes nothing.
	e := createAndClaim(t, s, "k3", "w1", longLease)
	for _, bad := range []time.Duration{0, -time.Second} {
		if err := s.ExtendLease(ctx, store.Lease{CallID: e.CallID, Owner: "w1", Attempt: e.Attempt}, bad); err == nil || store.IsSentinel(err) {
			t.Fatalf("ExtendLease(lease %v) = %v; want a plain error", bad, err)
		}
	}
	if g := get(t, s, e.CallID); *g.LeaseUntil != *e.LeaseUntil {
		t.Fatalf("refused extension moved the lease: %v, was %v", *g.LeaseUntil, *e.LeaseUntil)
	}

	// A short extension lapses like the claim's own lease.
	d := createAndClaim(t, s, "k2", "w1", longLease)
	if err := s.ExtendLease(ctx, store.Lease{CallID: d.CallID, Owner: "w1", Attempt: d.Attempt}, shortLease); err != nil {
		t.Fatalf("ExtendLease: %v", err)
	}
	eventually(t, "the shortened lease to expire", func() bool {
		rec, err := s.RecoverExpired(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(rec) == 1 && rec[0] == d.CallID
	})
}

// testExtendLeaseFencing: an extension is fenced by owner and attempt like
// a completion. A worker that lost the call (taken over after expiry,
// recovered, completed, released) is refused with ErrNotHeld, and the
// refusal changes nothing: the new holder's lease stays as it is.
func testExtendLeaseFencing(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()

	// Taken over: w1's lease expired and w2 claimed attempt 2.
	c := create(t, s, "k")
	first := claimOnly(t, s, "w1", shortLease, c.CallID)
	var second store.Call
	eventually(t, "w2 to take the call over", func() bool {
		if _, err := s.RecoverExpired(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := s.ClaimNext(ctx, "w2", longLease, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			second = got[0]
		}
		return len(got) == 1
	})
	before := get(t, s, c.CallID)
	wantErr(t, "stale extension (old attempt)", s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: first.Attempt}, longLease), store.ErrNotHeld)
	wantErr(t, "extension by another owner", s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: second.Attempt}, longLease), store.ErrNotHeld)
	if after := get(t, s, c.CallID); *after.LeaseUntil != *before.LeaseUntil || *after.Owner != "w2" || after.Attempt != 2 {
		t.Fatalf("refused extensions changed the call: %+v, was %+v", after, before)
	}
	// The holder's extension still works.
	if err := s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w2", Attempt: second.Attempt}, longLease); err != nil {
		t.Fatalf("holder's ExtendLease: %v", err)
	}

	// Completed: nothing left to extend.
	if _, err := s.Succeed(ctx, completion(second)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "extension of a completed call", s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w2", Attempt: second.Attempt}, longLease), store.ErrNotHeld)
	if g := get(t, s, c.CallID); g.Status != store.StatusSucceeded || g.LeaseUntil != nil {
		t.Fatalf("extension revived a completed call: %+v", g)
	}

	// Released (dead owner) and pending: not held either.
	d := createAndClaim(t, s, "k2", "w1", longLease)
	if err := s.Release(ctx, store.Lease{CallID: d.CallID, Owner: "w1", Attempt: d.Attempt}, "owner gone"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "extension of a released call", s.ExtendLease(ctx, store.Lease{CallID: d.CallID, Owner: "w1", Attempt: d.Attempt}, longLease), store.ErrNotHeld)
	if g := get(t, s, d.CallID); g.Status != store.StatusPending || g.LeaseUntil != nil || g.Owner != nil {
		t.Fatalf("extension revived a released call: %+v", g)
	}

	// No such call.
	wantErr(t, "extension of an unknown call", s.ExtendLease(ctx, store.Lease{CallID: newCallID(t), Owner: "w1", Attempt: 1}, longLease), store.ErrNotFound)
	if err := s.ExtendLease(ctx, store.Lease{CallID: newCallID(t), Owner: "w1", Attempt: 1}, longLease); errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("unknown call reported as not held: %v", err)
	}
}

// testQueue: Queue counts exactly the pending calls (running and final ones
// are not queued) and ages the oldest by its creation.
func testQueue(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	q, err := s.Queue(ctx)
	if err != nil {
		t.Fatalf("Queue: %v", err)
	}
	if q != (store.Queue{}) {
		t.Fatalf("empty store: Queue = %+v, want zero", q)
	}

	createAndClaim(t, s, "a", "w1", longLease) // running: not queued
	done := createAndClaim(t, s, "d", "w1", longLease)
	if _, err := s.Succeed(ctx, completion(done)); err != nil {
		t.Fatal(err)
	}
	create(t, s, "b")
	create(t, s, "c")
	time.Sleep(20 * time.Millisecond) // the oldest pending call ("b") ages
	q, err = s.Queue(ctx)
	if err != nil {
		t.Fatalf("Queue: %v", err)
	}
	if q.Pending != 2 {
		t.Fatalf("Queue.Pending = %d, want 2 (b and c)", q.Pending)
	}
	if q.OldestPendingAge < 20*time.Millisecond || q.OldestPendingAge > time.Hour {
		t.Fatalf("Queue.OldestPendingAge = %v, want at least 20ms (and sane)", q.OldestPendingAge)
	}
	if st := stats(t, s); st.ByStatus[store.StatusPending] != q.Pending {
		t.Fatalf("Queue.Pending = %d, Stats says %d pending", q.Pending, st.ByStatus[store.StatusPending])
	}
}

// testExtendLeaseCancelRequested: a heartbeat of a call whose cancel was
// requested (through any instance: the flag is in the row) still extends
// the lease, and answers ErrCancelRequested, so the worker stops the tool
// and keeps the lease while it records the cancel.
func testExtendLeaseCancelRequested(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	c := createAndClaim(t, s, "k", "w1", shortLease)
	if err := s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, longLease); err != nil {
		t.Fatalf("ExtendLease before any cancel: %v", err)
	}
	if _, outcome, err := s.Cancel(ctx, c.CallID, canceledErr, nil); err != nil || outcome != store.CancelRequested {
		t.Fatalf("Cancel of a running call = %v, %v; want CancelRequested", outcome, err)
	}
	before := get(t, s, c.CallID)
	time.Sleep(10 * time.Millisecond) // the database's clock moves on
	wantErr(t, "extension after a cancel request", s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, longLease), store.ErrCancelRequested)
	after := get(t, s, c.CallID)
	if after.Status != store.StatusRunning || after.LeaseUntil == nil || *after.LeaseUntil <= *before.LeaseUntil {
		t.Fatalf("extension with a cancel requested: %+v (lease was %v); want still running, lease extended", after, *before.LeaseUntil)
	}
	// A stale holder is told it lost the call, not that it was canceled.
	wantErr(t, "stale extension of a canceled call", s.ExtendLease(ctx, store.Lease{CallID: c.CallID, Owner: "w2", Attempt: c.Attempt}, longLease), store.ErrNotHeld)
}
