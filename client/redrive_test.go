package client

import (
	"errors"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// TestRedrive: against a real server, Redrive selects failed calls by
// tool and time, lists them without a change on DryRun, sends them back to
// pending otherwise (they then run again: the fail tool succeeds on its
// second attempt), and a bad request is an *APIError bad_request.
func TestRedrive(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, realServer(t), WithAttemptTimeout(5*time.Second))
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	var ids []string
	for range 2 {
		res, err := c.Submit(ctx, builtin.Fail, map[string]any{"times": 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Call.CallID)
	}
	if _, err := c.Submit(ctx, builtin.Charge, map[string]any{"amount": 1}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		// Wait answers a failed call with the call and its failure.
		if got, _ := c.Wait(ctx, id); got.Status != StatusFailed {
			t.Fatalf("Wait(%s) = %s; want failed", id, got.Status)
		}
	}

	dry, err := c.Redrive(ctx, RedriveOptions{Tool: builtin.Fail, DryRun: true})
	if err != nil || !dry.DryRun || len(dry.Calls) != 2 || dry.More {
		t.Fatalf("dry run: dry_run %v, %d calls, more %v, %v; want the 2 failed calls of fail", dry.DryRun, len(dry.Calls), dry.More, err)
	}
	if got, err := c.Get(ctx, ids[0]); err != nil || got.Status != StatusFailed {
		t.Fatalf("after the dry run: %s, %v; want still failed", got.Status, err)
	}
	if none, err := c.Redrive(ctx, RedriveOptions{Tool: builtin.Fail, Until: before}); err != nil || len(none.Calls) != 0 {
		t.Fatalf("Redrive of calls created before %v: %d calls, %v; want none", before, len(none.Calls), err)
	}
	done, err := c.Redrive(ctx, RedriveOptions{Tool: builtin.Fail, Since: before})
	if err != nil || done.DryRun || len(done.Calls) != 2 {
		t.Fatalf("Redrive: dry_run %v, %d calls, %v; want the 2 calls", done.DryRun, len(done.Calls), err)
	}
	for _, id := range ids {
		got, err := c.Wait(ctx, id)
		if err != nil || got.Status != StatusSucceeded || got.Attempt != 2 {
			t.Fatalf("redriven %s: %s attempt %d, %v; want succeeded at attempt 2", id, got.Status, got.Attempt, err)
		}
	}
	_, err = c.Redrive(ctx, RedriveOptions{Limit: 5000})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != CodeBadRequest {
		t.Fatalf("Redrive(limit 5000) = %v; want an *APIError bad_request", err)
	}
}
