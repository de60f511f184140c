package console

import "github.com/idemctl/idemctl/internal/wire"

// Gate is one guarded tool as the overview shows it: its rate limit and
// bucket, its breaker and state. The state is the database's, shared by
// every instance; Throttles is this instance's count.
type Gate struct {
	Tool string
	// Rate is the tool's limit ("10 per 1s, burst 2"; "" for none);
	// Tokens the bucket's content now; Throttled that it is empty while
	// calls of the tool are pending (they wait for a token); Throttles
	// this instance's idemctl_tool_throttled_total.
	Rate      string
	Tokens    float64
	Throttled bool
	Throttles float64
	// Breaker is its state ("" for no breaker); Failures the retryable
	// failures in a row; Until, while not closed, the end of the cooldown
	// (Unix seconds).
	Breaker  wire.BreakerState
	Failures int64
	Until    float64
	FailFast bool
}

// Open reports whether the breaker holds attempts back (open or probing).
func (g Gate) Open() bool { return g.Breaker == wire.BreakerOpen || g.Breaker == wire.BreakerHalfOpen }
