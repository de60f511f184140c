package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/idemctl/idemctl/internal/wire"
)

// Sentinels for errors.Is. Every error of this package that matches one is
// an *APIError (or, for ErrCallFailed, a *CallError) whose Code is the
// sentinel's text; use errors.As to read the rest.
var (
	// ErrConflict: the key is already recorded for a different request
	// (idempotency_conflict, HTTP 409). APIError.CallID names the call
	// that holds it.
	ErrConflict = errors.New(wire.CodeIdempotencyConflict)
	// ErrNotFound: no such call (not_found, HTTP 404).
	ErrNotFound = errors.New(wire.CodeNotFound)
	// ErrUnauthorized: the server wants a valid token (unauthenticated,
	// HTTP 401; see WithToken).
	ErrUnauthorized = errors.New(wire.CodeUnauthenticated)
	// ErrForbidden: the token's principal may not call this tool
	// (tool_forbidden, HTTP 403).
	ErrForbidden = errors.New(wire.CodeToolForbidden)
	// ErrOverloaded: the server refused new work for now (overloaded, HTTP
	// 503 with Retry-After). Submit retries it; after the last retry the
	// retry_exhausted error still matches it.
	ErrOverloaded = errors.New(wire.CodeOverloaded)
	// ErrUnavailable: the server cannot serve now, e.g. its database is
	// down or it is shutting down (unavailable, HTTP 503). Retried like
	// ErrOverloaded.
	ErrUnavailable = errors.New(wire.CodeUnavailable)
	// ErrAlreadyFinal: Cancel found the call already ended
	// (already_final, HTTP 409).
	ErrAlreadyFinal = errors.New(wire.CodeAlreadyFinal)
	// ErrNotResolvable: Resolve found a call that is not failed with code
	// outcome_unknown (not_resolvable, HTTP 409); nothing changed.
	ErrNotResolvable = errors.New(wire.CodeNotResolvable)
	// ErrRetryExhausted: no attempt of a POST got an answer that settled
	// it; the call may or may not exist. Ask again with the same key.
	ErrRetryExhausted = errors.New(wire.CodeRetryExhausted)
	// ErrUnknown: WaitByKey never found the key before its deadline.
	ErrUnknown = errors.New(wire.CodeUnknown)
	// ErrDeadline: Wait's deadline passed before the call was final.
	ErrDeadline = errors.New(wire.CodeDeadlineExceeded)
	// ErrInvalidKey: the key can never be accepted (CheckKey); nothing was
	// sent.
	ErrInvalidKey = errors.New(wire.CodeInvalidKey)
	// ErrCallFailed: the call ended failed (a *CallError).
	ErrCallFailed = errors.New("call_failed")
)

// sentinels maps each APIError sentinel to its code.
var sentinels = map[error]string{
	ErrConflict:       wire.CodeIdempotencyConflict,
	ErrNotFound:       wire.CodeNotFound,
	ErrUnauthorized:   wire.CodeUnauthenticated,
	ErrForbidden:      wire.CodeToolForbidden,
	ErrOverloaded:     wire.CodeOverloaded,
	ErrUnavailable:    wire.CodeUnavailable,
	ErrAlreadyFinal:   wire.CodeAlreadyFinal,
	ErrNotResolvable:  wire.CodeNotResolvable,
	ErrRetryExhausted: wire.CodeRetryExhausted,
	ErrUnknown:        wire.CodeUnknown,
	ErrDeadline:       wire.CodeDeadlineExceeded,
	ErrInvalidKey:     wire.CodeInvalidKey,
}

// APIError is an end without a final call: the server's error answer
// (Status > 0, its code and message), or the client's own verdict
// (retry_exhausted, unknown, deadline_exceeded, invalid_key). Branch on
// Code or on the sentinels, never on Message.
type APIError struct {
	// Status is the HTTP status of the last answer, 0 if there was none.
	Status int
	// Code is the stable error code (docs/api.md, "Errors").
	Code string
	// Message is for humans.
	Message string
	// CallID is the call that holds the key (idempotency_conflict,
	// already_final).
	CallID string
	// Err is the underlying cause (the last attempt's failure), if any.
	Err error
}

// Error says the code, the HTTP status if there was one, and the message.
func (e *APIError) Error() string {
	if e.Status > 0 {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap exposes the underlying cause.
func (e *APIError) Unwrap() error { return e.Err }

// Is matches the package's sentinels by code.
func (e *APIError) Is(target error) bool {
	code, ok := sentinels[target]
	return ok && code == e.Code
}

// CallError is a call that ended failed (docs/api.md, "The call object"):
// its error object, and the call. Retryable says whether a request with
// the same key may run it again; one that is not would only get the same
// failure back.
type CallError struct {
	// Code is the call's error code: tool_failed, downstream_error,
	// canceled, ...
	Code string
	// Message is for humans.
	Message string
	// Retryable: a same-key request resets the call and runs it again.
	Retryable bool
	// Status is the downstream's HTTP status for an http tool's failure,
	// 0 otherwise.
	Status int
	// Call is the failed call, with its whole error object in Call.Error.
	Call Call
}

// Error names the call, its error code and message.
func (e *CallError) Error() string {
	return fmt.Sprintf("call %s failed: %s: %s", e.Call.CallID, e.Code, e.Message)
}

// Is matches ErrCallFailed.
func (e *CallError) Is(target error) bool { return target == ErrCallFailed }

// transportError is a failure with no HTTP answer: timeout, refused,
// reset, closed mid-reply. The request may or may not have reached the
// server, which is exactly why the retry must carry the same key.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

func isTransport(err error) bool {
	var te *transportError
	return errors.As(err, &te)
}

// describe turns a transport error into the short words of the attempt
// records ("timed out", "connection refused", ...).
func describe(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed without a response"
	}
	return err.Error()
}
