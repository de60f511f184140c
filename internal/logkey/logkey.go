// Package logkey names the structured-log attributes the server and the
// executor share, so one call's lines carry the same keys whichever part of
// the service wrote them.
package logkey

import (
	"log/slog"
	"time"
)

// Log attribute keys. Every line about a call carries CallID and Key, so
// `grep call_id=c_...` or a JSON query finds its whole story.
const (
	CallID   = "call_id"
	Key      = "key"
	Tool     = "tool"
	Attempt  = "attempt"
	Owner    = "owner"
	Status   = "status"
	Err      = "err"
	Method   = "method"
	Path     = "path"
	Duration = "duration"
	Addr     = "addr"
	Lease    = "lease"
	Grace    = "grace"
	Pause    = "pause"
	Reason   = "reason"
	// RetryIn is the delay before a scheduled server-side retry may run;
	// MaxAttempts the tool's attempt limit.
	RetryIn     = "retry_in"
	MaxAttempts = "max_attempts"
	// Principal is who made the request ("" without auth); never the token.
	Principal = "principal"
)

// DurationAttr logs d as text ("30s", "1.5ms"). slog's JSON handler would
// print a time.Duration as integer nanoseconds (30000000000), which reads as
// nothing in particular; every duration in the logs goes through here.
func DurationAttr(key string, d time.Duration) slog.Attr {
	return slog.String(key, d.String())
}
