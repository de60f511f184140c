package storetest

import (
	"reflect"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

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
	if last := evs[len(evs)-1]; last.Event != store.EventRecover || last.Detail != "lease expired (owner w-dead, attempt 1)" {
		t.Fatalf("last audit = %+v, want recover with detail \"lease expired (owner w-dead, attempt 1)\"", last)
	}
	wantAbandoned(t, evs, "abandoned: attempt 1 in flight, lease expired (owner w-dead, attempt 1)")

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

	wantErr(t, "Release by another owner", s.Release(t.Context(), store.Lease{CallID: c.CallID, Owner: "w2", Attempt: c.Attempt}, "x"), store.ErrNotHeld)
	wantErr(t, "Release of another attempt", s.Release(t.Context(), store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt + 1}, "x"), store.ErrNotHeld)
	if g := get(t, s, c.CallID); g.Status != store.StatusRunning || *g.Owner != "w1" {
		t.Fatalf("refused Release changed the call: %+v", g)
	}

	if err := s.Release(t.Context(), store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, "owner pid 4242 gone"); err != nil {
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
	wantAbandoned(t, evs, "abandoned: attempt 1 in flight, owner pid 4242 gone")
	wantErr(t, "second Release", s.Release(t.Context(), store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, "x"), store.ErrNotHeld)

	// A final call cannot be released.
	d := claimOnly(t, s, "w3", longLease, c.CallID)
	if _, err := s.Succeed(t.Context(), completion(d)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Release of a succeeded call", s.Release(t.Context(), store.Lease{CallID: d.CallID, Owner: "w3", Attempt: d.Attempt}, "x"), store.ErrNotHeld)
	if g := get(t, s, d.CallID); g.Status != store.StatusSucceeded {
		t.Fatalf("Release changed a final call to %s", g.Status)
	}

	wantErr(t, "Release of an unknown call", s.Release(t.Context(), store.Lease{CallID: newCallID(t), Owner: "w1", Attempt: 1}, "x"), store.ErrNotFound)
}

// testRecoverWithoutLease: a running call whose lease_until is NULL (no
// claim writes that; a damaged or hand-edited row may) is recovered by
// RecoverExpired on every backend, not left running for ever; ClaimNext
// does not take it directly.
func testRecoverWithoutLease(t *testing.T, su suite) {
	db, s := su.fresh(t)
	c := createAndClaim(t, s, "k1", "w1", longLease)
	su.f.Exec(t, db, "UPDATE calls SET lease_until = NULL WHERE call_id = '"+c.CallID+"'")
	if g := get(t, s, c.CallID); g.Status != store.StatusRunning || g.LeaseUntil != nil {
		t.Fatalf("set-up: call = %+v, want running without lease_until", g)
	}
	if got, err := s.ClaimNext(t.Context(), "w2", longLease, 10); err != nil || len(got) != 0 {
		t.Fatalf("ClaimNext of a running call without lease = %v, %v; want nothing (recovery first)", ids(got), err)
	}
	rec, err := s.RecoverExpired(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec, []string{c.CallID}) {
		t.Fatalf("RecoverExpired = %v, want [%s]", rec, c.CallID)
	}
	if g := get(t, s, c.CallID); g.Status != store.StatusPending || g.Owner != nil || g.Attempt != 1 {
		t.Fatalf("recovered call = %+v, want pending without owner, attempt kept", g)
	}
	evs := audit(t, s, c.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventRecover || last.Detail != "lease expired (owner w1, attempt 1)" {
		t.Fatalf("last audit = %+v, want recover with detail \"lease expired (owner w1, attempt 1)\"", last)
	}
	claimOnly(t, s, "w2", longLease, c.CallID)
}

// wantAbandoned checks that the recover event ending evs is preceded by
// the outcome_unknown event of the abandoned attempt (docs/lifecycle.md,
// "Unknown outcomes"), and that the call has only that one.
func wantAbandoned(t *testing.T, evs []store.AuditEvent, detail string) {
	t.Helper()
	if len(evs) < 2 {
		t.Fatalf("audit %v: want outcome_unknown before recover", events(evs))
	}
	if e := evs[len(evs)-2]; e.Event != store.EventOutcomeUnknown || e.Detail != detail {
		t.Fatalf("audit before recover = %+v, want outcome_unknown %q", e, detail)
	}
	if n := countEvent(evs, store.EventOutcomeUnknown); n != 1 {
		t.Fatalf("%d outcome_unknown events, want 1: %v", n, events(evs))
	}
}
