package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// testAuditDetails walks one call through every event and pins the exact
// detail each one leaves, so the story inspect tells reads the same on
// every backend (the wording is decided once, in package store). The
// strings are literals on purpose: a change of wording must fail here.
func testAuditDetails(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()

	c := create(t, s, "k")
	first := claimOnly(t, s, "w1", shortLease, c.CallID)
	eventually(t, "the short lease to be recovered", func() bool {
		rec, err := s.RecoverExpired(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(rec) == 1
	})
	second := claimOnly(t, s, "w2", longLease, c.CallID)
	_, err := s.Succeed(ctx, completion(first))
	wantErr(t, "stale Succeed", err, store.ErrFenced)
	if _, err := s.Fail(ctx, failure(second, true)); err != nil {
		t.Fatal(err)
	}
	if _, out, err := s.CreateOrGet(ctx, newCall(t, "k", "fp-k")); err != nil || out != store.RetryReset {
		t.Fatalf("reset = %v, %v", out, err)
	}
	_, err = s.Fail(ctx, failure(second, false)) // the call is pending now
	wantErr(t, "Fail of a reset call", err, store.ErrFenced)
	third := claimOnly(t, s, "w3", longLease, c.CallID)
	if err := s.Release(ctx, store.Lease{CallID: c.CallID, Owner: "w3", Attempt: third.Attempt}, "owner pid 42 gone"); err != nil {
		t.Fatal(err)
	}
	fourth := claimOnly(t, s, "w4", longLease, c.CallID)
	done := completion(fourth)
	if _, err := s.Succeed(ctx, done); err != nil {
		t.Fatal(err)
	}
	_, err = s.Succeed(ctx, done)
	wantErr(t, "repeated Succeed", err, store.ErrFenced)

	want := []string{
		"created: charge",
		"claimed: w1",
		"outcome_unknown: abandoned: attempt 1 in flight, lease expired (owner w1, attempt 1)",
		"recover: lease expired (owner w1, attempt 1)",
		"claimed: w2",
		"fenced: owner w1 attempt 1 refused: call is running under owner w2 attempt 2",
		"failed: tool_failed: boom",
		"retry_reset: after tool_failed: boom",
		"fenced: owner w2 attempt 2 refused: call is pending at attempt 2",
		"claimed: w3",
		"outcome_unknown: abandoned: attempt 3 in flight, owner pid 42 gone",
		"recover: owner pid 42 gone",
		"claimed: w4",
		"succeeded: " + done.Effect.EffectID,
		"fenced: owner w4 attempt 4 refused: call is succeeded at attempt 4",
	}
	if got := details(audit(t, s, c.CallID)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The other shapes: a success without a side effect, and failures
	// whose error object is partial, empty or missing.
	for _, tc := range []struct {
		name   string
		finish func(c store.Call) error
		want   string
	}{
		{"no effect", func(c store.Call) error {
			comp := completion(c)
			comp.Effect = nil
			_, err := s.Succeed(ctx, comp)
			return err
		}, "succeeded: no effect"},
		{"code only", func(c store.Call) error {
			f := failure(c, false)
			f.Error = json.RawMessage(`{"code":"timeout","retryable":false}`)
			_, err := s.Fail(ctx, f)
			return err
		}, "failed: timeout"},
		{"no error object", func(c store.Call) error {
			f := failure(c, false)
			f.Error = nil
			_, err := s.Fail(ctx, f)
			return err
		}, "failed: {}"},
		// Heartbeats write no row of their own; the completion counts them.
		{"extended once", func(c store.Call) error {
			comp := completion(c)
			comp.Effect = nil
			comp.Extensions = 1
			_, err := s.Succeed(ctx, comp)
			return err
		}, "succeeded: no effect; lease extended 1 time"},
		{"failed after extensions", func(c store.Call) error {
			f := failure(c, false)
			f.Extensions = 3
			_, err := s.Fail(ctx, f)
			return err
		}, "failed: tool_failed: boom; lease extended 3 times"},
		{"fenced after extensions", func(c store.Call) error {
			f := failure(c, false)
			f.Attempt++ // a stale token
			f.Extensions = 2
			_, err := s.Fail(ctx, f)
			if !errors.Is(err, store.ErrFenced) {
				return fmt.Errorf("stale Fail = %v, want ErrFenced", err)
			}
			return nil
		}, "fenced: owner w5 attempt 2 refused: call is running under owner w5 attempt 1; lease extended 2 times"},
	} {
		c := createAndClaim(t, s, "k-"+tc.name, "w5", longLease)
		if err := tc.finish(c); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := details(audit(t, s, c.CallID))
		if last := got[len(got)-1]; last != tc.want {
			t.Fatalf("%s: last audit %q, want %q", tc.name, last, tc.want)
		}
	}
}

// details renders audit rows as "event: detail".
func details(evs []store.AuditEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Event + ": " + e.Detail
	}
	return out
}
