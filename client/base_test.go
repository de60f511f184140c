package client

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestBadBaseRefusedByNew: a base URL that can never work (no scheme,
// another scheme, no host) is an error of New, before any request, not a
// transport failure retried until the retries or the deadline run out.
func TestBadBaseRefusedByNew(t *testing.T) {
	for _, base := range []string{"nothttp", "ftp://127.0.0.1:8081", "http://", "127.0.0.1:8081", "http//127.0.0.1:8081", ""} {
		if c, err := New(base); err == nil || c != nil {
			t.Errorf("New(%q) = %v, %v; want a base URL error", base, c, err)
		}
	}
	for _, base := range []string{"http://127.0.0.1:8081", "https://example.test/prefix/", "HTTP://127.0.0.1:1"} {
		if _, err := New(base); err != nil {
			t.Errorf("New(%q) = %v, want nil", base, err)
		}
	}
}

// TestNewRefusesImpossibleOptions: options that can never work are New's
// error, not a surprise at the first call.
func TestNewRefusesImpossibleOptions(t *testing.T) {
	for name, opt := range map[string]Option{
		"zero attempt timeout": WithAttemptTimeout(0),
		"negative retries":     WithRetries(-1),
		"negative prefer wait": WithPreferWait(-time.Second),
		"zero wait timeout":    WithWaitTimeout(0),
	} {
		if _, err := New("http://127.0.0.1:1", opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestWaitDeadlineNamesTheLastFailure: when the server never answered, the
// deadline error says so ("connection refused") instead of only "not
// found", and keeps its code (deadline_exceeded by id, unknown by key).
func TestWaitDeadlineNamesTheLastFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: every poll is refused

	c, _ := setup(t, base, WithWaitTimeout(200*time.Millisecond))
	c.sleep = nil // real pauses: the deadline is wall time
	_, err = c.Wait(t.Context(), "c_0123456789abcdef")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeDeadlineExceeded || !strings.Contains(apiErr.Message, "connection refused") {
		t.Errorf("Wait err = %v, want deadline_exceeded naming connection refused", err)
	}
	_, err = c.WaitByKey(t.Context(), "K")
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeUnknown || !strings.Contains(apiErr.Message, "connection refused") {
		t.Errorf("WaitByKey err = %v, want unknown naming connection refused", err)
	}
}
