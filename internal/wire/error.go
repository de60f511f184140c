package wire

// Error is the body of every error the service answers with (docs/api.md,
// "Errors"): {"error": {"code", "message", "call_id"?}}.
type Error struct {
	Error ErrorDetail `json:"error"`
	// Call, on already_final only, is the call as it ended.
	Call *Call `json:"call,omitempty"`
}

// ErrorDetail is the inner object of Error. Clients branch on Code, never
// on Message. It is an error value too (the MCP door's refusals).
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// CallID, on idempotency_conflict and already_final, is the call that
	// holds the key, so a client can read it; on idempotency_key_expired,
	// the purged call the key named.
	CallID string `json:"call_id,omitempty"`
	// PurgedAt, on idempotency_key_expired only, is when retention purged
	// that call, Unix seconds.
	PurgedAt *float64 `json:"purged_at,omitempty"`
}

func (e *ErrorDetail) Error() string { return e.Code + ": " + e.Message }
