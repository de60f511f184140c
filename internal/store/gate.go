package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// A gate guards the attempts sent to one tool's downstream (docs/tools.md,
// "Rate limits" and "Circuit breakers"): a token bucket and a circuit
// breaker whose state is one row per tool in the database, so that every
// instance on one database shares the budget and the breaker. The rules
// below are the only place either is decided: a backend reads the row
// under a lock, asks GateState's methods for the new row, and writes it
// back, in one transaction.

// Rate is a tool's rate limit: at most Limit attempts per Per, with a
// bucket of Burst tokens (so after a quiet spell Burst attempts may go at
// once, and over any span T at most Burst + T·Limit/Per go).
type Rate struct {
	Limit int
	Per   time.Duration
	Burst int
}

// PerSecond is the bucket's refill rate, tokens per second.
func (r Rate) PerSecond() float64 { return float64(r.Limit) / r.Per.Seconds() }

// Breaker is a tool's circuit breaker: after Failures retryable failures
// in a row it opens for Cooldown, then lets one probe attempt through.
// FailFast refuses new calls at the door while it is open (the server's
// rule; the store only keeps the state).
type Breaker struct {
	Failures int
	Cooldown time.Duration
	FailFast bool
}

// Gate is what guards one tool: its rate limit and its breaker, either
// nil. A tool with neither has no gate and no row.
type Gate struct {
	Tool    string
	Rate    *Rate
	Breaker *Breaker
}

// Guarded reports whether the gate limits anything.
func (g Gate) Guarded() bool { return g.Rate != nil || g.Breaker != nil }

// BreakerState is the breaker's state (wire.BreakerState).
type BreakerState = wire.BreakerState

// The breaker's states.
const (
	BreakerClosed   = wire.BreakerClosed
	BreakerOpen     = wire.BreakerOpen
	BreakerHalfOpen = wire.BreakerHalfOpen
)

// GateState is one tool's gate row. Times are Unix seconds by the
// database's clock.
type GateState struct {
	Tool string
	// Tokens is the bucket's content at RefilledAt (at most Burst).
	Tokens     float64
	RefilledAt float64
	Breaker    BreakerState
	// Failures counts retryable failures in a row (reset by any attempt
	// the downstream answered).
	Failures int64
	// Until is, while open, the end of the cooldown; while half-open, the
	// probe's deadline, after which another probe may go (the first was
	// lost with its worker).
	Until float64
}

// NewGateState is the row of a tool seen for the first time: a full
// bucket, the breaker closed.
func NewGateState(g Gate, now float64) GateState {
	s := GateState{Tool: g.Tool, RefilledAt: now, Breaker: BreakerClosed}
	if g.Rate != nil {
		s.Tokens = float64(g.Rate.Burst)
	}
	return s
}

// Admission is Admit's answer.
type Admission struct {
	// Granted is how many attempts of the tool may be claimed now; the
	// tokens are taken. The caller gives back what it does not claim
	// (Unadmit).
	Granted int
	// Probe: the grant is the breaker's one probe after its cooldown.
	Probe bool
	// Throttled: ready calls were left waiting for want of tokens.
	Throttled bool
	// Wait, when nothing was granted though calls are ready, is how long
	// until a token or the end of the cooldown (0: ask again any time).
	Wait time.Duration
	// State is the row after the admission.
	State GateState
}

// Admit decides how many of ready runnable calls (at most want) may be
// sent now, at now by the database's clock, and returns the new row.
func (s GateState) Admit(g Gate, now float64, want, ready int) (GateState, Admission) {
	s = s.refill(g, now)
	n := min(want, ready)
	var a Admission
	if n <= 0 {
		a.State = s
		return s, a
	}
	probe := false
	if g.Breaker != nil && s.Breaker != BreakerClosed {
		if now < s.Until {
			a.Wait = seconds(s.Until - now)
			a.State = s
			return s, a
		}
		probe, n = true, 1 // cooldown over, or the probe's deadline passed
	}
	if g.Rate != nil {
		avail := int(math.Floor(s.Tokens + 1e-9))
		if n > avail {
			n = max(avail, 0)
			a.Throttled = true
		}
		if n == 0 {
			a.Wait = seconds((1 - s.Tokens) / g.Rate.PerSecond())
		}
		s.Tokens -= float64(n)
	}
	if probe && n > 0 {
		s.Breaker, s.Until, a.Probe = BreakerHalfOpen, now+g.Breaker.Cooldown.Seconds(), true
	}
	a.Granted, a.State = n, s
	return s, a
}

// Unadmit gives back unused of a grant: its tokens return to the bucket
// and an unused probe lets the next admission probe at once.
func (s GateState) Unadmit(g Gate, now float64, unused int, probe bool) GateState {
	s = s.refill(g, now)
	if g.Rate != nil && unused > 0 {
		s.Tokens = min(s.Tokens+float64(unused), float64(g.Rate.Burst))
	}
	if probe && g.Breaker != nil && s.Breaker == BreakerHalfOpen {
		s.Breaker, s.Until = BreakerOpen, now
	}
	return s
}

// GateOutcome is how an attempt of a guarded tool ended, for its breaker.
type GateOutcome int

// The outcomes a breaker counts.
const (
	// AttemptAnswered: the downstream answered (a success or a definite
	// failure): the breaker closes and the count starts again.
	AttemptAnswered GateOutcome = iota + 1
	// AttemptFailed: a retryable failure (the downstream errored, timed
	// out or was unreachable): counted; the Failures-th in a row, or a
	// probe's failure, opens the breaker for its cooldown.
	AttemptFailed
)

// Report applies an attempt's outcome to the breaker at now.
func (s GateState) Report(g Gate, now float64, o GateOutcome) GateState {
	if g.Breaker == nil {
		return s
	}
	switch o {
	case AttemptAnswered:
		s.Breaker, s.Failures, s.Until = BreakerClosed, 0, 0
	case AttemptFailed:
		s.Failures++
		switch {
		case s.Breaker == BreakerHalfOpen:
			s.Breaker, s.Until = BreakerOpen, now+g.Breaker.Cooldown.Seconds()
		case s.Breaker == BreakerClosed && s.Failures >= int64(g.Breaker.Failures):
			s.Breaker, s.Until = BreakerOpen, now+g.Breaker.Cooldown.Seconds()
		}
	}
	return s
}

// TokensAt is the bucket's content at now (by the database's clock), for
// a display: the tokens written plus those earned since.
func (s GateState) TokensAt(g Gate, now float64) float64 { return s.refill(g, now).Tokens }

// refill adds the tokens earned since RefilledAt.
func (s GateState) refill(g Gate, now float64) GateState {
	if g.Rate == nil {
		s.RefilledAt = now
		return s
	}
	if now > s.RefilledAt {
		s.Tokens = min(s.Tokens+(now-s.RefilledAt)*g.Rate.PerSecond(), float64(g.Rate.Burst))
		s.RefilledAt = now
	}
	// A burst lowered since the row was written caps it at once.
	s.Tokens = min(s.Tokens, float64(g.Rate.Burst))
	return s
}

// seconds converts a positive span of the database's clock to a duration,
// at least a millisecond so a waiter never spins.
func seconds(s float64) time.Duration {
	return max(time.Duration(s*float64(time.Second)), time.Millisecond)
}

// CheckGate is the gate methods' argument check, shared by backends.
func CheckGate(g Gate) error {
	if g.Tool == "" {
		return fmt.Errorf("gate: no tool")
	}
	if r := g.Rate; r != nil && (r.Limit < 1 || r.Per <= 0 || r.Burst < 1) {
		return fmt.Errorf("gate %s: invalid rate %+v", g.Tool, *r)
	}
	if b := g.Breaker; b != nil && (b.Failures < 1 || b.Cooldown <= 0) {
		return fmt.Errorf("gate %s: invalid breaker %+v", g.Tool, *b)
	}
	return nil
}

// GateStore is the part of Store that keeps the gates' rows (one per
// guarded tool; a tool with neither a rate nor a breaker never reaches
// these methods, so its claims cost nothing more).
type GateStore interface {
	// Admit counts up to want runnable pending calls of g.Tool (pending,
	// not-before passed) and, in one transaction with that count, reads the
	// tool's gate row (creating it, NewGateState, if missing), applies
	// GateState.Admit at the database's now and writes the row back. The
	// caller claims at most Granted calls of the tool and gives back the
	// rest with Unadmit. want <= 0 grants nothing and writes nothing.
	//
	// Errors: a plain error for an invalid gate (CheckGate).
	Admit(ctx context.Context, g Gate, want int) (Admission, error)
	// Unadmit gives back unused tokens of an admission, and its probe if
	// the probe was not claimed (GateState.Unadmit), in one transaction.
	Unadmit(ctx context.Context, g Gate, unused int, probe bool) error
	// ReportAttempt applies an attempt's outcome to g's breaker
	// (GateState.Report) in one transaction, and returns the row after it.
	ReportAttempt(ctx context.Context, g Gate, o GateOutcome) (GateState, error)
	// GateStates returns every gate row, by tool (never nil).
	GateStates(ctx context.Context) ([]GateState, error)
}
