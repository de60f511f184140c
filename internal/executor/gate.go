package executor

import (
	"context"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// gates applies the tools' rate limits and circuit breakers (docs/tools.md,
// "Rate limits", "Circuit breakers") to the claims. Their state is the
// store's (store.GateStore, one row per guarded tool), so every instance on
// one database shares one budget and one breaker; this is only how one
// scheduler uses it:
//
//   - Before a claim, each guarded tool with calls that may be ready is
//     admitted (store.Admit): the grant becomes the tool's quota in the
//     claim (store.ToolQuota), so a call over the limit or behind an open
//     breaker is never claimed: it stays pending and costs nothing.
//   - After the claim, the unused part of each grant goes back
//     (store.Unadmit).
//   - An admission that granted nothing says how long until a token or
//     the end of the cooldown: the tool is not asked again before then,
//     and a timer wakes the scheduler at that moment (no polling).
//   - A tool with no ready call is asked again only after an interval.
//   - Each attempt's outcome of a breaker-guarded tool is reported
//     (store.ReportAttempt), which opens or closes the breaker.
//
// Tools with neither a rate nor a breaker never reach any of this: their
// claims are as they were, with no extra round trip.
type gates struct {
	policy   func(tool string) ToolPolicy
	names    func() []string
	interval time.Duration
	wake     func()
	m        *metrics

	mu    sync.Mutex
	next  map[string]time.Time       // a tool is not admitted before this
	view  map[string]store.GateState // the last row seen of each tool
	waits map[string]float64         // idemctl_tool_throttled_total by tool
	timer *time.Timer                // wakes the scheduler at wakeAt
	at    time.Time
}

func newGates(policy func(string) ToolPolicy, names func() []string, interval time.Duration, wake func(), m *metrics) *gates {
	return &gates{policy: policy, names: names, interval: interval, wake: wake, m: m,
		next: map[string]time.Time{}, view: map[string]store.GateState{}, waits: map[string]float64{}}
}

// gateOf is the tool's gate from its policy.
func (g *gates) gateOf(tool string) store.Gate {
	p := g.policy(tool)
	return store.Gate{Tool: tool, Rate: p.Rate, Breaker: p.Breaker}
}

// admitted is one admission of a claim round.
type admitted struct {
	gate store.Gate
	a    store.Admission
}

// admit asks the store for each guarded tool's grant, up to free (and the
// tool's concurrency quota), and returns the quotas for the claim with
// every guarded tool capped at its grant (none for a tool not asked now).
func (g *gates) admit(ctx context.Context, st store.Store, free int, quotas []store.ToolQuota, noteErr func(string, error) bool) ([]store.ToolQuota, []admitted) {
	var out []admitted
	now := time.Now()
	for _, name := range g.names() {
		gate := g.gateOf(name)
		if !gate.Guarded() {
			continue
		}
		want, i := free, quotaIndex(quotas, name)
		if i >= 0 {
			want = min(want, quotas[i].Max)
		}
		granted := 0
		if want > 0 && g.due(name, now) {
			a, err := st.Admit(ctx, gate, want)
			if !noteErr("admit", err) {
				granted = a.Granted
				out = append(out, admitted{gate: gate, a: a})
				g.saw(a.State, gate)
				if a.Throttled {
					g.m.throttled.WithLabelValues(name).Inc()
					g.mu.Lock()
					g.waits[name]++
					g.mu.Unlock()
				}
				switch {
				case a.Granted > 0:
					g.setNext(name, time.Time{})
				case a.Wait > 0:
					g.setNext(name, now.Add(a.Wait))
					g.wakeIn(a.Wait)
				default: // nothing ready: look again after an interval
					g.setNext(name, now.Add(g.interval))
				}
			}
		}
		if i >= 0 {
			quotas[i].Max = granted
		} else {
			quotas = append(quotas, store.ToolQuota{Tool: name, Max: granted})
		}
	}
	return quotas, out
}

// settle gives back what the claim did not use of each grant.
func (g *gates) settle(ctx context.Context, st store.Store, adm []admitted, calls []store.Call, noteErr func(string, error) bool) {
	for _, ad := range adm {
		if ad.a.Granted == 0 {
			continue
		}
		used := 0
		for _, c := range calls {
			if c.Tool == ad.gate.Tool {
				used++
			}
		}
		unused := ad.a.Granted - used
		if unused <= 0 {
			continue
		}
		probe := ad.a.Probe && used == 0
		noteErr("unadmit", st.Unadmit(ctx, ad.gate, unused, probe))
		if used == 0 {
			// Ready by the count, but another instance claimed them
			// first: look again after an interval.
			g.setNext(ad.gate.Tool, time.Now().Add(g.interval))
		}
	}
}

// report counts an attempt's outcome in its tool's breaker, if it has one.
func (g *gates) report(st store.Store, c store.Call, out tool.Outcome, log func(msg string, args ...any)) {
	gate := g.gateOf(c.Tool)
	if gate.Breaker == nil {
		return
	}
	o, counts := breakerOutcome(out)
	if !counts {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	s, err := st.ReportAttempt(ctx, gate, o)
	if err != nil {
		log("reporting the attempt to the tool's breaker failed", logkey.Err, err)
		return
	}
	before, _ := g.state(c.Tool)
	g.saw(s, gate)
	if s.Breaker != before.Breaker && s.Breaker == store.BreakerOpen {
		log("circuit breaker opened: no attempt of the tool is sent until its cooldown ends",
			"failures", s.Failures, logkey.DurationAttr("cooldown", gate.Breaker.Cooldown))
	}
	if s.Breaker == store.BreakerClosed {
		g.setNext(c.Tool, time.Time{}) // closed: admit its waiting calls at the next tick
	}
}

// due reports whether tool may be admitted at now.
func (g *gates) due(tool string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !now.Before(g.next[tool])
}

// setNext sets when tool may be admitted next (zero: at once).
func (g *gates) setNext(tool string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if at.IsZero() {
		delete(g.next, tool)
		return
	}
	g.next[tool] = at
}

// breakerOutcome is what an attempt's outcome means to a breaker, and
// whether it counts at all: a success or a definite failure is the
// downstream answering; a retryable failure is the downstream failing. A
// cancel, a lost lease and idemctl's own errors (a panic, unreadable
// args) say nothing about the downstream.
func breakerOutcome(out tool.Outcome) (store.GateOutcome, bool) {
	switch {
	case out.Err == nil:
		return store.AttemptAnswered, true
	case out.Err.Code == wire.CodeCanceled || out.Err.Code == wire.CodeInternal || out.Err.Code == wire.CodeInvalidArgs:
		return 0, false
	case out.Err.Retryable:
		return store.AttemptFailed, true
	}
	return store.AttemptAnswered, true
}

// saw records the row last seen of a tool, for State and the gauge.
func (g *gates) saw(s store.GateState, gate store.Gate) {
	if gate.Breaker == nil {
		return
	}
	g.mu.Lock()
	g.view[gate.Tool] = s
	g.mu.Unlock()
	v := 0.0
	switch s.Breaker {
	case store.BreakerHalfOpen:
		v = 1
	case store.BreakerOpen:
		v = 2
	}
	g.m.breakerState.WithLabelValues(gate.Tool).Set(v)
}

// state is the row last seen of a tool's gate.
func (g *gates) state(tool string) (store.GateState, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.view[tool]
	return s, ok
}

// wakeIn wakes the scheduler after d, unless a wake-up is due sooner.
func (g *gates) wakeIn(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := time.Now().Add(d)
	if g.timer != nil && g.at.After(time.Now()) && !g.at.After(at) {
		return
	}
	g.at = at
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.wake)
		return
	}
	g.timer.Reset(d)
}

// stop stops the wake-up timer.
func (g *gates) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}

// quotaIndex is the index of tool's quota, or -1.
func quotaIndex(quotas []store.ToolQuota, tool string) int {
	for i, q := range quotas {
		if q.Tool == tool {
			return i
		}
	}
	return -1
}

// FailFast reports whether a new call of tool is to be refused now
// because its breaker is open and the tool fails fast
// (breaker.fail_fast), and for how long: by this instance's last view of
// the breaker (docs/tools.md, "Circuit breakers").
func (e *Executor) FailFast(tool string) (bool, time.Duration) {
	b := e.policy(tool).Breaker
	if b == nil || !b.FailFast {
		return false, 0
	}
	s, ok := e.gates.state(tool)
	if !ok || s.Breaker != store.BreakerOpen {
		return false, 0
	}
	left := time.Until(time.Unix(0, int64(s.Until*float64(time.Second))))
	if left <= 0 {
		return false, 0
	}
	return true, left
}

// Throttles is how many admissions of tool left ready calls waiting for a
// token on this instance (idemctl_tool_throttled_total{tool}).
func (e *Executor) Throttles(tool string) float64 {
	e.gates.mu.Lock()
	defer e.gates.mu.Unlock()
	return e.gates.waits[tool]
}
