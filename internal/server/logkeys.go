package server

import (
	"log/slog"
	"time"
)

// Log attribute keys. Every line about a call carries attrCallID and
// attrKey, so `grep call_id=c_...` or a JSON query finds its whole story.
const (
	attrCallID   = "call_id"
	attrKey      = "key"
	attrTool     = "tool"
	attrAttempt  = "attempt"
	attrOwner    = "owner"
	attrStatus   = "status"
	attrErr      = "err"
	attrMethod   = "method"
	attrPath     = "path"
	attrDuration = "duration"
	attrAddr     = "addr"
	attrLease    = "lease"
	attrGrace    = "grace"
	attrPause    = "pause"
	attrReason   = "reason"
	// attrRetryIn is the delay before a scheduled server-side retry may
	// run; attrMaxAttempts the tool's attempt limit.
	attrRetryIn     = "retry_in"
	attrMaxAttempts = "max_attempts"
	// attrPrincipal is who made the request ("" without auth); never the token.
	attrPrincipal = "principal"
)

// durationAttr logs d as text ("30s", "1.5ms"). slog's JSON handler would
// print a time.Duration as integer nanoseconds (30000000000), which reads as
// nothing in particular; every duration in the logs goes through here.
func durationAttr(key string, d time.Duration) slog.Attr {
	return slog.String(key, d.String())
}
