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

// The client reports codes of its own (wire.CodeRetryExhausted, CodeUnknown,
// CodeDeadlineExceeded and CodeInvalidKey); the server's codes
// (bad_request, idempotency_conflict, not_found, ...) pass through as sent.

// Sentinels for errors.Is; every error this package returns for them is an
// *APIError whose Code matches.
var (
	ErrRetryExhausted = errors.New(wire.CodeRetryExhausted)
	ErrUnknown        = errors.New(wire.CodeUnknown)
	ErrDeadline       = errors.New(wire.CodeDeadlineExceeded)
	ErrInvalidKey     = errors.New(wire.CodeInvalidKey)
	ErrNotFound       = errors.New(wire.CodeNotFound)
	ErrConflict       = errors.New(wire.CodeIdempotencyConflict)
)

// APIError is an answer that ends a call without a call object: the server's
// error reply (Status > 0, its code and message), or the client's own
// verdict (retry_exhausted, unknown, deadline_exceeded). Branch on Code,
// never on Message.
type APIError struct {
	// Status is the HTTP status of the last reply, 0 if there was none.
	Status int
	// Code is the stable error code.
	Code string
	// Message is for humans.
	Message string
	// CallID is the call a conflicting key names (idempotency_conflict).
	CallID string
	// Err is the underlying cause (the last transport error), if any.
	Err error
}

func (e *APIError) Error() string {
	if e.Status > 0 {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap exposes the underlying transport error.
func (e *APIError) Unwrap() error { return e.Err }

// Is matches the package sentinels by code.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrRetryExhausted:
		return e.Code == wire.CodeRetryExhausted
	case ErrUnknown:
		return e.Code == wire.CodeUnknown
	case ErrDeadline:
		return e.Code == wire.CodeDeadlineExceeded
	case ErrInvalidKey:
		return e.Code == wire.CodeInvalidKey
	case ErrNotFound:
		return e.Code == wire.CodeNotFound
	case ErrConflict:
		return e.Code == wire.CodeIdempotencyConflict
	}
	return false
}

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

// describe turns a transport error into the short words of the attempt lines
// ("timed out", "connection refused", ...).
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
