package executor

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// withPolicy sets Config.Policies: p for tool, the default for the others.
func withPolicy(tool string, p ToolPolicy) func(*testConfig) {
	return func(c *testConfig) {
		c.Policies = func(name string) ToolPolicy {
			if name == tool {
				return p
			}
			return DefaultToolPolicy()
		}
	}
}

// retryGap is one server-side retry as the audit recorded it: the delay
// retry_scheduled announced and the time from that row to the next claim,
// both by the database's clock.
type retryGap struct {
	delay, waited time.Duration
}

// retryGaps reads a call's audit and returns one retryGap per
// retry_scheduled row, failing if one is not followed by a claim.
func retryGaps(t *testing.T, st store.Store, callID string) []retryGap {
	t.Helper()
	rows, err := st.Audit(context.Background(), callID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var gaps []retryGap
	for i, r := range rows {
		if r.Event != store.EventRetryScheduled {
			continue
		}
		in, _, ok := strings.Cut(strings.TrimPrefix(r.Detail, "in "), " after ")
		d, err := time.ParseDuration(in)
		if !ok || err != nil {
			t.Fatalf("retry_scheduled detail %q: no delay", r.Detail)
		}
		if i+1 >= len(rows) || rows[i+1].Event != store.EventClaimed {
			t.Fatalf("retry_scheduled at row %d not followed by a claim: %+v", i, rows)
		}
		waited := time.Duration((rows[i+1].TS - r.TS) * float64(time.Second))
		gaps = append(gaps, retryGap{delay: d, waited: waited})
	}
	return gaps
}

// TestServerSideRetry: a tool that fails retryably twice, then succeeds,
// under MaxAttempts 3, ends succeeded at attempt 3 after two
// retry_scheduled, each claim waiting at least the announced delay, and
// each delay within the jittered exponential backoff.
func TestServerSideRetry(t *testing.T) {
	t.Parallel()
	p := ToolPolicy{MaxAttempts: 3, InitialBackoff: 200 * time.Millisecond, MaxBackoff: time.Second}
	b := setup(t, withPolicy(builtin.Fail, p))
	c := b.submit("k-retry", `{"tool":"fail","args":{"times":2,"retryable":true}}`)
	done := b.waitFinal(c.CallID)
	if done.Status != store.StatusSucceeded || done.Attempt != 3 {
		t.Fatalf("call = %+v, want succeeded at attempt 3", done)
	}
	want := []string{"created", "claimed", "retry_scheduled", "claimed", "retry_scheduled", "claimed", "succeeded"}
	if got := b.events(c.CallID); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	gaps := retryGaps(t, b.st, c.CallID)
	for i, g := range gaps {
		backoff := p.InitialBackoff << i // 200ms, then 400ms
		if g.delay < backoff/2 || g.delay > backoff {
			t.Errorf("retry %d: delay %v, want within [%v, %v]", i+1, g.delay, backoff/2, backoff)
		}
		if g.waited < g.delay {
			t.Errorf("retry %d: claimed %v after retry_scheduled, before its delay %v", i+1, g.waited, g.delay)
		}
	}
}

// TestServerSideRetryExhausted: attempts used up, the call is failed with
// the error as the tool reported it (retryable stays true), so a same-key
// request still resets it.
func TestServerSideRetryExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t, withPolicy(builtin.Fail, ToolPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}))
	c := b.submit("k-exhausted", `{"tool":"fail","args":{"retryable":true}}`)
	done := b.waitFinal(c.CallID)
	if done.Status != store.StatusFailed || done.Attempt != 3 {
		t.Fatalf("call = %+v, want failed at attempt 3", done)
	}
	var e tool.ToolError
	if err := json.Unmarshal(done.ErrorJSON, &e); err != nil || !e.Retryable {
		t.Fatalf("error %s: want retryable true", done.ErrorJSON)
	}
	evs := b.events(c.CallID)
	if n := strings.Count(strings.Join(evs, ","), "retry_scheduled"); n != 2 {
		t.Fatalf("audit %v: %d retry_scheduled, want 2", evs, n)
	}
	if again := b.submit("k-exhausted", `{"tool":"fail","args":{"retryable":true}}`); again.Status != store.StatusPending {
		t.Fatalf("same-key request after exhaustion: status %s, want pending (reset)", again.Status)
	}
}

// TestNoServerSideRetryByDefault: without a policy a retryable failure is
// final at once, as before server-side retries existed.
func TestNoServerSideRetryByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.submit("k-default", `{"tool":"fail","args":{"times":1,"retryable":true}}`)
	done := b.waitFinal(c.CallID)
	if done.Status != store.StatusFailed || done.Attempt != 1 {
		t.Fatalf("call = %+v, want failed at attempt 1", done)
	}
	if evs := b.events(c.CallID); contains(evs, store.EventRetryScheduled) {
		t.Fatalf("audit %v: a retry was scheduled without a policy", evs)
	}
}

// TestRetryAfterHonoured: a tool's RetryAfter (a downstream's Retry-After)
// lengthens the delay beyond the computed backoff and its cap.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	b := setup(t, withPolicy(builtin.Sleep, ToolPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}),
		func(c *testConfig) {
			c.runTool = func(ctx context.Context, inv tool.Invocation) (tool.Outcome, error) {
				if runs.Add(1) == 1 {
					return tool.Outcome{Err: &tool.ToolError{Code: "downstream_error", Message: "429",
						Retryable: true, RetryAfter: 300 * time.Millisecond}}, nil
				}
				return builtin.Run(ctx, inv)
			}
		})
	c := b.submit("k-retry-after", `{"tool":"sleep","args":{"seconds":0}}`)
	if done := b.waitFinal(c.CallID); done.Status != store.StatusSucceeded || done.Attempt != 2 {
		t.Fatalf("call = %+v, want succeeded at attempt 2", done)
	}
	gaps := retryGaps(t, b.st, c.CallID)
	if len(gaps) != 1 || gaps[0].delay != 300*time.Millisecond || gaps[0].waited < gaps[0].delay {
		t.Fatalf("retries %+v, want one of 300ms (the tool's RetryAfter), claimed no earlier", gaps)
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	p := ToolPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for _, tc := range []struct {
		attempt    int64
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 0, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 0, 500 * time.Millisecond, time.Second}, // 1.6s capped at 1s
		{1 << 40, 0, 500 * time.Millisecond, time.Second},
		{1, 5 * time.Second, 5 * time.Second, 5 * time.Second}, // Retry-After wins over the cap
	} {
		for range 50 {
			if d := retryDelay(p, tc.attempt, tc.retryAfter); d < tc.lo || d > tc.hi {
				t.Fatalf("retryDelay(attempt %d, retry-after %v) = %v, want within [%v, %v]", tc.attempt, tc.retryAfter, d, tc.lo, tc.hi)
			}
		}
	}
	if d := retryDelay(ToolPolicy{MaxAttempts: 2}, 3, 0); d != 0 {
		t.Fatalf("no backoff configured: delay %v, want 0", d)
	}
}
