package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// Wait asks for the call until it is final, or the client's wait timeout
// passes (WithWaitTimeout), or ctx ends. Pauses start at PollStart and
// double up to PollMax; a longer Retry-After from the server is honoured;
// no pause goes past the deadline, and one last look is taken at the
// deadline (so Wait may overrun it by at most one request's timeout).
//
// A succeeded call is returned with a nil error, a failed one with a
// *CallError. Timeouts, connection errors, 429 and 503 while polling are
// not fatal: the poll goes on until the deadline. 404 ends at once with
// not_found: a call_id the server handed out is never forgotten. At the
// deadline the error has code deadline_exceeded (errors.Is(err,
// ErrDeadline)) and the returned Call is the last state seen (zero if
// none).
func (c *Client) Wait(ctx context.Context, callID string) (Call, error) {
	return c.poll(ctx, callPath(callID), false)
}

// WaitByKey is Wait for a caller that never received a call_id: it asks
// GET /v1/tool-calls/by-key/{key}. A 404 here only means "not recorded
// yet, or never": it keeps asking until the deadline and then ends with
// code unknown (errors.Is(err, ErrUnknown)). The safe next step after
// unknown is to submit again with the same key, never a new one.
//
// A key that CheckKey refuses ends at once with code invalid_key: the
// server can never have recorded it.
func (c *Client) WaitByKey(ctx context.Context, key string) (Call, error) {
	if err := CheckKey(key); err != nil {
		return Call{}, err
	}
	return c.poll(ctx, keyPath(key), true)
}

func (c *Client) poll(ctx context.Context, path string, byKey bool) (Call, error) {
	timeout := c.cfg.waitTimeout
	deadline := time.Now().Add(timeout)
	var (
		last    Call
		seen    bool
		lastErr error
	)
	pause := PollStart
	for {
		rep, err := c.get(ctx, path, true)
		if err != nil && ctx.Err() != nil {
			return last, ctx.Err()
		}
		var retryAfter time.Duration
		switch {
		case err != nil && isTransport(err):
			lastErr = err // the server may be restarting: keep asking
		case err != nil:
			return last, err
		case rep.status == http.StatusOK:
			last, seen = rep.call, true
			if last.Final() {
				return last, finalError(last)
			}
			retryAfter = rep.retryAfter
		case rep.status == http.StatusNotFound && byKey:
			lastErr = rep.apiError() // not recorded (yet): ask again
			retryAfter = rep.retryAfter
		case rep.retryable():
			lastErr = rep.apiError()
			retryAfter = rep.retryAfter
		default:
			return last, rep.apiError()
		}

		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		// The pause grows, yields to a longer Retry-After, and never
		// sleeps past the deadline.
		wait := min(max(pause, retryAfter), remaining)
		if err := c.pause(ctx, wait); err != nil {
			return last, err
		}
		pause = min(pause*2, PollMax)
	}

	// Say why the last poll did not settle it: "not found" after a server
	// that never answered would send the reader looking in the wrong place.
	var lastWords string
	if lastErr != nil {
		lastWords = " (last poll: " + pollFailure(lastErr) + ")"
	}
	if byKey && !seen {
		return last, &APIError{
			Code: wire.CodeUnknown,
			Message: fmt.Sprintf("no call recorded under this key after %s%s: the server may never have received it; "+
				"POST again with the same key", timeout, lastWords),
			Err: lastErr,
		}
	}
	status := "not seen"
	if seen {
		status = string(last.Status)
	}
	return last, &APIError{
		Code:    wire.CodeDeadlineExceeded,
		Message: fmt.Sprintf("call still %s after %s%s", status, timeout, lastWords),
		Err:     lastErr,
	}
}

// pollFailure names why a poll got no call: a transport failure in the
// short words of the attempt records, or the server's error code.
func pollFailure(err error) string {
	if isTransport(err) {
		return describe(err)
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return err.Error()
}
