package storetest

import (
	"encoding/json"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

var canceledErr = json.RawMessage(`{"code":"canceled","message":"canceled by request","retryable":false}`)

// testCancel: Cancel fails a pending call at once, marks a running one
// (once), leaves a final one alone, and loses cleanly to a completion that
// committed first; retry reset clears the mark, recovery keeps it.
func testCancel(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()

	_, _, err := s.Cancel(ctx, "c_ffffffffffffffff", canceledErr, nil)
	wantErr(t, "Cancel(unknown)", err, store.ErrNotFound)

	// pending → failed canceled, not claimable any more.
	p := create(t, s, "pending")
	got, out, err := s.Cancel(ctx, p.CallID, canceledErr, nil)
	if err != nil || out != store.Canceled || got.Status != store.StatusFailed || !jsonEq(t, got.ErrorJSON, canceledErr) {
		t.Fatalf("Cancel(pending) = %s %v %s, %v; want failed canceled", got.Status, out, got.ErrorJSON, err)
	}
	if evs := events(audit(t, s, p.CallID)); evs[len(evs)-1] != store.EventCanceled {
		t.Fatalf("audit %v, want it to end with canceled", evs)
	}
	if claimed, err := s.ClaimNext(ctx, "w", longLease, 10); err != nil || len(claimed) != 0 {
		t.Fatalf("a canceled call was claimed: %v, %v", ids(claimed), err)
	}
	if _, out, _ := s.Cancel(ctx, p.CallID, canceledErr, nil); out != store.AlreadyFinal {
		t.Fatalf("Cancel(canceled) = %v, want already final", out)
	}

	// running → cancel requested, once; the worker then records the
	// cancellation.
	r := createAndClaim(t, s, "running", "w", longLease)
	for range 2 {
		got, out, err = s.Cancel(ctx, r.CallID, canceledErr, nil)
		if err != nil || out != store.CancelRequested || got.Status != store.StatusRunning || !got.CancelRequested {
			t.Fatalf("Cancel(running) = %s %v requested=%v, %v", got.Status, out, got.CancelRequested, err)
		}
	}
	if n := countEvent(audit(t, s, r.CallID), store.EventCancelRequested); n != 1 {
		t.Fatalf("%d cancel_requested audit rows, want 1", n)
	}
	if !get(t, s, r.CallID).CancelRequested {
		t.Fatal("Get does not show cancel_requested")
	}

	// A completion that commits first wins: the call stays succeeded, with
	// its effect, and a later cancel is already final.
	done := createAndClaim(t, s, "race", "w", longLease)
	if _, out, err := s.Cancel(ctx, done.CallID, canceledErr, nil); err != nil || out != store.CancelRequested {
		t.Fatalf("Cancel(running) = %v, %v", out, err)
	}
	if c, err := s.Succeed(ctx, completion(done)); err != nil || c.Status != store.StatusSucceeded {
		t.Fatalf("Succeed after a cancel request = %v, %v; want succeeded (the tool finished first)", c.Status, err)
	}
	if c, out, err := s.Cancel(ctx, done.CallID, canceledErr, nil); err != nil || out != store.AlreadyFinal || c.Status != store.StatusSucceeded || c.EffectID == nil {
		t.Fatalf("Cancel(succeeded) = %s %v, %v", c.Status, out, err)
	}

	// Recovery keeps the mark (the next claimer must not run it); a retry
	// reset clears it (the client asked again).
	f := createAndClaim(t, s, "reset", "w", longLease)
	if _, _, err := s.Cancel(ctx, f.CallID, canceledErr, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fail(ctx, failure(f, true)); err != nil {
		t.Fatal(err)
	}
	n := newCall(t, "reset", "fp-reset")
	if c, out, err := s.CreateOrGet(ctx, n); err != nil || out != store.RetryReset || c.CancelRequested {
		t.Fatalf("retry reset = %v requested=%v, %v; want the mark cleared", out, c.CancelRequested, err)
	}
	claimOnly(t, s, "w", longLease, f.CallID) // out of the way of the next claim
	rec := createAndClaim(t, s, "recovered", "w", shortLease)
	if _, _, err := s.Cancel(ctx, rec.CallID, canceledErr, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lease expires and the call is recovered", func() bool {
		ids, err := s.RecoverExpired(ctx)
		return err == nil && len(ids) == 1
	})
	if c := get(t, s, rec.CallID); c.Status != store.StatusPending || !c.CancelRequested {
		t.Fatalf("recovered call: %s requested=%v, want pending with the mark kept", c.Status, c.CancelRequested)
	}
}
