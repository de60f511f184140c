package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
)

func TestServeOptionsValidate(t *testing.T) {
	t.Parallel()
	good := func() serveOptions {
		return serveOptions{Addr: "127.0.0.1:0", DB: "x.db", Workers: 1, Lease: time.Second,
			LogFormat: "text", LogLevel: "info", ShutdownGrace: time.Second, MaxBodies: 1, MaxHeldWaits: 1,
			MaxResultBytes: 1, MaxBodyBytes: 1 << 20}
	}
	if o := good(); o.Validate() != nil {
		t.Fatalf("good options refused: %v", o.Validate())
	}
	cases := map[string]func(*serveOptions){
		"workers 0":        func(o *serveOptions) { o.Workers = 0 },
		"lease 0":          func(o *serveOptions) { o.Lease = 0 },
		"lease negative":   func(o *serveOptions) { o.Lease = -time.Second },
		"lease below 1s":   func(o *serveOptions) { o.Lease = 999 * time.Millisecond },
		"max pending < 0":  func(o *serveOptions) { o.MaxPending = -1 },
		"empty addr":       func(o *serveOptions) { o.Addr = "" },
		"empty db":         func(o *serveOptions) { o.DB = "" },
		"log format":       func(o *serveOptions) { o.LogFormat = "xml" },
		"log level":        func(o *serveOptions) { o.LogLevel = "loud" },
		"negative grace":   func(o *serveOptions) { o.ShutdownGrace = -1 },
		"bodies 0":         func(o *serveOptions) { o.MaxBodies = 0 },
		"held waits 0":     func(o *serveOptions) { o.MaxHeldWaits = 0 },
		"max result 0":     func(o *serveOptions) { o.MaxResultBytes = 0 },
		"mcp wait < 0":     func(o *serveOptions) { o.MCPWait = -time.Second },
		"everything wrong": func(o *serveOptions) { *o = serveOptions{} },
	}
	for name, mutate := range cases {
		o := good()
		mutate(&o)
		if o.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := good()
	o.LogLevel = "DEBUG"
	if err := o.Validate(); err != nil {
		t.Errorf("upper-case level refused: %v", err)
	}
}

func TestServeFlagDefaults(t *testing.T) {
	t.Parallel()
	cmd := newServeCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard})
	want := map[string]string{
		"addr": "127.0.0.1:8081", "db": "idem.db", "workers": "256", "lease": "30s", "max-pending": "100000", "chaos": "false",
		"log-format": "text", "log-level": "info", "shutdown-grace": "15s",
		"max-concurrent-bodies": "64", "max-held-waits": "512",
		"max-pending-per-principal": "50000", "max-held-waits-per-principal": "128",
		"max-connections": "0", "max-idle-per-client": "256",
		"max-body-bytes-in-flight": "8388608", "max-mcp-sessions": "1000", "max-mcp-sessions-per-principal": "100",
		"otel": "false",
	}
	for name, def := range want {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			t.Errorf("no --%s flag", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s default %q, want %q", name, f.DefValue, def)
		}
	}
}

// serveBuffer is a bytes.Buffer safe for the server's goroutines and the test.
type serveBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *serveBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *serveBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestServeRunsAndStopsOnCancel drives `idemctl serve` through cobra: it
// prints its serving line, answers, and returns cleanly when its context is
// cancelled (what SIGINT/SIGTERM do through root.go).
func TestServeRunsAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	errOut := &serveBuffer{}
	streams := &IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut}
	root := newRootCmd(streams)
	db := filepath.Join(t.TempDir(), "idem.db")
	root.SetArgs([]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite://" + db, "--workers", "2", "--log-format", "json"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- root.ExecuteContext(ctx) }()

	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		for _, line := range strings.Split(errOut.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "idemctl serving on "); ok {
				base, _, _ = strings.Cut(rest, " ")
				if !strings.Contains(rest, "workers 2, lease 30s") {
					t.Errorf("serving line %q", line)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no serving line:\n%s", errOut.String())
		}
		select {
		case err := <-errc:
			t.Fatalf("serve returned early: %v\n%s", err, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	res, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("healthz %d", res.StatusCode)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop after cancel")
	}
	if !strings.Contains(errOut.String(), `"msg":"stopped cleanly"`) {
		t.Errorf("no JSON log line about the clean stop:\n%s", errOut.String())
	}
}

func TestServeRefusesChaosOffLoopback(t *testing.T) {
	t.Parallel()
	_, errOut, code := cliRun(t, "serve", "--addr", "0.0.0.0:0", "--chaos", "--db", filepath.Join(t.TempDir(), "x.db"))
	if code != exitcode.Usage || !strings.Contains(errOut, "loopback") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestServeRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--workers", "0"},
		{"serve", "--lease", "0s"},
		{"serve", "--log-format", "yaml"},
		{"serve", "--max-concurrent-bodies", "0"},
		{"serve", "--max-held-waits", "-1"},
	} {
		_, errOut, code := cliRun(t, args...)
		if code != exitcode.Usage || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit %d", args, code, errOut, exitcode.Usage)
		}
	}
}

// TestServeRefusesUnsupportedTracing: an OTEL_* setting serve cannot
// honour stops it before it binds or creates anything, naming the
// variable: asked-for traces never silently go missing. (Not parallel: it
// sets the environment.)
func TestServeRefusesUnsupportedTracing(t *testing.T) {
	for name, kv := range map[string][2]string{
		"exporter": {"OTEL_TRACES_EXPORTER", "zipkin"},
		"protocol": {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			db := filepath.Join(t.TempDir(), "x.db")
			_, errOut, code := cliRun(t, "serve", "--otel", "--addr", "127.0.0.1:0", "--db", db)
			if code != exitcode.Usage || !strings.Contains(errOut, kv[1]) || !strings.Contains(errOut, "not supported") {
				t.Fatalf("exit %d, stderr %q; want exit %d naming %s", code, errOut, exitcode.Usage, kv[1])
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Fatalf("the refused start created %s (%v)", db, err)
			}
		})
	}
}
