package httptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/tool"
)

func newTool(t *testing.T, cfg Config) *Tool {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "t"
	}
	tool, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tool
}

func inv(attempt int64) tool.Invocation {
	return tool.Invocation{CallID: "c_00000000000000aa", Tool: "t", Attempt: attempt,
		Args: map[string]any{"amount": json.Number("5"), "_crash_before_commit": true}}
}

// TestOutcomeMapping is the table of docs/tools.md, "The http kind": each
// answer the downstream can give and what the call becomes.
func TestOutcomeMapping(t *testing.T) {
	eff := tool.EffectID("c_00000000000000aa")
	cases := []struct {
		name      string
		status    int
		body      string
		header    map[string]string
		result    string // "" when the outcome is an error
		code      string
		retryable bool
		errStatus int
		errBody   string
		retryIn   time.Duration
	}{
		{name: "200 JSON", status: 200, body: `{"id": "r_1", "ok": true}`,
			result: `{"status":200,"body":{"id":"r_1","ok":true},"effect_id":"` + eff + `"}`},
		{name: "201 not JSON", status: 201, body: "created <r_1> & ok",
			result: `{"status":201,"body":"created <r_1> & ok","effect_id":"` + eff + `"}`},
		{name: "204 empty", status: 204, result: `{"status":204,"body":null,"effect_id":"` + eff + `"}`},
		{name: "200 oversized", status: 200, body: `"` + strings.Repeat("x", 2000) + `"`, code: CodeDownstreamError, errStatus: 200},
		{name: "302 redirect", status: 302, header: map[string]string{"Location": "/elsewhere"}, code: CodeDownstreamError, errStatus: 302},
		{name: "400", status: 400, body: `{"error": "amount too large"}`, code: CodeDownstreamRejected, errStatus: 400, errBody: `{"error":"amount too large"}`},
		{name: "404 text", status: 404, body: "no such route", code: CodeDownstreamRejected, errStatus: 404, errBody: `"no such route"`},
		{name: "409", status: 409, code: CodeDownstreamRejected, errStatus: 409},
		{name: "422 oversized", status: 422, body: strings.Repeat("y", 2000), code: CodeDownstreamRejected, errStatus: 422},
		{name: "408", status: 408, code: CodeDownstreamError, retryable: true, errStatus: 408},
		{name: "425", status: 425, code: CodeDownstreamError, retryable: true, errStatus: 425},
		{name: "429 Retry-After", status: 429, header: map[string]string{"Retry-After": "7"}, code: CodeDownstreamError,
			retryable: true, errStatus: 429, retryIn: 7 * time.Second},
		{name: "500", status: 500, body: "boom", code: CodeDownstreamError, retryable: true, errStatus: 500},
		{name: "503 Retry-After", status: 503, header: map[string]string{"Retry-After": "2"}, code: CodeDownstreamError,
			retryable: true, errStatus: 503, retryIn: 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body)
			}))
			defer ts.Close()
			tool := newTool(t, Config{URL: ts.URL, Effect: true, MaxBody: 1000})
			out, err := tool.Run(context.Background(), inv(1))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if c.result != "" {
				if out.Err != nil || string(out.Result) != c.result {
					t.Fatalf("got %s %+v, want %s", out.Result, out.Err, c.result)
				}
				if out.Effect == nil || out.Effect.EffectID != eff || out.Effect.CallID != "c_00000000000000aa" || out.Effect.Tool != "t" {
					t.Fatalf("effect %+v", out.Effect)
				}
				return
			}
			e := out.Err
			if out.Result != nil || out.Effect != nil || e == nil {
				t.Fatalf("want an error, got %s %+v", out.Result, out.Effect)
			}
			if e.Code != c.code || e.Retryable != c.retryable || e.Status != c.errStatus || string(e.Body) != c.errBody {
				t.Fatalf("got %+v (body %s), want %s retryable=%v status %d body %s", e, e.Body, c.code, c.retryable, c.errStatus, c.errBody)
			}
			if e.RetryAfter != c.retryIn {
				t.Fatalf("RetryAfter %s, want %s", e.RetryAfter, c.retryIn)
			}
		})
	}
}

// TestNoEffectWhenDisabled: effect: false records no effect row.
func TestNoEffectWhenDisabled(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ts.Close()
	out, err := newTool(t, Config{URL: ts.URL}).Run(context.Background(), inv(1))
	if err != nil || out.Err != nil || out.Result == nil || out.Effect != nil {
		t.Fatalf("got %v %+v %s %+v", err, out.Err, out.Result, out.Effect)
	}
}

// TestRequestOnTheWire: method, body (args without chaos args, canonical),
// and headers; the Idempotency-Key is the call's effect id on every attempt.
func TestRequestOnTheWire(t *testing.T) {
	type seen struct {
		method, body string
		header       http.Header
	}
	var mu sync.Mutex
	var got []seen
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, string(b), r.Header.Clone()})
		mu.Unlock()
		w.WriteHeader(503) // every attempt fails: the key must stay the same
	}))
	defer ts.Close()
	ht := newTool(t, Config{URL: ts.URL + "/refunds", Method: "PUT",
		Headers: []Header{{Name: "Authorization", Value: NewSecret("Bearer tok")}}})
	for attempt := int64(1); attempt <= 3; attempt++ {
		if _, err := ht.Run(context.Background(), inv(attempt)); err != nil {
			t.Fatal(err)
		}
	}
	eff := tool.EffectID("c_00000000000000aa")
	if len(got) != 3 {
		t.Fatalf("%d requests", len(got))
	}
	for i, s := range got {
		h := s.header
		if s.method != "PUT" || s.body != `{"amount":5}` || h.Get("Idempotency-Key") != eff ||
			h.Get("Idemctl-Call-Id") != "c_00000000000000aa" || h.Get("Idemctl-Attempt") != fmt.Sprint(i+1) ||
			h.Get("Content-Type") != "application/json" || h.Get("Authorization") != "Bearer tok" {
			t.Fatalf("attempt %d: %s %s %v", i+1, s.method, s.body, h)
		}
	}
}

// TestCancelledIsNotAnOutcome: the caller's context ending (shutdown) is
// not the downstream's failure: no outcome, the error is ctx's.
func TestCancelledIsNotAnOutcome(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer ts.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	out, err := newTool(t, Config{URL: ts.URL, Timeout: time.Minute}).Run(ctx, inv(1))
	if !errors.Is(err, context.Canceled) || out.Err != nil || out.Result != nil {
		t.Fatalf("got %v %+v", err, out)
	}
}

// TestRefused: a closed port is a retryable downstream_unreachable whose
// message does not repeat the URL.
func TestRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out, err := newTool(t, Config{URL: "http://" + addr + "/secret-path"}).Run(context.Background(), inv(1))
	if err != nil || out.Err == nil || out.Err.Code != CodeDownstreamUnreachable || !out.Err.Retryable || out.Err.Status != 0 ||
		out.Err.Unknown != "" {
		t.Fatalf("got %v %+v", err, out.Err)
	}
	if strings.Contains(out.Err.Message, "secret-path") {
		t.Fatalf("message repeats the URL: %s", out.Err.Message)
	}
}

// TestRedirectNotFollowed: the target of a redirect is never called.
func TestRedirectNotFollowed(t *testing.T) {
	var followed bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { followed = true }))
	defer target.Close()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer ts.Close()
	out, err := newTool(t, Config{URL: ts.URL}).Run(context.Background(), inv(1))
	if err != nil || out.Err == nil || out.Err.Status != 307 || out.Err.Retryable || followed {
		t.Fatalf("got %v %+v, followed=%v", err, out.Err, followed)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"": 0, "0": 0, "-5": 0, "x": 0, "3": 3 * time.Second, " 10 ": 10 * time.Second,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	}
	for v, want := range cases {
		if got := RetryAfter(v, now); got != want {
			t.Errorf("RetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "http://x/", Method: "GET"}, "method:"},
		{Config{URL: "x/y"}, "url:"},
		{Config{URL: "http://a:b@x/"}, "url: must not contain credentials"},
		{Config{URL: "http://x/", Headers: []Header{{Name: "idempotency-key", Value: NewSecret("k")}}}, "headers.idempotency-key: idemctl sets"},
		{Config{URL: "http://x/", Headers: []Header{{Name: "X A", Value: NewSecret("k")}}}, "not a valid header name"},
		{Config{URL: "http://x/", Headers: []Header{{Name: "X-A", Value: NewSecret("to\r\nken")}}}, "contains CR, LF or NUL"},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "to\r\nken") {
			t.Errorf("%+v: got %v, want …%s…", c.cfg, err, c.want)
		}
	}
}

func TestSecretRedacts(t *testing.T) {
	s := NewSecret("hunter2")
	js, _ := json.Marshal(map[string]any{"s": s})
	txt, _ := s.MarshalText()
	var logBuf strings.Builder
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("m", "secret", s, "header", Header{Name: "A", Value: s})
	slog.New(slog.NewTextHandler(&logBuf, nil)).Info("m", "secret", s, "header", Header{Name: "A", Value: s})
	for _, out := range []string{logBuf.String(), fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x %d", s, s, s, s, s, s, s), string(js), string(txt),
		fmt.Sprintf("%+v %#v", Header{Name: "A", Value: s}, Config{Headers: []Header{{Name: "A", Value: s}}})} {
		if strings.Contains(out, "hunter2") || strings.Contains(out, fmt.Sprintf("%x", "hunter2")) {
			t.Fatalf("secret shown: %s", out)
		}
	}
	if s.Reveal() != "hunter2" {
		t.Fatal("Reveal")
	}
}
