package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// testScheduleRetry checks server-side retries at the seam
// (docs/lifecycle.md, "Server-side retries"): ScheduleRetry returns a
// running call to pending with a not-before time, fenced like Fail, and
// ClaimNext respects that time by the database's clock.
func testScheduleRetry(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("NotClaimableBeforeItsTime", func(t *testing.T) {
		s := open(t)
		a := createAndClaim(t, s, "k1", "w1", longLease)
		tick()
		b := create(t, s, "k2") // younger than a: a would be claimed first if it were claimable
		f := failure(a, true)
		r, err := s.ScheduleRetry(t.Context(), f, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The failure it waits out is its error: the reason it waits.
		if r.Status != store.StatusPending || r.Owner != nil || r.LeaseUntil != nil || !jsonEq(t, r.ErrorJSON, f.Error) || r.Attempt != 1 {
			t.Fatalf("scheduled call = %+v (error %s), want pending at attempt 1 without owner or lease, error %s", r, r.ErrorJSON, f.Error)
		}
		if r.NotBefore == nil || *r.NotBefore < r.UpdatedAt+59 || *r.NotBefore > r.UpdatedAt+61 {
			t.Fatalf("not_before = %v, updated_at = %v: want updated_at + 60s", r.NotBefore, r.UpdatedAt)
		}
		if g := get(t, s, a.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, r)) {
			t.Fatalf("stored %+v, ScheduleRetry returned %+v", g, r)
		}
		// Only b is claimable: a waits for its not-before time.
		got, err := s.ClaimNext(t.Context(), "w2", longLease, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].CallID != b.CallID {
			t.Fatalf("ClaimNext = %v, want only %s (%s waits for its retry time)", ids(got), b.CallID, a.CallID)
		}
		if got, err := s.ClaimNext(t.Context(), "w2", longLease, 5); err != nil || len(got) != 0 {
			t.Fatalf("ClaimNext = %v, %v; want nothing before the retry time", ids(got), err)
		}
		if g := get(t, s, a.CallID); g.Status != store.StatusPending || g.Attempt != 1 {
			t.Fatalf("waiting call = %+v, want pending at attempt 1", g)
		}
		// A retrying call is still pending: the queue counts it.
		if q, err := s.Queue(t.Context()); err != nil || q.Pending != 1 {
			t.Fatalf("Queue = %+v, %v; want 1 pending", q, err)
		}
		want := []string{store.EventCreated, store.EventClaimed, store.EventRetryScheduled}
		evs := audit(t, s, a.CallID)
		if got := events(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("audit = %v, want %v", got, want)
		}
		if d := evs[2].Detail; d != "in 1m0s after tool_failed: boom" {
			t.Fatalf("retry_scheduled detail = %q, want %q", d, "in 1m0s after tool_failed: boom")
		}
	})

	t.Run("ClaimableAfterItsTime", func(t *testing.T) {
		s := open(t)
		a := createAndClaim(t, s, "k1", "w1", longLease)
		r, err := s.ScheduleRetry(t.Context(), failure(a, true), 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		var claimed store.Call
		eventually(t, "the retry to become claimable", func() bool {
			got, err := s.ClaimNext(t.Context(), "w2", longLease, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 1 {
				claimed = got[0]
			}
			return len(got) == 1
		})
		if claimed.CallID != a.CallID || claimed.Attempt != 2 || claimed.Status != store.StatusRunning {
			t.Fatalf("claimed %+v, want %s running at attempt 2 (the attempt counts claims)", claimed, a.CallID)
		}
		// The claim clears the waited-out failure: a running call has no
		// error, as returned and as stored.
		if claimed.ErrorJSON != nil || get(t, s, a.CallID).ErrorJSON != nil {
			t.Fatalf("claimed call keeps the error %s", claimed.ErrorJSON)
		}
		// By the database's clock, the claim came no earlier than the
		// not-before time.
		if claimed.UpdatedAt < *r.NotBefore {
			t.Fatalf("claimed at %v, before not_before %v", claimed.UpdatedAt, *r.NotBefore)
		}
	})

	t.Run("Fenced", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		for _, stale := range []store.Completion{
			{Lease: store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt + 1}},
			{Lease: store.Lease{CallID: c.CallID, Owner: "other", Attempt: c.Attempt}},
		} {
			stale.Error = failure(c, true).Error
			_, err := s.ScheduleRetry(t.Context(), stale, 0)
			wantErr(t, "stale ScheduleRetry", err, store.ErrFenced)
		}
		g := get(t, s, c.CallID)
		if g.Status != store.StatusRunning || g.Owner == nil || *g.Owner != "w1" || g.NotBefore != nil {
			t.Fatalf("after stale ScheduleRetry: %+v, want running under w1 without not_before", g)
		}
		want := []string{store.EventCreated, store.EventClaimed, store.EventFenced, store.EventFenced}
		evs := audit(t, s, c.CallID)
		if got := events(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("audit = %v, want %v", got, want)
		}
		if d, w := evs[2].Detail, "owner w1 attempt 2 refused: call is running under owner w1 attempt 1"; d != w {
			t.Fatalf("fenced detail = %q, want %q", d, w)
		}
		// A completed call is fenced too.
		if _, err := s.Fail(t.Context(), failure(c, true)); err != nil {
			t.Fatal(err)
		}
		_, err := s.ScheduleRetry(t.Context(), failure(c, true), 0)
		wantErr(t, "ScheduleRetry after Fail", err, store.ErrFenced)
		if g := get(t, s, c.CallID); g.Status != store.StatusFailed {
			t.Fatalf("after fenced ScheduleRetry: %+v, want failed", g)
		}
		_, err = s.ScheduleRetry(t.Context(), store.Completion{Lease: store.Lease{CallID: "c_00000000000000ff", Owner: "w1", Attempt: 1}}, 0)
		wantErr(t, "ScheduleRetry of an unknown call", err, store.ErrNotFound)
	})

	t.Run("NegativeDelay", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		if _, err := s.ScheduleRetry(t.Context(), failure(c, true), -time.Second); err == nil {
			t.Fatal("ScheduleRetry with a negative delay: no error")
		}
		if g := get(t, s, c.CallID); g.Status != store.StatusRunning || len(audit(t, s, c.CallID)) != 2 {
			t.Fatalf("after refused ScheduleRetry: %+v, want running, nothing audited", g)
		}
	})

	t.Run("ResetClearsNotBefore", func(t *testing.T) {
		// Retries exhausted: the last attempt fails (retryable); a
		// same-key request resets it, and the reset call is claimable at
		// once whatever the old not-before time said.
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		if _, err := s.ScheduleRetry(t.Context(), failure(c, true), 0); err != nil {
			t.Fatal(err)
		}
		c2 := claimOnly(t, s, "w1", longLease, c.CallID)
		if c2.NotBefore == nil {
			t.Fatalf("claimed retry %+v: want its not_before kept", c2)
		}
		if _, err := s.Fail(t.Context(), failure(c2, true)); err != nil {
			t.Fatal(err)
		}
		r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
		if err != nil || out != store.RetryReset {
			t.Fatalf("CreateOrGet = %v, %v; want retry_reset", out, err)
		}
		if r.NotBefore != nil || r.Attempt != 2 {
			t.Fatalf("reset call = %+v, want no not_before, attempt 2", r)
		}
		if g := get(t, s, c.CallID); g.NotBefore != nil {
			t.Fatalf("stored reset call has not_before %v", *g.NotBefore)
		}
	})
}
