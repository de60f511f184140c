package client

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

func TestWaitUntilFinal(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(200, callJSON("c_1", "K", "pending")),
		respond(200, callJSON("c_1", "K", "running")),
		respond(200, callJSON("c_1", "K", "succeeded")))
	c, rec := setup(t, fs.srv.URL, WithWaitTimeout(10*time.Second))
	call, err := c.Wait(t.Context(), "c_1")
	if err != nil {
		t.Fatalf("Wait: %v", err)
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

func TestWaitHonoursRetryAfterAndSurvives503(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(200, callJSON("c_1", "K", "running"), "Retry-After", "1"),
		respond(503, errJSON("unavailable")),
		respond(200, callJSON("c_1", "K", "failed")))
	c, rec := setup(t, fs.srv.URL, WithWaitTimeout(10*time.Second))
	call, err := c.Wait(t.Context(), "c_1")
	var ce *CallError
	if !errors.As(err, &ce) || call.Status != "failed" || ce.Call.CallID != "c_1" {
		t.Fatalf("Wait = %+v, %v; want the failed call with its *CallError", call, err)
	}
	if got := rec.got(); !slices.Equal(got, []time.Duration{time.Second, 100 * time.Millisecond}) {
		t.Fatalf("sleeps = %v, want [1s (Retry-After) 100ms]", got)
	}
}

func TestWaitByIDNotFoundEndsAtOnce(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(404, errJSON("not_found")))
	c, _ := setup(t, fs.srv.URL, WithWaitTimeout(10*time.Second))
	_, err := c.Wait(t.Context(), "c_missing")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want not_found", err)
	}
	if n := fs.requests(); n != 1 {
		t.Fatalf("requests = %d, want 1", n)
	}
}

func TestWaitByKeyNotFoundThenFound(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(404, errJSON("not_found")),
		respond(404, errJSON("not_found")),
		respond(200, callJSON("c_1", "a/b%c.d", "succeeded")))
	c, _ := setup(t, fs.srv.URL, WithWaitTimeout(10*time.Second))
	call, err := c.WaitByKey(t.Context(), "a/b%c.d")
	if err != nil || call.CallID != "c_1" {
		t.Fatalf("WaitByKey = %+v, %v", call, err)
	}
	// The key is one escaped path segment, '/' included.
	if got := fs.seenPaths(); len(got) != 3 || got[0] != "/v1/tool-calls/by-key/a%2Fb%25c%2Ed" {
		t.Fatalf("paths = %v", got)
	}
}

func TestWaitByKeyUnknownAtDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(404, errJSON("not_found")))
	c, _ := setup(t, fs.srv.URL, WithWaitTimeout(300*time.Millisecond))
	c.sleep = nil // real pauses: the deadline is wall time
	_, err := c.WaitByKey(t.Context(), "never-sent")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeUnknown || !errors.Is(err, ErrUnknown) {
		t.Fatalf("err = %v, want code unknown", err)
	}
	if n := fs.requests(); n < 2 {
		t.Fatalf("requests = %d, want it to keep asking until the deadline", n)
	}
}

func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(200, callJSON("c_1", "K", "running")))
	c, _ := setup(t, fs.srv.URL, WithWaitTimeout(300*time.Millisecond))
	c.sleep = nil
	call, err := c.Wait(t.Context(), "c_1")
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
