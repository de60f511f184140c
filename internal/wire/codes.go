package wire

// Error codes: stable API, clients branch on them (docs/api.md, "Errors"
// and "The call object"). Each constant is Code + the code in CamelCase.

// Codes of the error body the server answers with (docs/api.md, "Errors").
const (
	CodeMissingIdempotencyKey = "missing_idempotency_key"
	CodeBadRequest            = "bad_request"
	CodeIdempotencyConflict   = "idempotency_conflict"
	// CodeIdempotencyKeyExpired: retention purged the key's call and its
	// tombstone is still kept (410 Gone); the request is not run again.
	CodeIdempotencyKeyExpired = "idempotency_key_expired"
	CodeUnauthenticated       = "unauthenticated"
	CodeAlreadyFinal          = "already_final"
	CodeNotFound              = "not_found"
	CodePayloadTooLarge       = "payload_too_large"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeUnavailable           = "unavailable"
	CodeOverloaded            = "overloaded"
	// CodeHostNotAllowed: a loopback server refused a request whose Host
	// names neither loopback nor an --allowed-hosts entry (DNS rebinding).
	CodeHostNotAllowed = "host_not_allowed"
	// CodeAuthThrottled: too many failed authentications from this client
	// address; retry after Retry-After.
	CodeAuthThrottled = "auth_throttled"
	// CodeToolForbidden: the tools file restricts the tool to other
	// principals (docs/tools.md, "The tool registry").
	CodeToolForbidden = "tool_forbidden"
	// CodeUpstreamUnavailable: the call names a tool of an upstream MCP
	// server whose tool list is not loaded yet (docs/tools.md, "The mcp
	// kind"); nothing was stored, retry after Retry-After.
	CodeUpstreamUnavailable = "upstream_unavailable"
	// CodeNotResolvable: a resolve named a call that is not failed with
	// outcome_unknown (409); nothing changed.
	CodeNotResolvable = "not_resolvable"
	// CodeCircuitOpen: the tool's circuit breaker is open and the tool
	// fails fast (breaker.fail_fast; docs/tools.md, "Circuit breakers"):
	// a new call is refused, nothing is stored; retry after Retry-After.
	CodeCircuitOpen = "circuit_open"
	// CodeNotifyURLNotAllowed: the call's notify_url is not an absolute
	// http(s) URL matching one of the server's --webhook-allow patterns,
	// or the server allows no webhooks (422; docs/api.md, "Completion
	// webhooks"). Nothing was stored.
	CodeNotifyURLNotAllowed = "notify_url_not_allowed"
	// CodeInternal is also a failed call's code (a tool panic, a
	// completion the database refused for good).
	CodeInternal = "internal"
)

// Codes of a failed call's error object (docs/api.md, "The call object").
const (
	CodeToolFailed            = "tool_failed"
	CodeDownstreamError       = "downstream_error"
	CodeDownstreamRejected    = "downstream_rejected"
	CodeDownstreamUnreachable = "downstream_unreachable"
	CodeDownstreamTimeout     = "downstream_timeout"
	// The mcp kind's failures (docs/tools.md, "The mcp kind").
	CodeUpstreamToolError   = "upstream_tool_error"
	CodeUpstreamError       = "upstream_error"
	CodeUpstreamUnreachable = "upstream_unreachable"
	CodeUpstreamTimeout     = "upstream_timeout"
	// CodeUpstreamToolGone: the upstream no longer offers the tool.
	CodeUpstreamToolGone = "upstream_tool_gone"
	CodeToolTimeout      = "tool_timeout"
	CodeInvalidArgs      = "invalid_args"
	CodeCanceled         = "canceled"
	CodeResultTooLarge   = "result_too_large"
	// CodeOutcomeUnknown: the attempt's request may have been acted on,
	// but no complete answer was read (docs/lifecycle.md, "Unknown
	// outcomes"); CallError.Unknown names the case.
	CodeOutcomeUnknown = "outcome_unknown"
	// CodeResolvedFailed: an operator settled an outcome_unknown call as
	// failed (idemctl resolve --failed); the message is theirs.
	CodeResolvedFailed = "resolved_failed"
)

// The cases of an outcome_unknown error (CallError.Unknown, and the
// outcome_unknown audit event's detail).
const (
	// UnknownTimeoutAfterSend: the tool's timeout struck after the whole
	// request was written.
	UnknownTimeoutAfterSend = "timeout_after_send"
	// UnknownResetAfterSend: the connection was reset or closed after the
	// whole request was written, before a complete answer.
	UnknownResetAfterSend = "reset_after_send"
	// UnknownAbandoned: the attempt was abandoned while in flight (its
	// lease expired, the server stopped, or its process died) and the
	// call was recovered.
	UnknownAbandoned = "abandoned"
)

// Codes the client side reports itself, never sent by the server
// (docs/api.md, "Errors"; docs/cli.md).
const (
	// CodeRetryExhausted: every attempt timed out, failed to connect or was
	// told to come back later.
	CodeRetryExhausted = "retry_exhausted"
	// CodeUnknown: a by-key lookup never found the key before the deadline.
	CodeUnknown = "unknown"
	// CodeDeadlineExceeded: polling ended before the call was final.
	CodeDeadlineExceeded = "deadline_exceeded"
	// CodeInvalidKey: the client refused a key the server could never
	// accept; nothing was sent.
	CodeInvalidKey = "invalid_key"
)
