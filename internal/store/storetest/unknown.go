package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// testOutcomeUnknownAudit: a completion whose error is outcome_unknown is
// audited outcome_unknown ("case: message") right before its failed or
// retry_scheduled event, in the same transaction; any other error is not
// (docs/lifecycle.md, "Unknown outcomes").
func testOutcomeUnknownAudit(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	unknownErr, err := json.Marshal(wire.CallError{Code: wire.CodeOutcomeUnknown, Retryable: true,
		Unknown: wire.UnknownTimeoutAfterSend, Message: "the request was sent, then no complete answer within the tool's timeout of 2s"})
	if err != nil {
		t.Fatal(err)
	}
	const detail = "timeout_after_send: the request was sent, then no complete answer within the tool's timeout of 2s"

	failed := createAndClaim(t, s, "unknown-fail", "w1", longLease)
	comp := failure(failed, true)
	comp.Error = unknownErr
	if _, err := s.Fail(t.Context(), comp); err != nil {
		t.Fatal(err)
	}
	evs := audit(t, s, failed.CallID)
	if got, want := events(evs), []string{store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventFailed}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Fail audit %v, want %v", got, want)
	}
	if evs[2].Detail != detail {
		t.Fatalf("outcome_unknown detail %q, want %q", evs[2].Detail, detail)
	}
	if g := get(t, s, failed.CallID); !jsonEq(t, g.ErrorJSON, unknownErr) {
		t.Fatalf("stored error %s, want %s", g.ErrorJSON, unknownErr)
	}

	retried := createAndClaim(t, s, "unknown-retry", "w1", longLease)
	comp = failure(retried, true)
	comp.Error = unknownErr
	if _, err := s.ScheduleRetry(t.Context(), comp, time.Hour); err != nil {
		t.Fatal(err)
	}
	evs = audit(t, s, retried.CallID)
	if got, want := events(evs), []string{store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventRetryScheduled}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ScheduleRetry audit %v, want %v", got, want)
	}
	if evs[2].Detail != detail {
		t.Fatalf("outcome_unknown detail %q, want %q", evs[2].Detail, detail)
	}

	// A known failure gets no such event, on either path.
	known := createAndClaim(t, s, "known-fail", "w1", longLease)
	if _, err := s.Fail(t.Context(), failure(known, true)); err != nil {
		t.Fatal(err)
	}
	knownRetry := createAndClaim(t, s, "known-retry", "w1", longLease)
	if _, err := s.ScheduleRetry(t.Context(), failure(knownRetry, true), time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{known.CallID, knownRetry.CallID} {
		if n := countEvent(audit(t, s, id), store.EventOutcomeUnknown); n != 0 {
			t.Fatalf("%s: known failure has %d outcome_unknown events", id, n)
		}
	}
}
