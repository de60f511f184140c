package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/clientknob"
	"github.com/idemctl/idemctl/internal/wire"
)

// fakeServer answers POST /v1/tool-calls from a script (one handler per
// request, the last one repeating) and records what it saw.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	keys   []string
	bodies []string
	paths  []string
	script []http.HandlerFunc
}

func newFakeServer(t *testing.T, script ...http.HandlerFunc) *fakeServer {
	t.Helper()
	fs := &fakeServer{t: t, script: script}
	fs.srv = httptest.NewServer(http.HandlerFunc(fs.serve))
	t.Cleanup(fs.srv.Close)
	return fs
}

func (fs *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fs.mu.Lock()
	n := len(fs.paths)
	fs.keys = append(fs.keys, r.Header.Get("Idempotency-Key"))
	fs.bodies = append(fs.bodies, string(body))
	fs.paths = append(fs.paths, r.URL.EscapedPath())
	h := fs.script[min(n, len(fs.script)-1)]
	fs.mu.Unlock()
	h(w, r)
}

func (fs *fakeServer) seenKeys() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.keys)
}

func (fs *fakeServer) seenBodies() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.bodies)
}

func (fs *fakeServer) seenPaths() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.paths)
}

func (fs *fakeServer) requests() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.paths)
}

// recorder is an injectable sleeper that records the pauses asked for and
// returns at once, so tests measure backoff without waiting for it.
type recorder struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.sleeps = append(r.sleeps, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *recorder) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sleeps)
}

// setup returns a client for base with no jitter, no Prefer: wait and a
// recording sleeper; opts come after those defaults.
func setup(t *testing.T, base string, opts ...Option) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, err := New(base, append([]Option{WithAttemptTimeout(200 * time.Millisecond), WithPreferWait(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.sleep = rec.sleep
	c.jitter = func() time.Duration { return 0 }
	return c, rec
}

func callJSON(id, key, status string) string {
	return fmt.Sprintf(`{"call_id":%q,"idem_key":%q,"tool":"charge","status":%q,"attempt":1,"result":null,"error":null,"effect_id":null,"created_at":1,"updated_at":1,"query_url":"/v1/tool-calls/%s"}`,
		id, key, status, id)
}

func respond(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// hang never answers: it holds the request until the client gives up.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func errJSON(code string) string {
	return fmt.Sprintf(`{"error":{"code":%q,"message":"msg for %s"}}`, code, code)
}

func TestSubmitTimeoutsThenSuccessKeepSameKey(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, hang, hang, respond(202, callJSON("c_1", "K", "pending")))
	var records []AttemptRecord
	c, rec := setup(t, fs.srv.URL, WithOnAttempt(func(r AttemptRecord) { records = append(records, r) }))

	res, err := c.Submit(t.Context(), "charge", map[string]any{"amount": 100}, WithKey("K"))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if got := fs.seenKeys(); !slices.Equal(got, []string{"K", "K", "K"}) {
		t.Fatalf("server saw keys %v, want the same key K on all 3 attempts", got)
	}
	if res.Call.CallID != "c_1" || res.HTTP != 202 || res.Key != "K" {
		t.Fatalf("result = %+v", res)
	}
	want := []AttemptRecord{
		{Attempt: 1, Error: "timed out", Key: "K", Retry: true},
		{Attempt: 2, Error: "timed out", Key: "K", Retry: true},
		{Attempt: 3, HTTP: 202, Key: "K", CallID: "c_1", Status: "pending"},
	}
	if !slices.Equal(records, want) || !slices.Equal(res.Attempts, want) {
		t.Fatalf("records = %+v\nwant %+v", records, want)
	}
	if got := rec.got(); !slices.Equal(got, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}) {
		t.Fatalf("backoff sleeps = %v, want [100ms 200ms]", got)
	}
	for _, b := range fs.seenBodies() {
		if b != `{"tool":"charge","args":{"amount":100}}` {
			t.Fatalf("body = %s", b)
		}
	}
}

func TestSubmitEndsAtOnceOnClientErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status   int
		code     string
		sentinel error
	}{
		{409, "idempotency_conflict", ErrConflict},
		{400, "bad_request", nil},
		{413, "payload_too_large", nil},
		{404, "not_found", ErrNotFound},
		{500, "internal", nil}, // only 503 among the 5xx means "try later"
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			fs := newFakeServer(t, respond(tc.status, errJSON(tc.code)))
			c, rec := setup(t, fs.srv.URL)
			res, err := c.Submit(t.Context(), "charge", nil, WithKey("K"))
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tc.status || apiErr.Code != tc.code {
				t.Fatalf("err = %v, want APIError %d %s", err, tc.status, tc.code)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tc.sentinel)
			}
			if errors.Is(err, ErrRetryExhausted) {
				t.Fatalf("%d must not count as retry_exhausted", tc.status)
			}
			if n := fs.requests(); n != 1 {
				t.Fatalf("server saw %d requests, want exactly 1 (no retry)", n)
			}
			if len(rec.got()) != 0 || len(res.Attempts) != 1 || res.Attempts[0].Code != tc.code || res.Attempts[0].Retry {
				t.Fatalf("sleeps %v attempts %+v", rec.got(), res.Attempts)
			}
		})
	}
}

func TestSubmit503HonoursRetryAfter(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(503, errJSON("unavailable"), "Retry-After", "2"),
		respond(200, callJSON("c_1", "K", "succeeded"), "Idempotent-Replayed", "true"))
	c, rec := setup(t, fs.srv.URL)
	res, err := c.Submit(t.Context(), "charge", nil, WithKey("K"))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if got := rec.got(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
		t.Fatalf("sleeps = %v, want [2s] from Retry-After (longer than the 100ms backoff)", got)
	}
	if !res.Replayed || res.HTTP != 200 || res.Call.Status != "succeeded" {
		t.Fatalf("result = %+v", res)
	}
	if r := res.Attempts[0]; r.HTTP != 503 || r.Code != "unavailable" || !r.Retry {
		t.Fatalf("first attempt = %+v", r)
	}
	if r := res.Attempts[1]; !r.Replayed || r.HTTP != 200 {
		t.Fatalf("second attempt = %+v", r)
	}
}

func TestSubmit429IsRetried(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(429, errJSON("rate_limited")),
		respond(429, errJSON("rate_limited"), "Retry-After", "0"),
		respond(202, callJSON("c_1", "K", "pending")))
	c, rec := setup(t, fs.srv.URL)
	if _, err := c.Submit(t.Context(), "charge", nil, WithKey("K")); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if n := fs.requests(); n != 3 {
		t.Fatalf("requests = %d, want 3", n)
	}
	if got := rec.got(); !slices.Equal(got, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}) {
		t.Fatalf("sleeps = %v", got)
	}
}

func TestSubmit408IsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t,
		respond(408, errJSON("bad_request")),
		respond(202, callJSON("c_1", "K", "pending")))
	c, _ := setup(t, fs.srv.URL)
	res, err := c.Submit(t.Context(), "charge", nil, WithKey("K"))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if n := fs.requests(); n != 2 {
		t.Fatalf("requests = %d, want 2 (the server's 408 is a timeout: retry)", n)
	}
	if len(res.Attempts) != 2 || res.Attempts[0].HTTP != 408 || !res.Attempts[0].Retry ||
		res.Attempts[0].Key != "K" || res.Attempts[1].Key != "K" {
		t.Fatalf("attempts = %+v, want a retried 408 then success, both with key K", res.Attempts)
	}
}

func TestSubmitExhaustedOn503(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(503, errJSON("unavailable")))
	c, _ := setup(t, fs.srv.URL, WithRetries(1))
	_, err := c.Submit(t.Context(), "charge", nil, WithKey("K"))
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != wire.CodeRetryExhausted || apiErr.Status != 503 {
		t.Fatalf("err = %#v, want retry_exhausted after 503", err)
	}
	if n := fs.requests(); n != 2 {
		t.Fatalf("requests = %d, want 1 + 1 retry", n)
	}
}

func TestSubmitConnectionRefusedExhausts(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every connect is refused

	c, rec := setup(t, "http://"+addr, WithRetries(2))
	res, err := c.Submit(t.Context(), "charge", nil, WithKey("K"))
	if !errors.Is(err, ErrRetryExhausted) {
		t.Fatalf("err = %v, want retry_exhausted", err)
	}
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "retry_exhausted" || apiErr.Status != 0 {
		t.Fatalf("err = %#v", err)
	}
	if len(res.Attempts) != 3 {
		t.Fatalf("attempts = %+v, want 3", res.Attempts)
	}
	for i, a := range res.Attempts {
		if a.Error != "connection refused" || a.Key != "K" || a.Attempt != i+1 {
			t.Fatalf("attempt %d = %+v", i, a)
		}
	}
	if got := rec.got(); !slices.Equal(got, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}) {
		t.Fatalf("sleeps = %v (no sleep after the last attempt)", got)
	}
}

func TestSubmitPreferWait(t *testing.T) {
	t.Parallel()
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Prefer"))
		mu.Unlock()
		respond(200, callJSON("c_1", "K", "succeeded"))(w, r)
	}))
	defer srv.Close()
	c, _ := setup(t, srv.URL, WithPreferWait(1500*time.Millisecond))
	if _, err := c.Submit(t.Context(), "charge", nil, WithKey("K")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(t.Context(), "charge", nil, WithKey("K"), WithCallPreferWait(0)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"wait=2", ""}) {
		t.Fatalf("Prefer headers = %q, want wait=2 (rounded up) then none", got)
	}
}

func TestSubmitNewKeyOnRetry(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, hang, respond(503, errJSON("unavailable")), respond(202, callJSON("c_3", "K-2", "pending")))
	c, _ := setup(t, fs.srv.URL)
	res, err := c.Submit(clientknob.WithNewKeyOnRetry(t.Context()), "charge", nil, WithKey("K"))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if got := fs.seenKeys(); !slices.Equal(got, []string{"K-0", "K-1", "K-2"}) {
		t.Fatalf("keys = %v, want K-0 K-1 K-2", got)
	}
	if res.Key != "K-2" {
		t.Fatalf("result key = %s", res.Key)
	}
}

func TestSubmitStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(503, errJSON("unavailable")))
	c, _ := setup(t, fs.srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	c.sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	_, err := c.Submit(ctx, "charge", nil, WithKey("K"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := fs.requests(); n != 1 {
		t.Fatalf("requests = %d", n)
	}
}

func TestSubmitArgsForms(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(202, callJSON("c_1", "K", "pending")))
	c, _ := setup(t, fs.srv.URL)
	seq := int64(7)
	for _, args := range []any{nil, json.RawMessage(`{"amount":5}`)} {
		if _, err := c.Submit(t.Context(), "charge", args, WithKey("K"), WithClientID("demo"), WithSeq(seq)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		`{"tool":"charge","args":{},"client_id":"demo","seq":7}`,
		`{"tool":"charge","args":{"amount":5},"client_id":"demo","seq":7}`,
	}
	if got := fs.seenBodies(); !slices.Equal(got, want) {
		t.Fatalf("bodies = %v", got)
	}
}

func TestAttemptRecordJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rec  AttemptRecord
		want string
	}{
		{AttemptRecord{Attempt: 1, Error: "timed out", Key: "drop-1"}, `{"attempt":1,"error":"timed out","key":"drop-1"}`},
		{AttemptRecord{Attempt: 2, HTTP: 200, Key: "drop-1", CallID: "c_1", Status: "succeeded", Replayed: true},
			`{"attempt":2,"http":200,"key":"drop-1","call_id":"c_1","status":"succeeded","replayed":true}`},
	} {
		b, err := json.Marshal(tc.rec)
		if err != nil || string(b) != tc.want {
			t.Fatalf("json = %s, %v\nwant %s", b, err, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		if got := Backoff(i); got != w*time.Millisecond {
			t.Errorf("Backoff(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := Backoff(100); got != MaxBackoff {
		t.Errorf("Backoff(100) = %v", got)
	}
	c := &Client{}
	for range 100 {
		if j := c.randomJitter(); j < 0 || j >= MaxJitter {
			t.Fatalf("default jitter %v outside [0, %v)", j, MaxJitter)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {"-1", 0}, {"soon", 0}, {"99999", MaxRetryAfter},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
		{now.Add(-5 * time.Second).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCallMarshalKeepsServerBytes(t *testing.T) {
	t.Parallel()
	raw := `{"call_id":"c_1","status":"succeeded","extra":1}`
	var c Call
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	c.Raw = json.RawMessage(raw)
	b, _ := json.Marshal(c)
	if string(b) != raw {
		t.Fatalf("marshal = %s", b)
	}
	c.Raw = nil
	b, _ = json.Marshal(c)
	if !json.Valid(b) || c.CallID != "c_1" {
		t.Fatalf("marshal without raw = %s", b)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(200, `{"calls":1,"effects":1,"by_status":{"succeeded":1},"extra":true}`))
	c, _ := setup(t, fs.srv.URL)
	s, err := c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls != 1 || s.Effects != 1 || s.ByStatus["succeeded"] != 1 || len(s.Raw) == 0 {
		t.Fatalf("stats = %+v", s)
	}
}
