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
	CodeToolTimeout           = "tool_timeout"
	CodeInvalidArgs           = "invalid_args"
	CodeCanceled              = "canceled"
	CodeResultTooLarge        = "result_too_large"
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
