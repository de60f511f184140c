package server

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
)
