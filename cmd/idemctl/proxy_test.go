package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/exitcode"
)

func TestProxyOptionsValidate(t *testing.T) {
	t.Parallel()
	base := proxyOptions{Listen: "127.0.0.1:0", Target: "http://127.0.0.1:8081", Mode: "pass", LogFormat: "text", LogLevel: "info"}
	for _, tc := range []struct {
		name string
		edit func(*proxyOptions)
		ok   bool
		want chaos.Selector
	}{
		{"default all", func(*proxyOptions) {}, true, chaos.All()},
		{"first", func(o *proxyOptions) { o.First, o.selectorsSet = 2, []string{"first"} }, true, chaos.First(2)},
		{"every", func(o *proxyOptions) { o.Every, o.selectorsSet = 3, []string{"every"} }, true, chaos.Every(3)},
		{"prob", func(o *proxyOptions) { o.Prob, o.selectorsSet = 0.5, []string{"prob"} }, true, chaos.Prob(0.5)},
		{"two selectors", func(o *proxyOptions) { o.First, o.Every, o.selectorsSet = 1, 2, []string{"first", "every"} }, false, chaos.Selector{}},
		{"first 0", func(o *proxyOptions) { o.selectorsSet = []string{"first"} }, false, chaos.Selector{}},
		{"bad mode", func(o *proxyOptions) { o.Mode = "explode" }, false, chaos.Selector{}},
		{"bad target", func(o *proxyOptions) { o.Target = "127.0.0.1:8081" }, false, chaos.Selector{}},
		{"every interface", func(o *proxyOptions) { o.Listen = ":8082" }, false, chaos.Selector{}},
		{"remote address", func(o *proxyOptions) { o.Listen = "0.0.0.0:8082" }, false, chaos.Selector{}},
		{"remote allowed", func(o *proxyOptions) { o.Listen, o.AllowRemote = "0.0.0.0:8082", true }, true, chaos.All()},
		{"localhost", func(o *proxyOptions) { o.Listen = "localhost:8082" }, true, chaos.All()},
		{"delay with pass", func(o *proxyOptions) { o.delaySet = true }, false, chaos.Selector{}},
		{"delay with drop", func(o *proxyOptions) { o.Mode, o.delaySet = "drop-response", true }, false, chaos.Selector{}},
		{"delay with delay", func(o *proxyOptions) { o.Mode, o.delaySet = "delay-response", true }, true, chaos.All()},
		{"drop-hold with pass", func(o *proxyOptions) { o.dropHoldSet = true }, false, chaos.Selector{}},
		{"drop-hold with drop", func(o *proxyOptions) { o.Mode, o.dropHoldSet = "drop-response", true }, true, chaos.All()},
		{"log level debug", func(o *proxyOptions) { o.LogLevel = "debug" }, true, chaos.All()},
		{"bad log level", func(o *proxyOptions) { o.LogLevel = "loud" }, false, chaos.Selector{}},
		{"bad log format", func(o *proxyOptions) { o.LogFormat = "xml" }, false, chaos.Selector{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			err := o.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v", err)
			}
			if tc.ok && (o.chaos.Select != tc.want || o.chaos.AllowRemote != o.AllowRemote) {
				t.Fatalf("selector = %v, allow remote %v; want %v, %v", o.chaos.Select, o.chaos.AllowRemote, tc.want, o.AllowRemote)
			}
		})
	}
}

// cliSyncBuffer is a goroutine-safe buffer for a command's stderr.
type cliSyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *cliSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *cliSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProxyCommandDuplicates(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(202)
	}))
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(t.Context())
	errOut := &cliSyncBuffer{}
	cmd := newRootCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut})
	// The default --log-level (info) must show the fault's own line, and
	// --log-format is serve's.
	cmd.SetArgs([]string{"proxy", "--listen", addr, "--target", up.URL, "--mode", "duplicate-request", "--first", "1", "--log-format", "json"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	var resp *http.Response
	for range 100 { // wait for the listener
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tool-calls", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "K")
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy never answered: %v\n%s", err, errOut.String())
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy command: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != 202 || len(keys) != 2 {
		t.Fatalf("status %d, upstream saw %v; want 202 and the request twice", resp.StatusCode, keys)
	}
	log := errOut.String()
	for _, want := range []string{`"msg":"proxy listening"`, `"action":"duplicate-request"`, `"msg":"proxy duplicate delivered"`} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %s:\n%s", want, log)
		}
	}
}

// TestProxyCommandRefusals: a non-loopback --listen without --allow-remote,
// and --delay or --drop-hold with a mode they do not tune, are usage errors
// (exit 2) and nothing listens.
func TestProxyCommandRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "--allow-remote"},
		{[]string{"--listen", ":0"}, "--allow-remote"},
		{[]string{"--listen", "127.0.0.1:0", "--delay", "1s"}, "--delay applies to --mode delay-response only"},
		{[]string{"--listen", "127.0.0.1:0", "--mode", "drop-response", "--delay", "1s"}, "--delay applies"},
		{[]string{"--listen", "127.0.0.1:0", "--mode", "delay-response", "--drop-hold", "1s"}, "--drop-hold applies to --mode drop-response only"},
		{[]string{"--listen", "127.0.0.1:0", "--log-level", "loud"}, "--log-level"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Not cliRun: a proxy that wrongly starts must not run forever.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			errOut := &cliSyncBuffer{}
			cmd := newRootCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut})
			cmd.SetArgs(append([]string{"proxy"}, tc.args...))
			err := cmd.ExecuteContext(ctx)
			var exitErr *ExitError
			if !errors.As(err, &exitErr) || exitErr.Code != exitcode.Usage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a usage error (exit %d) naming %q", err, exitcode.Usage, tc.want)
			}
			if strings.Contains(errOut.String(), "proxy listening") {
				t.Fatalf("the proxy listened:\n%s", errOut)
			}
		})
	}
}
