package wire

// Header names of the API (docs/api.md, "Headers").
const (
	// HeaderIdempotencyKey carries a call's key on POST /v1/tool-calls.
	// The http tool sends the same header to its downstream.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed ("true") marks a POST answered with a call
	// that already existed.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	// HeaderPrefer carries "wait=N": hold the answer until the call is
	// final, at most N seconds.
	HeaderPrefer = "Prefer"
	// HeaderPreferenceApplied answers a Prefer that was honoured.
	HeaderPreferenceApplied = "Preference-Applied"
	// HeaderRetryAfter says when to ask again: on a call not final yet and
	// on every 503.
	HeaderRetryAfter = "Retry-After"
	// HeaderVia names the door a new call comes through: `idemctl mcp`
	// sends "mcp" for the agent calls it forwards; the server records it
	// as the call's via. Any other value, or none, is the API's own door.
	HeaderVia = "Idemctl-Via"
	// HeaderDeduplicatedBy ("intent") marks a POST with a new key answered
	// with an existing call by intent deduplication.
	HeaderDeduplicatedBy = "Idemctl-Deduplicated-By"
	// HeaderLocation is the path of the call a response returns.
	HeaderLocation = "Location"
	// HeaderVary lists the request headers an answer depends on.
	HeaderVary = "Vary"
	// HeaderAllow lists a route's methods on a 405.
	HeaderAllow = "Allow"
	// HeaderAuthorization carries "Bearer TOKEN" (see BearerToken).
	HeaderAuthorization = "Authorization"
	// HeaderWWWAuthenticate answers a 401.
	HeaderWWWAuthenticate = "WWW-Authenticate"
	// HeaderCallID and HeaderAttempt name the call and the attempt on
	// every request an http tool sends its downstream (docs/tools.md,
	// "The http kind"), with HeaderIdempotencyKey.
	HeaderCallID  = "Idemctl-Call-Id"
	HeaderAttempt = "Idemctl-Attempt"
	// HeaderSignature signs a webhook delivery (SignWebhook); the
	// delivery's Idempotency-Key is its id, its Idemctl-Call-Id the call's.
	HeaderSignature = "Idemctl-Signature"
	// HeaderTraceParent is the W3C Trace Context header: read on every
	// request when tracing is on (the request's span continues the
	// client's trace; a new call stores it for its attempts), and sent on
	// every http tool request (docs/operations.md, "Traces").
	HeaderTraceParent = "traceparent"
	// MetaTraceParent is the same context as a params._meta member of an
	// MCP tools/call (MCP's SEP-414): read at /mcp, sent to mcp upstreams.
	MetaTraceParent = "traceparent"
)

// ReplayedTrue is the value of HeaderIdempotentReplayed.
const ReplayedTrue = "true"

// DeduplicatedByIntent is the value of HeaderDeduplicatedBy.
const DeduplicatedByIntent = "intent"

// PreferWait is the Prefer token the API honours: "wait=N".
const PreferWait = "wait"
