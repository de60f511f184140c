package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/wire"
)

// otlpCollector stands in for an OpenTelemetry collector: it keeps the
// bodies of the OTLP/HTTP trace exports it receives.
type otlpCollector struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	t.Helper()
	c := &otlpCollector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			c.mu.Lock()
			c.bodies = append(c.bodies, b)
			c.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *otlpCollector) received(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bodies {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// TestTraceAcrossProcessRestart: the real binary, traced through the
// OTEL_* variables the way an operator turns tracing on, records a call
// while its one worker is busy, and is killed (-9) before running it. A
// new process on the same database (serve --otel) runs the call: the
// downstream receives a traceparent of the trace the client sent on the
// POST, and the new process exports the attempt's span to the collector.
func TestTraceAcrossProcessRestart(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	down := newTraceDownstream(t)
	collector := newOTLPCollector(t)
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(tools, []byte(fmt.Sprintf(`
tools:
  - name: notify
    kind: http
    url: %s/notify
    headers: {Authorization: "Bearer ${TOKEN}"}
`, down.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "idem.db")
	env := []string{"TOKEN=" + traceSecret, "OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=50"}
	start := func(args ...string) *serveproc.Process {
		p, err := serveproc.Start(context.Background(), serveproc.Config{Binary: bin, Addr: "127.0.0.1:0", DB: db,
			Args: append([]string{"--tools", tools}, args...), Env: env})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Kill()
			if t.Failed() {
				t.Logf("output of %s:\n%s", p.CommandLine(), p.Stderr())
			}
		})
		return p
	}

	a := start("--workers", "1")
	busy := doURL(t, a.URL, http.MethodPost, wire.PathCalls, []byte(`{"tool":"sleep","args":{"seconds":10}}`),
		map[string]string{wire.HeaderIdempotencyKey: "k-busy"})
	waitByKey(t, a.URL, "k-busy", func(c wire.Call) bool { return c.Status == wire.StatusRunning })
	r := doURL(t, a.URL, http.MethodPost, wire.PathCalls, []byte(`{"tool":"notify","args":{}}`),
		map[string]string{wire.HeaderIdempotencyKey: "k-notify", wire.HeaderTraceParent: clientTraceParnt})
	if busy.status != http.StatusAccepted || r.status != http.StatusAccepted {
		t.Fatalf("POSTs: %d %s, %d %s", busy.status, busy.body, r.status, r.body)
	}
	callID := r.call(t).CallID
	a.Kill()
	if got := down.traceparents(); len(got) != 0 {
		t.Fatalf("the first process ran the call (%d downstream requests); its only worker was busy", len(got))
	}

	b := start("--workers", "2", "--otel")
	if c := waitFinalURL(t, b.URL, callID); c.Status != wire.StatusSucceeded {
		t.Fatalf("call after the restart: %s %s", c.Status, c.Error)
	}
	got := down.traceparents()
	if len(got) != 1 {
		t.Fatalf("downstream saw %d requests, want 1", len(got))
	}
	if tid, _ := parentOf(t, got[0]); tid != clientTraceID {
		t.Fatalf("downstream traceparent %q after the restart; want the client's trace %s", got[0], clientTraceID)
	}
	eventually(t, "the new process exported the attempt's span", func() bool { return collector.received("attempt notify") })
	if collector.received(traceSecret) {
		t.Fatal("an export carries the tools file's secret")
	}
}
