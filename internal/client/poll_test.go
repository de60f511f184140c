package client

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

func TestPollUntilFinal(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(200, callJSON("c_1", "K", "pending")),
		respond(200, callJSON("c_1", "K", "running")),
		respond(200, callJSON("c_1", "K", "succeeded")))
	c, rec := setup(t, fs.srv.URL)
	call, err := c.Poll(t.Context(), "c_1", 10*time.Second)
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	if call.Status != "succeeded" || call.CallID != "c_1" {
		t.Fatalf("call = %+v", call)
	}
	if got := fs.seenPaths(); !slices.Equal(got, []string{"/v1/tool-calls/c_1", "/v1/tool-calls/c_1", "/v1/tool-calls/c_1"}) {
		t.Fatalf("paths = %v", got)
	}
	// Pauses start at 50ms and double.
	if got := rec.got(); !slices.Equal(got, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}) {
		t.Fatalf("sleeps = %v", got)
	}
}

func TestPollHonoursRetryAfterAndSurvives503(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(200, callJSON("c_1", "K", "running"), "Retry-After", "1"),
		respond(503, errJSON("unavailable")),
		respond(200, callJSON("c_1", "K", "failed")))
	c, rec := setup(t, fs.srv.URL)
	call, err := c.Poll(t.Context(), "c_1", 10*time.Second)
	if err != nil || call.Status != "failed" {
		t.Fatalf("Poll = %+v, %v; want the failed call (failed is final, not an error of Poll)", call, err)
	}
	if got := rec.got(); !slices.Equal(got, []time.Duration{time.Second, 100 * time.Millisecond}) {
		t.Fatalf("sleeps = %v, want [1s (Retry-After) 100ms]", got)
	}
}

func TestPollByIDNotFoundEndsAtOnce(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(404, errJSON("not_found")))
	c, _ := setup(t, fs.srv.URL)
	_, err := c.Poll(t.Context(), "c_missing", 10*time.Second)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want not_found", err)
	}
	if n := fs.requests(); n != 1 {
		t.Fatalf("requests = %d, want 1", n)
	}
}

func TestPollByKeyNotFoundThenFound(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(404, errJSON("not_found")),
		respond(404, errJSON("not_found")),
		respond(200, callJSON("c_1", "a/b%c.d", "succeeded")))
	c, _ := setup(t, fs.srv.URL)
	call, err := c.PollByKey(t.Context(), "a/b%c.d", 10*time.Second)
	if err != nil || call.CallID != "c_1" {
		t.Fatalf("PollByKey = %+v, %v", call, err)
	}
	// The key is one escaped path segment, '/' included.
	if got := fs.seenPaths(); len(got) != 3 || got[0] != "/v1/tool-calls/by-key/a%2Fb%25c%2Ed" {
		t.Fatalf("paths = %v", got)
	}
}

func TestPollByKeyUnknownAtDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(404, errJSON("not_found")))
	c, _ := setup(t, fs.srv.URL)
	c.Sleep = nil // real pauses: the deadline is wall time
	_, err := c.PollByKey(t.Context(), "never-sent", 300*time.Millisecond)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeUnknown || !errors.Is(err, ErrUnknown) {
		t.Fatalf("err = %v, want code unknown", err)
	}
	if n := fs.requests(); n < 2 {
		t.Fatalf("requests = %d, want it to keep asking until the deadline", n)
	}
}

func TestPollDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(200, callJSON("c_1", "K", "running")))
	c, _ := setup(t, fs.srv.URL)
	c.Sleep = nil
	call, err := c.Poll(t.Context(), "c_1", 300*time.Millisecond)
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("err = %v, want deadline_exceeded", err)
	}
	if call.Status != "running" {
		t.Fatalf("last call = %+v, want the last state seen", call)
	}
}

func TestGetAndGetByKey(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(200, callJSON("c_1", "K", "pending")), respond(404, errJSON("not_found")))
	c, _ := setup(t, fs.srv.URL)
	if call, err := c.Get(t.Context(), "c_1"); err != nil || call.CallID != "c_1" || len(call.Raw) == 0 {
		t.Fatalf("Get = %+v, %v", call, err)
	}
	if _, err := c.GetByKey(t.Context(), "K"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetByKey err = %v", err)
	}
	if got := fs.seenPaths(); !slices.Equal(got, []string{"/v1/tool-calls/c_1", "/v1/tool-calls/by-key/K"}) {
		t.Fatalf("paths = %v", got)
	}
}
