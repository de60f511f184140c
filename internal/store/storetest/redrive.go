package storetest

import (
	"encoding/json"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// testRedrive: Redrive returns a call still failed with the error it was
// selected for to pending through the same-key reset (error cleared,
// attempt, fingerprint and key kept), audited redriven with who did it;
// a call that was reset or changed since, or is not failed, is left
// alone (ok false, no audit row); an unknown call is ErrNotFound.
func testRedrive(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	c := createAndClaim(t, s, "k", "w", longLease)
	failed, err := s.Fail(ctx, failure(c, false))
	if err != nil {
		t.Fatal(err)
	}

	// Selected for another error: left alone.
	if got, ok, err := s.Redrive(ctx, c.CallID, "alice", json.RawMessage(`{"code":"other"}`)); err != nil || ok || got.Status != store.StatusFailed {
		t.Fatalf("Redrive(stale error) = %s, %v, %v; want the failed call untouched", got.Status, ok, err)
	}
	got, ok, err := s.Redrive(ctx, c.CallID, "alice", failed.ErrorJSON)
	if err != nil || !ok {
		t.Fatalf("Redrive = %v, %v; want ok", ok, err)
	}
	if got.Status != store.StatusPending || got.ErrorJSON != nil || got.ResultJSON != nil || got.Attempt != failed.Attempt ||
		got.Fingerprint != failed.Fingerprint || got.IdemKey != failed.IdemKey || got.Owner != nil || got.LeaseUntil != nil {
		t.Fatalf("redriven call = %+v; want pending, error cleared, attempt %d and fingerprint kept", got, failed.Attempt)
	}
	evs := audit(t, s, c.CallID)
	last := evs[len(evs)-1]
	if countEvent(evs, store.EventRedriven) != 1 || last.Event != store.EventRedriven || last.Detail != store.DetailRedriven("alice", failed.ErrorJSON) {
		t.Fatalf("audit %v, last %q %q; want one redriven %q", events(evs), last.Event, last.Detail, store.DetailRedriven("alice", failed.ErrorJSON))
	}
	// Pending now: a second redrive changes nothing.
	if got, ok, err := s.Redrive(ctx, c.CallID, "alice", failed.ErrorJSON); err != nil || ok || got.Status != store.StatusPending {
		t.Fatalf("Redrive(pending) = %s, %v, %v; want pending, not ok", got.Status, ok, err)
	}
	if n := countEvent(audit(t, s, c.CallID), store.EventRedriven); n != 1 {
		t.Fatalf("%d redriven rows after a redrive of a pending call, want 1", n)
	}
	// The next claim continues the attempts.
	again := claimOnly(t, s, "w", longLease, c.CallID)
	if again.Attempt != failed.Attempt+1 {
		t.Fatalf("attempt after redrive = %d, want %d", again.Attempt, failed.Attempt+1)
	}
	_, _, err = s.Redrive(ctx, "c_00000000deadbeef", "alice", failed.ErrorJSON)
	wantErr(t, "Redrive(unknown)", err, store.ErrNotFound)
}
