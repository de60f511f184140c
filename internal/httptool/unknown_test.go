package httptool

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// The cases of docs/lifecycle.md, "Unknown outcomes", for the http kind:
// a failure after the whole request was written is outcome_unknown (the
// downstream may have acted), one before it keeps its known code.

// TestTimeoutAfterSend: the downstream read the request and never
// answered: outcome_unknown, case timeout_after_send, retryable.
func TestTimeoutAfterSend(t *testing.T) {
	var got atomic.Int64
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			got.Add(1)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	defer close(release)
	out, err := newTool(t, Config{URL: ts.URL, Timeout: 100 * time.Millisecond}).Run(context.Background(), inv(1))
	if err != nil || out.Err == nil || out.Err.Code != CodeOutcomeUnknown || out.Err.Unknown != wire.UnknownTimeoutAfterSend ||
		!out.Err.Retryable || out.Result != nil || out.Effect != nil {
		t.Fatalf("got %v %+v", err, out)
	}
	if got.Load() != 1 {
		t.Fatalf("the downstream read %d requests, want 1", got.Load())
	}
	if !strings.HasPrefix(out.Err.Message, "the request was sent, then no complete answer within the tool's timeout of 100ms") {
		t.Fatalf("message %q", out.Err.Message)
	}
}

// TestTimeoutBeforeSend: a downstream that never reads lets the request
// body fill the socket buffers, so the request is never written whole:
// the timeout is the known downstream_timeout.
func TestTimeoutBeforeSend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c // held open, never read
		}
	}()
	defer func() {
		ln.Close()
		for c := range conns {
			c.Close()
		}
	}()
	i := inv(1)
	i.Args = map[string]any{"blob": strings.Repeat("x", 32<<20)}
	out, err := newTool(t, Config{URL: "http://" + ln.Addr().String(), Timeout: 200 * time.Millisecond}).Run(context.Background(), i)
	if err != nil || out.Err == nil || out.Err.Code != CodeDownstreamTimeout || out.Err.Unknown != "" || !out.Err.Retryable {
		t.Fatalf("got %v %+v", err, out.Err)
	}
}

// TestResetAfterSend: the downstream read the whole request, then reset
// the connection: outcome_unknown, case reset_after_send.
func TestResetAfterSend(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST
		}
		conn.Close()
	}))
	defer ts.Close()
	out, err := newTool(t, Config{URL: ts.URL}).Run(context.Background(), inv(1))
	if err != nil || out.Err == nil || out.Err.Code != CodeOutcomeUnknown || out.Err.Unknown != wire.UnknownResetAfterSend ||
		!out.Err.Retryable {
		t.Fatalf("got %v %+v", err, out.Err)
	}
}

// TestLostMidAnswer: the answer started (status and part of the body) and
// the connection closed: the effect may well have happened, the answer is
// not complete: outcome_unknown, case reset_after_send.
func TestLostMidAnswer(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"charge\":")
		_ = buf.Flush()
		conn.Close()
	}))
	defer ts.Close()
	out, err := newTool(t, Config{URL: ts.URL, Effect: true}).Run(context.Background(), inv(1))
	if err != nil || out.Err == nil || out.Err.Code != CodeOutcomeUnknown || out.Err.Unknown != wire.UnknownResetAfterSend ||
		out.Effect != nil {
		t.Fatalf("got %v %+v", err, out)
	}
	if !strings.Contains(out.Err.Message, "reading the answer") {
		t.Fatalf("message %q", out.Err.Message)
	}
	// The stored object names the case.
	raw, _ := json.Marshal(out.Err)
	if !strings.Contains(string(raw), `"unknown":"reset_after_send"`) {
		t.Fatalf("stored error %s", raw)
	}
}

// TestLostAnswerOnReusedConnectionSentOnce: an attempt whose request goes
// out on a kept-alive connection, and whose answer is lost, is
// outcome_unknown after exactly one request. net/http would otherwise send
// a request with an Idempotency-Key again by itself on a new connection:
// a second effect at a downstream that ignores keys, and a lost answer
// nobody records.
func TestLostAnswerOnReusedConnectionSentOnce(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusCreated) // the first attempt leaves the connection idle
			return
		}
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // the request arrived; its answer is lost
		}
	}))
	defer ts.Close()
	tl := newTool(t, Config{URL: ts.URL, Timeout: 5 * time.Second})
	if out, err := tl.Run(context.Background(), inv(1)); err != nil || out.Err != nil {
		t.Fatalf("first attempt: %v %+v", err, out.Err)
	}
	out, err := tl.Run(context.Background(), inv(2))
	if err != nil || out.Err == nil || out.Err.Code != CodeOutcomeUnknown || out.Err.Unknown != wire.UnknownResetAfterSend {
		t.Fatalf("lost answer: %v %+v; want outcome_unknown reset_after_send", err, out.Err)
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("the downstream got %d requests, want 2 (one per attempt)", got)
	}
}
