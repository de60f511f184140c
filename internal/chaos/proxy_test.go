package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/client"
)

// upstream is a counting test server: it records every request it gets and
// answers 202 with {"n": <its number>}.
type upstream struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
	keys   []string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream read: %v", err)
		}
		u.mu.Lock()
		u.bodies = append(u.bodies, string(body))
		u.keys = append(u.keys, r.Header.Get("Idempotency-Key"))
		n := len(u.bodies)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"n":%d,"len":%d}`, n, len(body))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() (bodies, keys []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.bodies), slices.Clone(u.keys)
}

// bundle is a proxy in front of a counting upstream, with its log.
type bundle struct {
	up    *upstream
	proxy *Proxy
	srv   *httptest.Server
	log   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func setup(t *testing.T, o Options) *bundle {
	t.Helper()
	b := &bundle{up: newUpstream(t), log: &syncBuffer{}}
	target, _ := url.Parse(b.up.srv.URL)
	o.Target = target
	o.Log = slog.New(slog.NewTextHandler(b.log, nil))
	p, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.proxy = p
	b.srv = httptest.NewServer(p)
	t.Cleanup(b.srv.Close)
	return b
}

func post(t *testing.T, ctx context.Context, base, key, body string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tool-calls", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, string(data), err
}

const charge = `{"tool":"charge","args":{"amount":100}}`

func TestPassForwardsAndStreams(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModePass})
	resp, body, err := post(t, t.Context(), b.srv.URL, "K", charge)
	if err != nil || resp.StatusCode != 202 || body != `{"n":1,"len":39}` {
		t.Fatalf("client saw %v %q %v", resp, body, err)
	}
	// A body far over the duplicate limit passes untouched: pass streams.
	big := strings.Repeat("x", 3<<20)
	resp, body, err = post(t, t.Context(), b.srv.URL, "K2", big)
	if err != nil || resp.StatusCode != 202 || body != fmt.Sprintf(`{"n":2,"len":%d}`, len(big)) {
		t.Fatalf("big body: %v %q %v", resp, body, err)
	}
	bodies, keys := b.up.seen()
	if len(bodies) != 2 || bodies[0] != charge || !slices.Equal(keys, []string{"K", "K2"}) {
		t.Fatalf("upstream saw %d bodies, keys %v", len(bodies), keys)
	}
	if req, hits := b.proxy.Counts(); req != 2 || hits != 0 {
		t.Fatalf("counts = %d, %d", req, hits)
	}
}

func TestDropResponseClientTimesOutServerActed(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDropResponse, Select: First(1)})
	c, err := client.New(b.srv.URL, client.WithAttemptTimeout(300*time.Millisecond), client.WithRetries(1),
		client.WithPreferWait(0))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Submit(t.Context(), "charge", map[string]any{"amount": 100}, client.WithKey("drop-1"))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	// The client's first attempt timed out although the server got it;
	// the second, same key, passed.
	if len(res.Attempts) != 2 || res.Attempts[0].Error != "timed out" || res.Attempts[1].HTTP != 202 {
		t.Fatalf("attempts = %+v", res.Attempts)
	}
	bodies, keys := b.up.seen()
	if len(bodies) != 2 || bodies[0] != charge || !slices.Equal(keys, []string{"drop-1", "drop-1"}) {
		t.Fatalf("upstream saw %v %v, want the request twice with the same key", bodies, keys)
	}
	if req, hits := b.proxy.Counts(); req != 2 || hits != 1 {
		t.Fatalf("counts = %d, %d", req, hits)
	}
	// A user of idemctl proxy sees the drop at the default (info) level.
	if !strings.Contains(b.log.String(), "level=INFO msg=\"proxy dropped reply\" n=1 upstream=202") {
		t.Fatalf("no info line for the dropped reply:\n%s", b.log)
	}
}

func TestDropResponseHangsUpAfterHold(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDropResponse, DropHold: 10 * time.Millisecond})
	_, _, err := post(t, t.Context(), b.srv.URL, "K", charge)
	// No status line at all: the client sees the connection end.
	if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "EOF")) {
		t.Fatalf("err = %v, want the connection closed without a reply", err)
	}
	if bodies, _ := b.up.seen(); len(bodies) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(bodies))
	}
}

func TestDelayResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDelayResponse, Delay: 50 * time.Millisecond})
	resp, body, err := post(t, t.Context(), b.srv.URL, "K", charge)
	if err != nil || resp.StatusCode != 202 || body != `{"n":1,"len":39}` {
		t.Fatalf("client saw %v %q %v", resp, body, err)
	}
	if bodies, _ := b.up.seen(); len(bodies) != 1 {
		t.Fatalf("upstream saw %d, want 1", len(bodies))
	}
	if !strings.Contains(b.log.String(), "action=delay-response") {
		t.Fatalf("log = %s", b.log.String())
	}
}

func TestDelayResponseLongerThanClientTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDelayResponse, Delay: 10 * time.Second})
	// The server answers at once; the delay then outlasts the client.
	c, err := client.New(b.srv.URL, client.WithAttemptTimeout(300*time.Millisecond), client.WithRetries(0),
		client.WithPreferWait(0))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Submit(t.Context(), "charge", nil, client.WithKey("K"))
	if !errors.Is(err, client.ErrRetryExhausted) || res.Attempts[0].Error != "timed out" {
		t.Fatalf("err = %v attempts %+v", err, res.Attempts)
	}
}

func TestDuplicateRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDuplicateRequest})
	resp, body, err := post(t, t.Context(), b.srv.URL, "dup-1", charge)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("client saw %v %v", resp, err)
	}
	var got struct{ N int }
	if json.Unmarshal([]byte(body), &got) != nil || (got.N != 1 && got.N != 2) {
		t.Fatalf("client body = %q, want one of the two upstream replies", body)
	}
	bodies, keys := b.up.seen()
	if !slices.Equal(bodies, []string{charge, charge}) || !slices.Equal(keys, []string{"dup-1", "dup-1"}) {
		t.Fatalf("upstream saw %q %v, want the same request twice", bodies, keys)
	}
}

func TestDuplicateRequestBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDuplicateRequest, MaxBody: int64(len(charge))})
	// Exactly at the limit: duplicated.
	if resp, _, err := post(t, t.Context(), b.srv.URL, "K", charge); err != nil || resp.StatusCode != 202 {
		t.Fatalf("at limit: %v %v", resp, err)
	}
	// One byte over: refused, nothing reaches the server.
	resp, body, err := post(t, t.Context(), b.srv.URL, "K", charge+" ")
	if err != nil || resp.StatusCode != 413 || !strings.Contains(body, `"payload_too_large"`) {
		t.Fatalf("over limit: %v %q %v", resp, body, err)
	}
	if bodies, _ := b.up.seen(); len(bodies) != 2 {
		t.Fatalf("upstream saw %d, want 2 (the duplicated one only)", len(bodies))
	}
}

func TestSelectorEveryThroughProxy(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModeDuplicateRequest, Select: Every(2)})
	for i := 1; i <= 4; i++ {
		if resp, _, err := post(t, t.Context(), b.srv.URL, fmt.Sprintf("K%d", i), charge); err != nil || resp.StatusCode != 202 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
	}
	_, keys := b.up.seen()
	if want := []string{"K1", "K2", "K2", "K3", "K4", "K4"}; !slices.Equal(keys, want) {
		t.Fatalf("upstream keys %v, want %v", keys, want)
	}
	if req, hits := b.proxy.Counts(); req != 4 || hits != 2 {
		t.Fatalf("counts = %d, %d", req, hits)
	}
	// One decision line per request, with number, key and action.
	lines := strings.Split(strings.TrimSpace(b.log.String()), "\n")
	var decisions []string
	for _, l := range lines {
		if strings.Contains(l, "msg=proxy ") {
			decisions = append(decisions, l)
		}
	}
	if len(decisions) != 4 ||
		!strings.Contains(decisions[0], "n=1 method=POST path=/v1/tool-calls key=K1 action=pass") ||
		!strings.Contains(decisions[1], "n=2 method=POST path=/v1/tool-calls key=K2 action=duplicate-request") {
		t.Fatalf("log:\n%s", b.log.String())
	}
}

func TestUpstreamDownIs503(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	target, _ := url.Parse("http://" + addr)
	p, err := New(Options{Target: target, Mode: ModePass})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	resp, body, err := post(t, t.Context(), srv.URL, "K", charge)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"unavailable"`) {
		t.Fatalf("got %v %q %v", resp, body, err)
	}
}

func TestSelectorHit(t *testing.T) {
	t.Parallel()
	never := func() float64 { t.Fatal("rand called"); return 0 }
	seq := func(vals ...float64) func() float64 {
		return func() float64 { v := vals[0]; vals = vals[1:]; return v }
	}
	for _, tc := range []struct {
		sel  Selector
		rnd  func() float64
		want []bool // requests 1..6
	}{
		{All(), never, []bool{true, true, true, true, true, true}},
		{First(2), never, []bool{true, true, false, false, false, false}},
		{Every(3), never, []bool{false, false, true, false, false, true}},
		{Every(1), never, []bool{true, true, true, true, true, true}},
		{Prob(0), seq(0, 0, 0.5, 0.9, 0, 0), []bool{false, false, false, false, false, false}},
		{Prob(1), seq(0, 0.999, 0.5, 0.9, 0, 0.1), []bool{true, true, true, true, true, true}},
		{Prob(0.5), seq(0.1, 0.6, 0.5, 0.49, 0.9, 0), []bool{true, false, false, true, false, true}},
	} {
		t.Run(tc.sel.String(), func(t *testing.T) {
			for i, w := range tc.want {
				if got := tc.sel.Hit(int64(i+1), tc.rnd); got != w {
					t.Fatalf("request %d: hit = %v, want %v", i+1, got, w)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	target, _ := url.Parse("http://127.0.0.1:8081")
	for _, tc := range []struct {
		name string
		o    Options
		ok   bool
	}{
		{"ok", Options{Target: target, Mode: ModePass}, true},
		{"no target", Options{Mode: ModePass}, false},
		{"relative target", Options{Target: &url.URL{Path: "/x"}, Mode: ModePass}, false},
		{"bad mode", Options{Target: target, Mode: "explode"}, false},
		{"first 0", Options{Target: target, Mode: ModePass, Select: First(0)}, false},
		{"every -1", Options{Target: target, Mode: ModePass, Select: Every(-1)}, false},
		{"prob 2", Options{Target: target, Mode: ModePass, Select: Prob(2)}, false},
		{"negative delay", Options{Target: target, Mode: ModeDelayResponse, Delay: -1}, false},
	} {
		if err := tc.o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
	if _, err := ParseMode("drop-response"); err != nil {
		t.Error(err)
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Mode: ModePass})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.proxy.Serve(ctx, ln) }()
	if resp, _, err := post(t, t.Context(), "http://"+ln.Addr().String(), "K", charge); err != nil || resp.StatusCode != 202 {
		t.Fatalf("through Serve: %v %v", resp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v, want nil after cancel", err)
	}
}

// TestServeRefusesRemoteListenerUnlessAllowed: in front of a --chaos server
// the proxy forwards the chaos hooks, so it serves beyond loopback only
// when told to (AllowRemote).
func TestServeRefusesRemoteListenerUnlessAllowed(t *testing.T) {
	t.Parallel()
	target, _ := url.Parse("http://127.0.0.1:8081")
	for _, allow := range []bool{false, true} {
		p, err := New(Options{Target: target, Mode: ModePass, AllowRemote: allow})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Skipf("cannot listen on every interface here: %v", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- p.Serve(ctx, ln) }()
		if !allow {
			var err error
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second): // only so a regression fails instead of hanging
				err = errors.New("still serving")
			}
			cancel()
			ln.Close()
			if err == nil || !strings.Contains(err.Error(), "loopback") {
				t.Fatalf("Serve on %s without AllowRemote = %v, want a refusal", ln.Addr(), err)
			}
			continue
		}
		// Allowed: it serves (a request gets an answer) until cancelled.
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		resp, err := http.Get("http://127.0.0.1:" + port + "/healthz")
		if err != nil {
			t.Fatalf("AllowRemote proxy did not serve: %v", err)
		}
		resp.Body.Close()
		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("Serve = %v", err)
		}
	}
}
