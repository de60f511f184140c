package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

// withPolicy sets Config.Policies: p for tool, the default for the others.
func withPolicy(tool string, p executor.ToolPolicy) func(*Config) {
	return func(c *Config) {
		c.Policies = func(name string) executor.ToolPolicy {
			if name == tool {
				return p
			}
			return executor.DefaultToolPolicy()
		}
	}
}

// TestRetryingCallIsNotFinal: while a retry waits for its not-before
// time the call is pending: Prefer: wait runs out without a final answer
// (a same-key replay gets 202 with Retry-After), and GET shows it pending.
func TestRetryingCallIsNotFinal(t *testing.T) {
	t.Parallel()
	b := setup(t, withPolicy(builtin.Fail, executor.ToolPolicy{MaxAttempts: 2, InitialBackoff: time.Hour}))
	c := b.post("k-waiting", `{"tool":"fail","args":{"times":1,"retryable":true}}`).call(t)
	eventually(t, "the retry is scheduled", func() bool {
		return contains(b.events(c.CallID), store.EventRetryScheduled)
	})
	r := b.post("k-waiting", `{"tool":"fail","args":{"times":1,"retryable":true}}`, "Prefer", "wait=1")
	if got := r.call(t); got.Status != store.StatusPending || got.Attempt != 1 || r.status != http.StatusAccepted ||
		r.header.Get("Retry-After") == "" || r.header.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("replay with Prefer: wait=1 during the backoff: %d %v %+v, want 202 pending at attempt 1 with Retry-After",
			r.status, r.header, got)
	}
	r = b.get(wire.CallPath(c.CallID), "Prefer", "wait=1")
	got := r.call(t)
	if got.Status != store.StatusPending || got.Attempt != 1 {
		t.Fatalf("GET with Prefer: wait=1 during the backoff: %d %+v, want pending at attempt 1", r.status, got)
	}
	// The call object says when it may run again: about an hour from its
	// last update (the scheduled backoff, jittered into its upper half).
	if got.NotBefore == nil || *got.NotBefore < got.UpdatedAt+1800 || *got.NotBefore > got.UpdatedAt+3601 {
		t.Fatalf("not_before = %v (updated_at %v), want within the hour's backoff", got.NotBefore, got.UpdatedAt)
	}
	if done := b.post("k-done", `{"tool":"charge","args":{"amount":1}}`).call(t); done.NotBefore != nil {
		t.Fatalf("a call without a scheduled retry shows not_before %v", *done.NotBefore)
	}
}
