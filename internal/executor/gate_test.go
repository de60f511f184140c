package executor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// countGates wraps the store so that its gate methods are counted.
func countGates(n *atomic.Int64) func(*testConfig) {
	return func(c *testConfig) {
		c.wrap = func(st store.Store) store.Store {
			return &storefake.Store{Base: st,
				AdmitFunc: func(ctx context.Context, g store.Gate, want int) (store.Admission, error) {
					n.Add(1)
					return st.Admit(ctx, g, want)
				},
				UnadmitFunc: func(ctx context.Context, g store.Gate, unused int, probe bool) error {
					n.Add(1)
					return st.Unadmit(ctx, g, unused, probe)
				},
				ReportAttemptFunc: func(ctx context.Context, g store.Gate, o store.GateOutcome) (store.GateState, error) {
					n.Add(1)
					return st.ReportAttempt(ctx, g, o)
				},
			}
		}
	}
}

// TestUnguardedToolsCostNoGateRoundTrip: tools with neither a rate nor a
// breaker never reach the store's gate methods: their claims are as they
// were.
func TestUnguardedToolsCostNoGateRoundTrip(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	b := setup(t, countGates(&n))
	var ids []string
	for i := range 10 {
		ids = append(ids, b.submit(fmt.Sprintf("k-plain-%d", i), `{"tool":"charge","args":{"amount":1}}`).CallID)
	}
	ids = append(ids, b.submit("k-plain-fail", `{"tool":"fail","args":{}}`).CallID)
	for _, id := range ids {
		b.waitFinal(id)
	}
	time.Sleep(3 * DefaultRecoverInterval) // idle ticks too
	if got := n.Load(); got != 0 {
		t.Fatalf("%d gate round trips for tools without a rate or breaker, want 0", got)
	}
}

// TestGuardedToolAdmittedAndReported: a rate-limited, breaker-guarded
// tool goes through Admit before its claims and ReportAttempt after each
// attempt, and a call over the limit stays pending, never claimed, until
// its token comes.
func TestGuardedToolAdmittedAndReported(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	p := ToolPolicy{MaxAttempts: 1, Rate: &store.Rate{Limit: 1, Per: time.Hour, Burst: 1},
		Breaker: &store.Breaker{Failures: 3, Cooldown: time.Minute}}
	b := setup(t, countGates(&n), withPolicy(builtin.Charge, p))
	first := b.submit("k-g-1", `{"tool":"charge","args":{"amount":1}}`)
	second := b.submit("k-g-2", `{"tool":"charge","args":{"amount":2}}`)
	if c := b.waitFinal(first.CallID); c.Status != store.StatusSucceeded {
		t.Fatalf("first call: %s", c.Status)
	}
	time.Sleep(3 * DefaultRecoverInterval)
	if c := b.get(second.CallID); c.Status != store.StatusPending || c.Attempt != 0 {
		t.Fatalf("second call over the limit: %s attempt %d, want pending, never claimed", c.Status, c.Attempt)
	}
	if n.Load() < 2 {
		t.Fatalf("%d gate round trips, want the admission and the report at least", n.Load())
	}
	states, err := b.st.GateStates(t.Context())
	if err != nil || len(states) != 1 || states[0].Tool != builtin.Charge || states[0].Breaker != store.BreakerClosed {
		t.Fatalf("gate rows %+v, %v; want charge's, closed", states, err)
	}
}
