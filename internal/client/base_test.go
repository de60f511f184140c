package client

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestBadBaseEndsAtOnce: a base URL that can never work (no scheme, another
// scheme, no host) is an error before any request, not a transport failure
// retried until the retries or the poll deadline run out.
func TestBadBaseEndsAtOnce(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"nothttp", "ftp://127.0.0.1:8081", "http://", "127.0.0.1:8081", "http//127.0.0.1:8081", ""} {
		c, rec := setup(t, base)
		var attempts int
		c.OnAttempt = func(AttemptRecord) { attempts++ }
		_, err := c.Call(t.Context(), "K", Request{Tool: "charge"})
		if err == nil || isTransport(err) || errors.Is(err, ErrRetryExhausted) {
			t.Errorf("Call with base %q: err = %v, want a non-retryable base URL error", base, err)
		}
		if attempts != 0 || len(rec.got()) != 0 {
			t.Errorf("Call with base %q: %d attempts, sleeps %v; want none", base, attempts, rec.got())
		}
		if _, err := c.Poll(t.Context(), "c_0123456789abcdef", time.Minute); err == nil || errors.Is(err, ErrDeadline) {
			t.Errorf("Poll with base %q: err = %v, want a base URL error at once", base, err)
		}
		if _, err := c.PollByKey(t.Context(), "K", time.Minute); err == nil || errors.Is(err, ErrUnknown) {
			t.Errorf("PollByKey with base %q: err = %v, want a base URL error at once", base, err)
		}
		if len(rec.got()) != 0 {
			t.Errorf("polls with base %q slept %v; want no sleep", base, rec.got())
		}
	}
	for _, base := range []string{"http://127.0.0.1:8081", "https://example.test/prefix/", "HTTP://127.0.0.1:1"} {
		if err := CheckBase(base); err != nil {
			t.Errorf("CheckBase(%q) = %v, want nil", base, err)
		}
	}
}

// TestPollDeadlineNamesTheLastFailure: when the server never answered, the
// deadline error says so ("connection refused") instead of only "not found",
// and keeps its code (deadline_exceeded by id, unknown by key).
func TestPollDeadlineNamesTheLastFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: every poll is refused

	c, _ := setup(t, base)
	c.Sleep = nil // real pauses: the deadline is wall time
	_, err = c.Poll(t.Context(), "c_0123456789abcdef", 200*time.Millisecond)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeDeadlineExceeded || !strings.Contains(apiErr.Message, "connection refused") {
		t.Errorf("Poll err = %v, want deadline_exceeded naming connection refused", err)
	}
	_, err = c.PollByKey(t.Context(), "K", 200*time.Millisecond)
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeUnknown || !strings.Contains(apiErr.Message, "connection refused") {
		t.Errorf("PollByKey err = %v, want unknown naming connection refused", err)
	}
}
