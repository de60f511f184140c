package client

import "github.com/idemctl/idemctl/internal/wire"

// The API's shapes are defined once, in idemctl's internal wire package;
// these aliases give them names a program outside idemctl can write.

// Call is a call as the server sent it (docs/api.md, "The call object"):
// the decoded fields (a CallObject, embedded as the field Call), and Raw,
// the bytes as sent, which json.Marshal prints back unchanged.
type Call = wire.ReceivedCall

// CallObject is the call object's fields, embedded in Call.
type CallObject = wire.Call

// CallErrorObject is a failed call's error object, the JSON in
// Call.Error: {"code","message","retryable"}.
type CallErrorObject = wire.CallError

// Status is the state of a call: pending → running → succeeded | failed.
type Status = wire.Status

// The four states of a call; succeeded and failed are final.
const (
	StatusPending   = wire.StatusPending
	StatusRunning   = wire.StatusRunning
	StatusSucceeded = wire.StatusSucceeded
	StatusFailed    = wire.StatusFailed
)

// Tool is a tool as GET /v1/tools lists it (docs/api.md, "Tools").
type Tool = wire.Tool

// ToolRetry is a tool's retry policy as listed.
type ToolRetry = wire.ToolRetry

// ToolDedup is a tool's intent-deduplication rule as listed.
type ToolDedup = wire.ToolDedup

// ToolRate is a tool's rate limit as listed.
type ToolRate = wire.ToolRate

// ToolBreaker is a tool's circuit breaker and its state as listed.
type ToolBreaker = wire.ToolBreaker

// BreakerState is a circuit breaker's state.
type BreakerState = wire.BreakerState

// The states of a circuit breaker.
const (
	BreakerClosed   = wire.BreakerClosed
	BreakerOpen     = wire.BreakerOpen
	BreakerHalfOpen = wire.BreakerHalfOpen
)

// StatsBody is the body of GET /stats, embedded in Stats.
type StatsBody = wire.Stats

// Queue is the queue part of StatsBody.
type Queue = wire.Queue

// Error codes of the API (docs/api.md, "Errors" and "The call object"):
// APIError.Code and CallError.Code take these values. A server newer than
// this package may send codes not listed here.
const (
	CodeMissingIdempotencyKey = wire.CodeMissingIdempotencyKey
	CodeBadRequest            = wire.CodeBadRequest
	CodeIdempotencyConflict   = wire.CodeIdempotencyConflict
	CodeUnauthenticated       = wire.CodeUnauthenticated
	CodeAlreadyFinal          = wire.CodeAlreadyFinal
	CodeNotFound              = wire.CodeNotFound
	CodePayloadTooLarge       = wire.CodePayloadTooLarge
	CodeMethodNotAllowed      = wire.CodeMethodNotAllowed
	CodeUnavailable           = wire.CodeUnavailable
	CodeOverloaded            = wire.CodeOverloaded
	CodeHostNotAllowed        = wire.CodeHostNotAllowed
	CodeAuthThrottled         = wire.CodeAuthThrottled
	CodeToolForbidden         = wire.CodeToolForbidden
	CodeNotResolvable         = wire.CodeNotResolvable
	CodeCircuitOpen           = wire.CodeCircuitOpen
	CodeInternal              = wire.CodeInternal

	CodeToolFailed            = wire.CodeToolFailed
	CodeDownstreamError       = wire.CodeDownstreamError
	CodeDownstreamRejected    = wire.CodeDownstreamRejected
	CodeDownstreamUnreachable = wire.CodeDownstreamUnreachable
	CodeDownstreamTimeout     = wire.CodeDownstreamTimeout
	CodeToolTimeout           = wire.CodeToolTimeout
	CodeInvalidArgs           = wire.CodeInvalidArgs
	CodeCanceled              = wire.CodeCanceled
	CodeResultTooLarge        = wire.CodeResultTooLarge
	CodeOutcomeUnknown        = wire.CodeOutcomeUnknown
	CodeResolvedFailed        = wire.CodeResolvedFailed

	// The client's own verdicts, never sent by the server.
	CodeRetryExhausted   = wire.CodeRetryExhausted
	CodeUnknown          = wire.CodeUnknown
	CodeDeadlineExceeded = wire.CodeDeadlineExceeded
	CodeInvalidKey       = wire.CodeInvalidKey
)
