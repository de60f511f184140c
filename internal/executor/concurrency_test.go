package executor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// concurrencyProbe is a test tool body that counts its concurrent
// executions (the maximum in an atomic) and holds each until the gate
// opens.
type concurrencyProbe struct {
	cur, max atomic.Int64
	gate     chan struct{}
	once     sync.Once
}

func (p *concurrencyProbe) run(ctx context.Context) {
	n := p.cur.Add(1)
	defer p.cur.Add(-1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
	select {
	case <-p.gate:
	case <-ctx.Done():
	}
}

func (p *concurrencyProbe) open() { p.once.Do(func() { close(p.gate) }) }

// TestPerToolConcurrency: with sleep capped at 2 (8 workers), no more than
// 2 sleeps ever run at once; the sleeps beyond the cap are not claimed
// (pending, attempt 0: never held idle under a lease) while the scheduler
// keeps claiming; and calls of other tools queued behind them run.
func TestPerToolConcurrency(t *testing.T) {
	t.Parallel()
	probe := &concurrencyProbe{gate: make(chan struct{})}
	b := setup(t, withPolicy(builtin.Sleep, ToolPolicy{MaxAttempts: 1, Concurrency: 2}), func(c *testConfig) {
		c.Workers = 8
		c.runTool = func(ctx context.Context, inv tool.Invocation) (tool.Outcome, error) {
			if inv.Tool == builtin.Sleep {
				probe.run(ctx)
			}
			return builtin.Run(ctx, inv)
		}
	})
	t.Cleanup(probe.open)
	var sleeps, charges []string
	for i := range 6 {
		sleeps = append(sleeps, b.submit(fmt.Sprintf("k-sleep-%d", i), `{"tool":"sleep","args":{"seconds":0}}`).CallID)
	}
	for i := range 3 {
		charges = append(charges, b.submit(fmt.Sprintf("k-charge-%d", i), `{"tool":"charge","args":{"amount":1}}`).CallID)
	}
	// Not starved: the charges, created after six sleeps, finish while
	// sleep is at its cap.
	for _, id := range charges {
		if c := b.waitFinal(id); c.Status != store.StatusSucceeded {
			t.Fatalf("charge %+v, want succeeded", c)
		}
	}
	eventually(t, "two sleeps running", func() bool {
		if n := probe.cur.Load(); n > 2 {
			t.Fatalf("%d sleeps running at once, cap 2", n)
		}
		return probe.cur.Load() == 2
	})
	// Let the scheduler claim a few more times with sleep full.
	claims := b.metricValue("idemctl_claim_queries_total")
	eventually(t, "more claims", func() bool { return b.metricValue("idemctl_claim_queries_total") >= claims+5 })
	running, waiting := 0, 0
	for _, id := range sleeps {
		c, err := b.st.GetAny(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.Status == store.StatusRunning:
			running++
		case c.Status == store.StatusPending && c.Attempt == 0:
			waiting++
		default:
			t.Fatalf("sleep %+v: want running, or pending and never claimed", c)
		}
	}
	if running != 2 || waiting != 4 {
		t.Fatalf("sleeps: %d running, %d pending; want 2 and 4", running, waiting)
	}
	probe.open()
	for _, id := range sleeps {
		if c := b.waitFinal(id); c.Status != store.StatusSucceeded || c.Attempt != 1 {
			t.Fatalf("sleep %+v, want succeeded at attempt 1", c)
		}
	}
	if m := probe.max.Load(); m != 2 {
		t.Fatalf("at most %d sleeps ran at once, want exactly the cap 2", m)
	}
	t.Logf("claim queries: %v", b.metricValue("idemctl_claim_queries_total"))
}
