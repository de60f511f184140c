package wire

// BreakerState is the state of a tool's circuit breaker (docs/tools.md,
// "Circuit breakers").
type BreakerState string

// The states of a circuit breaker.
const (
	// BreakerClosed: attempts are sent.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: no attempt is sent until the cooldown ends.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: one probe attempt is in flight; its outcome closes
	// or reopens the breaker.
	BreakerHalfOpen BreakerState = "half_open"
)

// ToolRate is a tool's rate limit as listed: at most Limit attempts per
// Per (a Go duration) across every instance on one database, Burst at
// once after a quiet spell.
type ToolRate struct {
	Limit int    `json:"limit"`
	Per   string `json:"per"`
	Burst int    `json:"burst"`
}

// ToolBreaker is a tool's circuit breaker as listed: its configuration
// and its state, shared by every instance on one database.
type ToolBreaker struct {
	Failures int    `json:"failures"`
	Cooldown string `json:"cooldown"`
	FailFast bool   `json:"fail_fast"`
	// State is the breaker's state now; Failures in a row counted so far
	// (ConsecutiveFailures); Until, while open, the end of the cooldown
	// (Unix seconds).
	State               BreakerState `json:"state"`
	ConsecutiveFailures int64        `json:"consecutive_failures"`
	Until               *float64     `json:"until,omitempty"`
}
