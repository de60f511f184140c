package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
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

// unknownError is an outcome_unknown error object of case kase.
func unknownError(t *testing.T, kase string, retryable bool) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(wire.CallError{Code: wire.CodeOutcomeUnknown, Retryable: retryable, Unknown: kase,
		Message: "the request was sent, then the answer was lost"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testUnknownSurvives: the fact that a call's last attempt ended with an
// unknown outcome (Call.Unknown) is set by an outcome_unknown completion,
// by a recovery, a release and a takeover of a running call (abandoned);
// it survives the claims and same-key resets that follow (a claim clears
// error_json, not it) and an unsettled completion (a failed lookup, a
// hold: no outcome_unknown event either); a known outcome or a success
// settles it (docs/lifecycle.md, "Unknown outcomes").
func testUnknownSurvives(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	wantUnknown := func(what, id, want string) {
		t.Helper()
		if got := get(t, s, id).Unknown; got != want {
			t.Fatalf("%s: Unknown = %q, want %q", what, got, want)
		}
	}

	// ScheduleRetry with an unknown outcome; the next claim keeps it.
	c := createAndClaim(t, s, "u-retry", "w1", longLease)
	wantUnknown("a fresh claim", c.CallID, "")
	comp := failure(c, true)
	comp.Error = unknownError(t, wire.UnknownResetAfterSend, true)
	if done, err := s.ScheduleRetry(ctx, comp, 0); err != nil || done.Unknown != wire.UnknownResetAfterSend {
		t.Fatalf("ScheduleRetry(unknown) = %+v, %v; want Unknown reset_after_send", done, err)
	}
	c = claimOnly(t, s, "w1", longLease, c.CallID)
	if c.Unknown != wire.UnknownResetAfterSend || c.ErrorJSON != nil {
		t.Fatalf("claim after an unknown outcome: Unknown %q, error %s; want the case kept, the error cleared", c.Unknown, c.ErrorJSON)
	}
	// An unsettled completion (a lookup failed) keeps it, whatever its
	// error says, and writes no outcome_unknown row.
	before := countEvent(audit(t, s, c.CallID), store.EventOutcomeUnknown)
	comp = failure(c, true)
	comp.Error, comp.Unsettled = unknownError(t, wire.UnknownTimeoutAfterSend, true), true
	if _, err := s.ScheduleRetry(ctx, comp, 0); err != nil {
		t.Fatal(err)
	}
	wantUnknown("unsettled ScheduleRetry", c.CallID, wire.UnknownResetAfterSend)
	c = claimOnly(t, s, "w1", longLease, c.CallID)
	comp = failure(c, false)
	comp.Error, comp.Unsettled = unknownError(t, wire.UnknownTimeoutAfterSend, false), true
	if _, err := s.Fail(ctx, comp); err != nil {
		t.Fatal(err)
	}
	wantUnknown("unsettled Fail", c.CallID, wire.UnknownResetAfterSend)
	if n := countEvent(audit(t, s, c.CallID), store.EventOutcomeUnknown); n != before {
		t.Fatalf("unsettled completions wrote %d outcome_unknown rows, want none", n-before)
	}

	// A known failure settles it; a success too.
	k := createAndClaim(t, s, "u-known", "w1", longLease)
	comp = failure(k, true)
	comp.Error = unknownError(t, wire.UnknownTimeoutAfterSend, true)
	if _, err := s.ScheduleRetry(ctx, comp, 0); err != nil {
		t.Fatal(err)
	}
	k = claimOnly(t, s, "w1", longLease, k.CallID)
	if _, err := s.ScheduleRetry(ctx, failure(k, true), 0); err != nil {
		t.Fatal(err)
	}
	wantUnknown("known failure after an unknown one", k.CallID, "")
	k = claimOnly(t, s, "w1", longLease, k.CallID)
	comp = failure(k, true)
	comp.Error = unknownError(t, wire.UnknownTimeoutAfterSend, true)
	if _, err := s.Fail(ctx, comp); err != nil {
		t.Fatal(err)
	}
	wantUnknown("Fail(unknown)", k.CallID, wire.UnknownTimeoutAfterSend)
	// A same-key reset keeps it: the next attempt must still look up.
	n := newCall(t, "u-known", "fp-u-known")
	if got, out, err := s.CreateOrGet(ctx, n); err != nil || out != store.RetryReset || got.Unknown != wire.UnknownTimeoutAfterSend {
		t.Fatalf("same-key reset = %v, %v, Unknown %q; want RetryReset keeping timeout_after_send", out, err, got.Unknown)
	}
	k = claimOnly(t, s, "w1", longLease, k.CallID)
	if _, err := s.Succeed(ctx, completion(k)); err != nil {
		t.Fatal(err)
	}
	wantUnknown("Succeed", k.CallID, "")

	// Recovery of an expired lease, a release and a takeover: abandoned.
	r := createAndClaim(t, s, "u-recover", "w-dead", shortLease)
	eventually(t, "the expired lease to be recovered", func() bool {
		got, err := s.RecoverExpired(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(got) > 0
	})
	wantUnknown("RecoverExpired", r.CallID, wire.UnknownAbandoned)
	r = claimOnly(t, s, "w1", longLease, r.CallID)
	if err := s.Release(ctx, store.LeaseOf(r), "owner process gone"); err != nil {
		t.Fatal(err)
	}
	wantUnknown("Release", r.CallID, wire.UnknownAbandoned)
	r = claimOnly(t, s, "w1", longLease, r.CallID)
	if _, err := s.Succeed(ctx, completion(r)); err != nil {
		t.Fatal(err)
	}
	tk := createAndClaim(t, s, "u-takeover", "w-frozen", shortLease)
	wantUnknown("a first claim", tk.CallID, "")
	var taken []store.Call
	eventually(t, "the expired lease to be taken over", func() bool {
		var err error
		taken, err = s.ClaimNext(ctx, "w2", longLease, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(taken) == 1
	})
	if taken[0].CallID != tk.CallID || taken[0].Unknown != wire.UnknownAbandoned {
		t.Fatalf("takeover = %s Unknown %q; want %s abandoned", taken[0].CallID, taken[0].Unknown, tk.CallID)
	}
}

// testRecordLookup: RecordLookup appends the lookup's audit row under the
// attempt's lease and changes nothing else; a stale lease is ErrNotHeld
// and writes nothing, an unknown call is ErrNotFound, an event that is not
// a lookup's is refused.
func testRecordLookup(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	c := createAndClaim(t, s, "lookup", "w1", longLease)
	detail := store.DetailLookup(store.LeaseOf(c), "answered 404")
	if err := s.RecordLookup(ctx, store.LeaseOf(c), store.EventLookupNotFound, detail); err != nil {
		t.Fatal(err)
	}
	evs := audit(t, s, c.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventLookupNotFound || last.Detail != "attempt 1: answered 404" {
		t.Fatalf("last audit %+v; want lookup_not_found \"attempt 1: answered 404\"", last)
	}
	if g := get(t, s, c.CallID); g.Status != store.StatusRunning || g.Attempt != 1 || *g.Owner != "w1" {
		t.Fatalf("call after RecordLookup %+v; want it running as claimed", g)
	}
	stale := store.LeaseOf(c)
	stale.Attempt = 7
	wantErr(t, "RecordLookup(stale)", s.RecordLookup(ctx, stale, store.EventLookupFound, "x"), store.ErrNotHeld)
	wantErr(t, "RecordLookup(unknown call)", s.RecordLookup(ctx, store.Lease{CallID: "c_00000000deadbeef", Owner: "w1", Attempt: 1},
		store.EventLookupFound, "x"), store.ErrNotFound)
	if err := s.RecordLookup(ctx, store.LeaseOf(c), store.EventSucceeded, "x"); err == nil {
		t.Fatal("RecordLookup(succeeded) = nil; want an error: not a lookup event")
	}
	if got := len(audit(t, s, c.CallID)); got != len(evs) {
		t.Fatalf("refused RecordLookups wrote %d rows", got-len(evs))
	}
}

// testResolve: Resolve settles a failed call still failed with the error
// it was read with: as succeeded with the result and one effect row, or as
// failed with the new error; Unknown cleared, attempt kept, audited
// resolved with who did it. A call that changed since is left alone (ok
// false, no row); an unknown call is ErrNotFound.
func testResolve(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	held := func(key string) store.Call {
		t.Helper()
		c := createAndClaim(t, s, key, "w1", longLease)
		comp := failure(c, false)
		comp.Error = unknownError(t, wire.UnknownTimeoutAfterSend, false)
		f, err := s.Fail(ctx, comp)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	ok1 := held("resolve-ok")
	if got, ok, err := s.Resolve(ctx, store.Resolution{CallID: ok1.CallID, By: "alice", PrevErr: json.RawMessage(`{"code":"other"}`),
		Succeeded: true}); err != nil || ok || got.Status != store.StatusFailed {
		t.Fatalf("Resolve(stale error) = %s, %v, %v; want the failed call untouched", got.Status, ok, err)
	}
	eff := effectIDFor(ok1.CallID)
	r := store.Resolution{CallID: ok1.CallID, By: "alice", PrevErr: ok1.ErrorJSON, Succeeded: true,
		Result: json.RawMessage(`{"resolved":true}`), Effect: &store.Effect{EffectID: eff, CallID: ok1.CallID, Tool: ok1.Tool}}
	got, ok, err := s.Resolve(ctx, r)
	if err != nil || !ok {
		t.Fatalf("Resolve(succeeded) = %v, %v", ok, err)
	}
	if got.Status != store.StatusSucceeded || !jsonEq(t, got.ResultJSON, r.Result) || got.ErrorJSON != nil || got.Unknown != "" ||
		got.EffectID == nil || *got.EffectID != eff || got.Attempt != ok1.Attempt {
		t.Fatalf("resolved call %+v; want succeeded with the result, effect %s, Unknown cleared", got, eff)
	}
	if e, err := s.EffectOf(ctx, ok1.CallID); err != nil || e.EffectID != eff {
		t.Fatalf("EffectOf = %+v, %v; want %s", e, err, eff)
	}
	evs := audit(t, s, ok1.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventResolved || last.Detail != store.DetailResolved(r) ||
		!strings.HasPrefix(last.Detail, "by alice as succeeded after outcome_unknown: ") {
		t.Fatalf("last audit %+v; want resolved %q", last, store.DetailResolved(r))
	}
	// Succeeded now: a second resolve changes nothing.
	if got, ok, err := s.Resolve(ctx, r); err != nil || ok || got.Status != store.StatusSucceeded {
		t.Fatalf("Resolve(again) = %s, %v, %v; want succeeded, not ok", got.Status, ok, err)
	}
	if n := countEvent(audit(t, s, ok1.CallID), store.EventResolved); n != 1 {
		t.Fatalf("%d resolved rows, want 1", n)
	}

	f := held("resolve-failed")
	newErr := json.RawMessage(`{"code":"resolved_failed","message":"no charge found","retryable":false}`)
	got, ok, err = s.Resolve(ctx, store.Resolution{CallID: f.CallID, PrevErr: f.ErrorJSON, Error: newErr})
	if err != nil || !ok || got.Status != store.StatusFailed || !jsonEq(t, got.ErrorJSON, newErr) || got.Unknown != "" ||
		got.EffectID != nil {
		t.Fatalf("Resolve(failed) = %+v, %v, %v; want failed with the new error, Unknown cleared, no effect", got, ok, err)
	}
	if _, err := s.EffectOf(ctx, f.CallID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("EffectOf(resolved failed) = %v; want ErrNotFound", err)
	}
	evs = audit(t, s, f.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventResolved || !strings.HasPrefix(last.Detail, "by - as failed after outcome_unknown: ") {
		t.Fatalf("last audit %+v; want resolved by - as failed", last)
	}
	_, _, err = s.Resolve(ctx, store.Resolution{CallID: "c_00000000deadbeef", PrevErr: f.ErrorJSON})
	wantErr(t, "Resolve(unknown)", err, store.ErrNotFound)
}
