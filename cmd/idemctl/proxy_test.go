package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/chaos"
)

func TestProxyOptionsValidate(t *testing.T) {
	base := proxyOptions{Listen: "127.0.0.1:0", Target: "http://127.0.0.1:8081", Mode: "pass"}
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			err := o.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v", err)
			}
			if tc.ok && o.chaos.Select != tc.want {
				t.Fatalf("selector = %v, want %v", o.chaos.Select, tc.want)
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
	cmd.SetArgs([]string{"proxy", "--listen", addr, "--target", up.URL, "--mode", "duplicate-request", "--first", "1"})
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
	if log := errOut.String(); !strings.Contains(log, "action=duplicate-request") || !strings.Contains(log, "proxy listening") {
		t.Fatalf("log:\n%s", log)
	}
}
