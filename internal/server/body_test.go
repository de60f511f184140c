package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/wire"
)

// sendPartial opens a raw connection to ts, sends a POST whose headers
// announce a longer body than is sent, then either stalls (so the server's
// read timeout runs out) or half-closes the connection (the body ends
// early), and returns the server's response with its body.
func sendPartial(t *testing.T, ts *httptest.Server, key string, halfClose bool) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"tool":"charge","args":{"amount":1}}`
	req := "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Idempotency-Key: " + key + "\r\nContent-Length: 200\r\n\r\n" + body[:10]
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	// Only a bound on a broken server; the answer normally comes as soon as
	// the server's read timeout (or the half-close) ends the body.
	_ = conn.SetReadDeadline(time.Now().Add(waitDeadline))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return res, string(data)
}

// TestSlowBodyIs408: a body not finished within the server's read timeout
// is 408 with code bad_request and a message that names neither end's
// address nor the network error; nothing is recorded, so a retry with the
// same key creates the call. A body cut short is 400, also without the
// network error's text.
func TestSlowBodyIs408(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ts := httptest.NewUnstartedServer(b.srv.Handler())
	ts.Config.ReadTimeout = 300 * time.Millisecond
	ts.Start()
	t.Cleanup(ts.Close)

	before := b.snapshot()
	leaks := []string{"127.0.0.1", "tcp", "i/o timeout", "->", "EOF"}
	for _, tc := range []struct {
		name      string
		halfClose bool
		status    int
		message   string
	}{
		{"stalled body", false, http.StatusRequestTimeout, "request body not received in time"},
		{"body cut short", true, http.StatusBadRequest, "request body ended before its Content-Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := sendPartial(t, ts, "k-slow-body", tc.halfClose)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			r := resp{status: res.StatusCode, body: []byte(body)}
			if code := r.errCode(t); code != wire.CodeBadRequest {
				t.Errorf("code %s, want bad_request", code)
			}
			if !strings.Contains(body, tc.message) {
				t.Errorf("message lacks %q: %s", tc.message, body)
			}
			for _, l := range leaks {
				if strings.Contains(body, l) {
					t.Errorf("body leaks %q: %s", l, body)
				}
			}
		})
	}
	if after := b.snapshot(); !after.equal(before) {
		t.Errorf("a request whose body never arrived changed the database")
	}

	// The retry the answer invites: same key, whole body → the call.
	r := doURL(t, ts.URL, http.MethodPost, "/v1/tool-calls", []byte(`{"tool":"charge","args":{"amount":1}}`),
		map[string]string{"Idempotency-Key": "k-slow-body"})
	if r.status != http.StatusAccepted {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
}

// TestReadyzDoesNotLeakDriverError: /readyz says the database is
// unreachable without the driver's message (which names its address).
func TestReadyzDoesNotLeakDriverError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := b.get("/readyz"); r.status != http.StatusOK {
		t.Fatalf("readyz on a working store: %d %s", r.status, r.body)
	}
	r := doURL(t, setupStore(t, unreachableStore(b.st), false).ts.URL, http.MethodGet, "/readyz", nil, nil)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeUnavailable {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "10.1.2.3") || strings.Contains(string(r.body), "dial") {
		t.Errorf("readyz leaks the driver error: %s", r.body)
	}
}

// unreachableStore fails Ping the way a driver does: with the address.
func unreachableStore(base store.Store) store.Store {
	return &storefake.Store{Base: base, PingFunc: func(context.Context) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5432},
			Err: io.ErrUnexpectedEOF}
	}}
}
