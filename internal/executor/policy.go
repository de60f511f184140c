package executor

import (
	"math/rand/v2"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
)

// ToolPolicy is how the server runs one tool beyond the global --workers
// bound: server-side retries of its retryable failures and a cap on its
// executions at once (docs/lifecycle.md, "Server-side retries";
// docs/operations.md, "Limits"). The zero value means the same as
// DefaultToolPolicy.
type ToolPolicy struct {
	// MaxAttempts is how many attempts a call of this tool gets before a
	// retryable failure becomes final: attempt n < MaxAttempts that fails
	// retryably goes back to pending with a not-before time instead of
	// failed. 1 (or less) means no server-side retry, the default of every
	// built-in tool. Attempts are the call's attempt counter, which counts
	// every claim (a lease takeover and a same-key reset's runs included).
	MaxAttempts int
	// InitialBackoff is the delay before the second attempt; each later
	// one doubles it, up to MaxBackoff. Jittered (see retryDelay).
	InitialBackoff time.Duration
	// MaxBackoff caps the computed backoff (zero: no cap). A tool's own
	// RetryAfter may exceed it.
	MaxBackoff time.Duration
	// Concurrency caps how many calls of this tool this server runs at
	// once, within the global --workers. 0 means only the global bound.
	Concurrency int
	// OnUnknown is the tool's on_unknown (toolreg.OnUnknownPolicies):
	// what happens before a new attempt of a call whose previous
	// attempt's outcome is unknown (unknown.go). "" means retry.
	OnUnknown string
	// Rate and Breaker guard the tool's downstream across every instance
	// on the database (gate.go); nil: none.
	Rate    *store.Rate
	Breaker *store.Breaker
}

// DefaultToolPolicy is the policy of every tool when Config.Policies is
// nil, and what a Policies func should return for a tool it has nothing to
// say about: one attempt, no cap beyond --workers.
func DefaultToolPolicy() ToolPolicy { return ToolPolicy{MaxAttempts: 1} }

// registryPolicies is the policy each tool of the registry declares (its
// retry and concurrency, docs/tools.md, "The tool registry"); the default
// for a name the registry does not know. The registry is read-only once
// loaded, so the lookups are safe from every goroutine.
func registryPolicies(reg *toolreg.Registry) func(tool string) ToolPolicy {
	return func(tool string) ToolPolicy {
		t, ok := reg.Lookup(tool)
		if !ok {
			return DefaultToolPolicy()
		}
		return ToolPolicy{
			MaxAttempts:    t.Retry.MaxAttempts,
			InitialBackoff: t.Retry.InitialBackoff,
			MaxBackoff:     t.Retry.MaxBackoff,
			Concurrency:    t.Concurrency,
			OnUnknown:      t.OnUnknown,
			Rate:           t.Rate,
			Breaker:        t.Breaker,
		}
	}
}

// policyFunc is Config.Policies with the defaults applied: never nil, and
// MaxAttempts at least 1.
func policyFunc(f func(tool string) ToolPolicy) func(tool string) ToolPolicy {
	if f == nil {
		return func(string) ToolPolicy { return DefaultToolPolicy() }
	}
	return func(tool string) ToolPolicy {
		p := f(tool)
		p.MaxAttempts = max(p.MaxAttempts, 1)
		p.Concurrency = max(p.Concurrency, 0)
		return p
	}
}

// retryDelay is the wait before attempt+1 of a call whose attempt failed
// retryably: exponential backoff InitialBackoff·2^(attempt-1), capped at
// MaxBackoff, with "equal jitter" (a uniform draw from the upper half, so
// the delay is at least half the backoff and instances that failed together
// do not all come back at once); then at least retryAfter, the delay a
// downstream asked for (Retry-After), which wins over the cap.
func retryDelay(p ToolPolicy, attempt int64, retryAfter time.Duration) time.Duration {
	d := p.InitialBackoff
	for i := int64(1); i < attempt && d > 0; i++ {
		if p.MaxBackoff > 0 && d >= p.MaxBackoff {
			break
		}
		if d > time.Duration(1<<62)/2 { // no overflow on absurd attempt counts
			break
		}
		d *= 2
	}
	if p.MaxBackoff > 0 && d > p.MaxBackoff {
		d = p.MaxBackoff
	}
	if d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	return max(d, retryAfter)
}
