package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRetryAfterCapped: a downstream's Retry-After holds the next attempt
// back at most MaxRetryAfter (the tool's retry.max_backoff), or one hour
// without one, and the message says what was asked and what is waited:
// "ten years" must not park a call until 2036.
func TestRetryAfterCapped(t *testing.T) {
	tenYears := time.Now().Add(10 * 365 * 24 * time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		name, header string
		max, want    time.Duration
		capped       bool
	}{
		{"seconds over the cap", "315360000", 30 * time.Second, 30 * time.Second, true},
		{"date over the cap", tenYears, 30 * time.Second, 30 * time.Second, true},
		{"no cap configured", "315360000", 0, MaxRetryAfterLimit, true},
		{"cap above the limit", "315360000", 48 * time.Hour, MaxRetryAfterLimit, true},
		{"under the cap", "7", 30 * time.Second, 7 * time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", c.header)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			defer ts.Close()
			out, err := newTool(t, Config{URL: ts.URL, MaxRetryAfter: c.max}).Run(context.Background(), inv(1))
			if err != nil || out.Err == nil || !out.Err.Retryable {
				t.Fatalf("got %v %+v", err, out.Err)
			}
			if out.Err.RetryAfter != c.want {
				t.Fatalf("RetryAfter %s, want %s", out.Err.RetryAfter, c.want)
			}
			if !strings.HasPrefix(out.Err.Message, "downstream answered 429 with Retry-After ") ||
				strings.Contains(out.Err.Message, "capped at "+c.want.String()) != c.capped {
				t.Fatalf("message %q (capped: %v at %s)", out.Err.Message, c.capped, c.want)
			}
		})
	}
}

// TestHeadersOverTheCap: a downstream whose answer's headers exceed
// MaxResponseHeaderBytes gets a non-retryable downstream_error saying so;
// one under it is read as usual.
func TestHeadersOverTheCap(t *testing.T) {
	for _, size := range []int{MaxResponseHeaderBytes / 2, MaxResponseHeaderBytes + 1024} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Padding", strings.Repeat("p", size))
			w.WriteHeader(http.StatusCreated)
		}))
		out, err := newTool(t, Config{URL: ts.URL}).Run(context.Background(), inv(1))
		ts.Close()
		if err != nil {
			t.Fatal(err)
		}
		if size < MaxResponseHeaderBytes {
			if out.Err != nil {
				t.Fatalf("%d bytes of headers: %+v", size, out.Err)
			}
			continue
		}
		want := fmt.Sprintf("the downstream's response headers exceed %d bytes", MaxResponseHeaderBytes)
		if out.Err == nil || out.Err.Code != CodeDownstreamError || out.Err.Retryable || out.Err.Message != want {
			t.Fatalf("%d bytes of headers: got %+v, want downstream_error %q", size, out.Err, want)
		}
	}
}

// TestEchoRedacted: a downstream that echoes the request's headers back
// (in a success, in a rejection, as JSON with the secret escaped, or as
// text) hands the caller no secret: the configured values are replaced
// by "[redacted]" wherever they appear. Other values are left alone.
func TestEchoRedacted(t *testing.T) {
	const token = "s3cr3t-t0ken/xyz"
	escaped := strings.ReplaceAll(token, "/", `\/`) // a legal JSON escape
	cases := []struct {
		name   string
		status int
		body   func(auth string) string
	}{
		{"success JSON", 200, func(a string) string { return `{"headers": {"Authorization": "` + a + `"}, "amount": 5.50}` }},
		{"success JSON, escaped", 201, func(string) string { return `{"auth": "Bearer ` + escaped + `", "n": 1}` }},
		{"member name", 200, func(string) string { return `{"` + token + `": true}` }},
		{"success text", 200, func(a string) string { return "you sent " + a }},
		{"rejected JSON", 400, func(a string) string { return `{"error": "bad token", "got": ["` + a + `"]}` }},
		{"rejected text", 401, func(a string) string { return "Authorization: " + a }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body(r.Header.Get("Authorization")))
			}))
			defer ts.Close()
			tool := newTool(t, Config{URL: ts.URL,
				Headers: []Header{{Name: "Authorization", Value: NewSecret("Bearer " + token)}},
				Redact:  []Secret{NewSecret("Bearer " + token), NewSecret(token)}})
			out, err := tool.Run(context.Background(), inv(1))
			if err != nil {
				t.Fatal(err)
			}
			shown, _ := json.Marshal(out.Err)
			shown = append(shown, out.Result...)
			if bytes.Contains(shown, []byte("t0ken")) || !bytes.Contains(shown, []byte(redacted)) {
				t.Fatalf("answer shown as %s", shown)
			}
			if out.Result != nil && !json.Valid(out.Result) {
				t.Fatalf("result is not JSON: %s", out.Result)
			}
			if c.name == "success JSON" && !bytes.Contains(out.Result, []byte(`"amount":5.50`)) {
				t.Fatalf("other values changed: %s", out.Result)
			}
		})
	}
}

// TestNetworkErrorsGeneric: a failed connection is stored with a fixed
// reason, never the downstream's address; the address (with secrets
// redacted) goes to the server log only.
func TestNetworkErrorsGeneric(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // no answer at all
		}
	}))
	defer reset.Close()
	_, resetPort, _ := net.SplitHostPort(reset.Listener.Addr().String())
	_, refusedPort, _ := net.SplitHostPort(refused)

	// The reset comes after the whole request was written: outcome_unknown
	// (unknown_test.go), with the same fixed reason.
	cases := []struct{ url, port, code, want string }{
		{"http://" + refused + "/x", refusedPort, CodeDownstreamUnreachable, "the downstream refused the connection"},
		{reset.URL + "/x", resetPort, CodeOutcomeUnknown,
			"the request was sent, then the connection to the downstream closed before a complete answer"},
	}
	for _, c := range cases {
		var logBuf bytes.Buffer
		i := inv(1)
		i.Log = slog.New(slog.NewTextHandler(&logBuf, nil))
		out, err := newTool(t, Config{URL: c.url, Redact: []Secret{NewSecret(c.port)}}).Run(context.Background(), i)
		if err != nil || out.Err == nil || out.Err.Code != c.code || !out.Err.Retryable {
			t.Fatalf("%s: got %v %+v", c.url, err, out.Err)
		}
		if out.Err.Message != c.want {
			t.Fatalf("%s: message %q, want %q", c.url, out.Err.Message, c.want)
		}
		// The log names the address, with the port (here standing for a
		// secret) redacted.
		if log := logBuf.String(); !strings.Contains(log, "127.0.0.1:"+redacted) || strings.Contains(log, c.port) {
			t.Fatalf("%s: log %s", c.url, log)
		}
	}
}

// TestClassify: each kind of transport error gets its fixed reason.
func TestClassify(t *testing.T) {
	cases := []struct {
		err    error
		code   string
		reason string
	}{
		{&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "payments.internal", IsNotFound: true}},
			CodeDownstreamUnreachable, "the downstream's host name could not be resolved"},
		{fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", MaxResponseHeaderBytes),
			CodeDownstreamError, fmt.Sprintf("the downstream's response headers exceed %d bytes", MaxResponseHeaderBytes)},
		{fmt.Errorf(`net/http: HTTP/1.x transport connection broken: malformed HTTP response "10.0.0.7 says hi"`),
			CodeDownstreamUnreachable, "the downstream could not be reached"},
	}
	for _, c := range cases {
		code, _, reason := classify(c.err)
		if code != c.code || reason != c.reason {
			t.Errorf("classify(%v) = %s %q, want %s %q", c.err, code, reason, c.code, c.reason)
		}
	}
}
