package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/wire"
)

// secretValue stands for user data a database error may quote; it must
// never reach the call's error object.
const secretValue = "4111-1111-secret"

// pgLikeError is a database refusal as the PostgreSQL backend reports it:
// a store.RefusedError with the SQLSTATE, wrapping a driver message that
// quotes the refused value.
func pgLikeError(state string) error {
	return &store.RefusedError{Code: "SQLSTATE " + state,
		Err: fmt.Errorf("ERROR: unsupported Unicode escape sequence near %q (SQLSTATE %s)", secretValue, state)}
}

// refusedWithoutCode is a refusal whose backend gave no code.
func refusedWithoutCode(msg string) error { return &store.RefusedError{Err: errors.New(msg)} }

// refusingStore says which completions of a real SQLite store are
// refused: refuseSucceed / refuseFail decide per completion; each returns
// the error to answer with, or nil to pass the completion to the database.
type refusingStore struct {
	refuseSucceed func(c store.Completion) error
	refuseFail    func(c store.Completion) error
	succeeds      atomic.Int64 // Succeed calls, refused or not
	fails         atomic.Int64 // Fail calls, refused or not
}

// over returns base with s's refusals.
func (s *refusingStore) over(base store.Store) store.Store {
	return &storefake.Store{Base: base,
		SucceedFunc: func(ctx context.Context, c store.Completion) (store.Call, error) {
			s.succeeds.Add(1)
			if s.refuseSucceed != nil {
				if err := s.refuseSucceed(c); err != nil {
					return store.Call{}, err
				}
			}
			return base.Succeed(ctx, c)
		},
		FailFunc: func(ctx context.Context, c store.Completion) (store.Call, error) {
			s.fails.Add(1)
			if s.refuseFail != nil {
				if err := s.refuseFail(c); err != nil {
					return store.Call{}, err
				}
			}
			return base.Fail(ctx, c)
		},
	}
}

// setupRefusing starts an executor (one worker) on a refusingStore over a
// fresh SQLite database.
func setupRefusing(t *testing.T, lease time.Duration, rs *refusingStore) *bundle {
	t.Helper()
	return setup(t, func(c *testConfig) {
		c.Workers = 1
		c.Lease = lease
		c.wrap = rs.over
	})
}

// errorObject decodes a failed call's error.
func errorObject(t *testing.T, c store.Call) (code, message string, retryable bool) {
	t.Helper()
	var e struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable *bool  `json:"retryable"`
	}
	if err := json.Unmarshal(c.ErrorJSON, &e); err != nil || e.Retryable == nil {
		t.Fatalf("error object %s: %v (retryable must be present)", c.ErrorJSON, err)
	}
	return e.Code, e.Message, *e.Retryable
}

// countEvents counts audit events by name.
func countEvents(events []string) map[string]int {
	n := map[string]int{}
	for _, ev := range events {
		n[ev]++
	}
	return n
}

// TestRefusedSucceedEndsFailed: the database refuses a charge's success
// record for a non-transient reason (as PostgreSQL refuses a value it
// cannot store). The call must still reach a final state on its own
// (docs/lifecycle.md, "Invariants"): failed, code internal, not retryable, at attempt 1, with exactly
// one completion recorded and no effect — instead of being re-run once per
// lease for ever.
func TestRefusedSucceedEndsFailed(t *testing.T) {
	t.Parallel()
	rs := &refusingStore{refuseSucceed: func(store.Completion) error { return pgLikeError("22P05") }}
	b := setupRefusing(t, 30*time.Second, rs)

	submitted := b.submit("k-refused-succeed", `{"tool":"charge","args":{"amount":7}}`)
	c := b.waitFinal(submitted.CallID)

	if c.Status != store.StatusFailed || c.Attempt != 1 || c.ResultJSON != nil || c.EffectID != nil {
		t.Fatalf("call: status %s attempt %d result %s effect %v, want failed at attempt 1 without result or effect",
			c.Status, c.Attempt, c.ResultJSON, c.EffectID)
	}
	code, msg, retryable := errorObject(t, c)
	if code != wire.CodeInternal || retryable {
		t.Errorf("error %s: want code internal, retryable false", c.ErrorJSON)
	}
	const want = "could not record the tool's outcome: the database refused it (SQLSTATE 22P05)"
	if msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if strings.Contains(string(c.ErrorJSON), secretValue) {
		t.Errorf("error object echoes the refused value: %s", c.ErrorJSON)
	}

	// Exactly one completion recorded, by this attempt, and no effect.
	ev := countEvents(auditEvents(t, b.st, c.CallID))
	if ev[store.EventFailed] != 1 || ev[store.EventSucceeded] != 0 || ev[store.EventClaimed] != 1 || ev[store.EventRecover] != 0 {
		t.Errorf("audit %v: want one claimed, one failed, no succeeded, no recover", ev)
	}
	if s := b.stats(); s.Calls != 1 || s.Effects != 0 {
		t.Errorf("calls=%d effects=%d, want 1 and 0", s.Calls, s.Effects)
	}
	// A deterministic refusal is not retried: one Succeed, one Fail.
	if s, f := rs.succeeds.Load(), rs.fails.Load(); s != 1 || f != 1 {
		t.Errorf("Succeed called %d times, Fail %d, want 1 and 1", s, f)
	}

	// Final for good: the same key finds the failure, it does not reset it.
	if again := b.submit("k-refused-succeed", `{"tool":"charge","args":{"amount":7}}`); again.Status != store.StatusFailed || again.Attempt != 1 {
		t.Errorf("same-key retry: status %s attempt %d, want failed at attempt 1", again.Status, again.Attempt)
	}
}

// TestRefusedToolFailureEndsFailed: a tool's own failure whose error object
// the database refuses is replaced by the safe internal error, so that
// call ends too. The refusal here carries no SQLSTATE.
func TestRefusedToolFailureEndsFailed(t *testing.T) {
	t.Parallel()
	rs := &refusingStore{refuseFail: func(c store.Completion) error {
		if strings.Contains(string(c.Error), "tool_failed") {
			return refusedWithoutCode("sqlite fail: value " + secretValue + " too big")
		}
		return nil
	}}
	b := setupRefusing(t, 30*time.Second, rs)
	submitted := b.submit("k-refused-fail", `{"tool":"fail","args":{"retryable":true}}`)
	c := b.waitFinal(submitted.CallID)
	code, msg, retryable := errorObject(t, c)
	if c.Status != store.StatusFailed || c.Attempt != 1 || code != wire.CodeInternal || retryable ||
		msg != "could not record the tool's outcome: the database refused it" {
		t.Fatalf("call: status %s attempt %d error %s", c.Status, c.Attempt, c.ErrorJSON)
	}
	if ev := countEvents(auditEvents(t, b.st, c.CallID)); ev[store.EventFailed] != 1 {
		t.Errorf("audit %v: want one failed", ev)
	}
	if f := rs.fails.Load(); f != 2 {
		t.Errorf("Fail called %d times, want 2 (the refused one, the safe one)", f)
	}
}

// TestTransientCommitErrorKeepsTheLease: ErrUnavailable is "not now", not
// "not this": the executor retries it and then leaves the call to its
// lease; it never records a failure the tool did not have.
func TestTransientCommitErrorKeepsTheLease(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	refuse.Store(true)
	rs := &refusingStore{refuseSucceed: func(store.Completion) error {
		if refuse.Load() {
			return fmt.Errorf("sqlite succeed: %w: disk full", store.ErrUnavailable)
		}
		return nil
	}}
	b := setupRefusing(t, MinLease, rs)
	submitted := b.submit("k-transient", `{"tool":"charge","args":{"amount":3}}`)
	id := submitted.CallID
	eventually(t, "the first attempt has tried its commit 3 times", func() bool { return rs.succeeds.Load() >= 3 })
	refuse.Store(false) // the database is back
	c := b.waitFinal(id)
	if c.Status != store.StatusSucceeded || c.Attempt < 2 || c.EffectID == nil {
		t.Fatalf("call: status %s attempt %d effect %v, want succeeded by a later attempt", c.Status, c.Attempt, c.EffectID)
	}
	if f := rs.fails.Load(); f != 0 {
		t.Errorf("Fail called %d times for a transient error", f)
	}
	if s := b.stats(); s.Effects != 1 {
		t.Errorf("effects=%d, want 1", s.Effects)
	}
}

// TestRefusalFallbackRefusedLeavesItToTheLease: when the safe failure
// record is refused too, it is tried once, and the call goes back to the
// lease path as before (recovered and run again).
func TestRefusalFallbackRefusedLeavesItToTheLease(t *testing.T) {
	t.Parallel()
	refusal := func(store.Completion) error { return refusedWithoutCode("sqlite: constraint failed") }
	rs := &refusingStore{refuseSucceed: refusal, refuseFail: refusal}
	b := setupRefusing(t, MinLease, rs)
	submitted := b.submit("k-refused-twice", `{"tool":"charge","args":{"amount":3}}`)
	id := submitted.CallID
	eventually(t, "a second attempt after the lease", func() bool {
		c, err := b.st.GetAny(context.Background(), id)
		return err == nil && c.Attempt >= 2
	})
	// Every attempt tried one Succeed and one Fail, no more.
	c, err := b.st.GetAny(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Final() {
		t.Fatalf("call became %s although every completion was refused", c.Status)
	}
	if s, f := rs.succeeds.Load(), rs.fails.Load(); f > s || s > c.Attempt {
		t.Errorf("Succeed %d, Fail %d over %d attempts: want at most one of each per attempt", s, f, c.Attempt)
	}
}

// TestRefusalReason: only an SQLSTATE-shaped code is echoed, never text.
func TestRefusalReason(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
	}{
		{pgLikeError("22021"), "the database refused it (SQLSTATE 22021)"},
		{fmt.Errorf("postgres succeed: %w", pgLikeError("23505")), "the database refused it (SQLSTATE 23505)"},
		{refusedWithoutCode(secretValue), "the database refused it"},
		{errors.New(secretValue), "the database refused it"},
	} {
		if got := refusalReason(tt.err); got != tt.want {
			t.Errorf("refusalReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{pgLikeError("23505"), true},
		{fmt.Errorf("sqlite succeed: %w", refusedWithoutCode("constraint failed")), true},
		{errors.New("constraint failed"), false}, // unclassified: the lease retries it
		{store.ErrFenced, false},
		{fmt.Errorf("x: %w", store.ErrUnavailable), false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{store.ErrReadOnly, false},
		{store.ErrNotFound, false},
		{nil, false},
	} {
		if got := refusedForGood(tt.err); got != tt.want {
			t.Errorf("refusedForGood(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
