package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/openapitest"
	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestMain removes the idemctl binary the process tests build.
func TestMain(m *testing.M) {
	code := m.Run()
	serveproc.RemoveBuilt()
	os.Exit(code)
}

// waitDeadline bounds every poll in these tests. Polls end as soon as their
// condition holds; the deadline only decides when to give up.
const waitDeadline = 10 * time.Second

// testLogger writes slog lines to t.Log, and drops them once the test has
// ended (a goroutine logging late must not panic the test binary).
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	w := &tWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t    *testing.T
	done atomic.Bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// bundle is one running server on a temp SQLite database.
type bundle struct {
	t      *testing.T
	dbPath string // "" when the store was given (setupStore)
	st     store.Store
	srv    *Server
	ts     *httptest.Server
	exits  chan int // codes passed to Config.Exit (chaos crashes)
}

// setup starts a server (executor + httptest) on a fresh database. Options
// adjust the Config before New.
func setup(t *testing.T, opts ...func(*Config)) *bundle {
	t.Helper()
	return setupOn(t, filepath.Join(t.TempDir(), "idem.db"), opts...)
}

// setupOn is setup on a given database file (a "restart" opens the same
// file again).
func setupOn(t *testing.T, dbPath string, opts ...func(*Config)) *bundle {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dbPath, store.Options{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the server's cleanup, registered later
	b := setupStore(t, st, true, opts...)
	b.dbPath = dbPath
	return b
}

// setupStore is how every test of this package starts a server (servertest
// imports this package, so they cannot use it): on st, which the caller
// closes (it may be shared with another server), with its executor when
// executor is true (without, calls stay pending, and st may be a fake that
// refuses what the executor needs).
func setupStore(t *testing.T, st store.Store, executor bool, opts ...func(*Config)) *bundle {
	t.Helper()
	b := &bundle{t: t, st: st, exits: make(chan int, 16)}
	cfg := Config{
		Addr:   "127.0.0.1:0",
		Logger: testLogger(t),
		// Tests that hand requests to the handler use httptest.NewRequest's
		// Host (example.com) or write "Host: x" themselves; the Host check
		// has tests of its own (hostguard_test.go).
		AllowedHosts: []string{"example.com", "x"},
	}
	cfg.Exit = func(code int) { b.exits <- code }
	for _, o := range opts {
		o(&cfg)
	}
	var err error
	b.srv, err = New(cfg, st)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if executor {
		if err := b.srv.Start(ctx); err != nil {
			cancel()
			t.Fatalf("Start: %v", err)
		}
	}
	b.ts = httptest.NewServer(b.srv.Handler())
	t.Cleanup(func() {
		b.ts.Close()
		cancel()
		_ = b.srv.Shutdown(context.Background())
	})
	return b
}

// idemctlBinary is servertest.Binary for this package's process tests: the
// idemctl binary, built once per test process; it skips under -short.
func idemctlBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: starts real idemctl processes (go build ./cmd/idemctl); run without -short")
	}
	bin, err := serveproc.BuildOnce()
	if err != nil {
		t.Fatalf("building idemctl: %v", err)
	}
	return bin
}

// startServe is servertest.StartServe: `bin serve --addr 127.0.0.1:0
// args...`, killed when the test ends, its output logged if it failed.
func startServe(t *testing.T, bin string, args ...string) *serveproc.Process {
	t.Helper()
	p, err := serveproc.Start(context.Background(), serveproc.Config{Binary: bin, Args: args})
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

// resp is an HTTP response with its body read.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) call(t *testing.T) wire.Call {
	t.Helper()
	var c wire.Call
	if err := json.Unmarshal(r.body, &c); err != nil || c.CallID == "" {
		t.Fatalf("response %d is not a call: %v: %s", r.status, err, r.body)
	}
	return c
}

func (r resp) errCode(t *testing.T) string {
	t.Helper()
	var e wire.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("response %d is not an error body: %v: %s", r.status, err, r.body)
	}
	return e.Error.Code
}

// do sends a request to the test server.
func (b *bundle) do(method, path string, body []byte, header map[string]string) resp {
	b.t.Helper()
	return doURL(b.t, b.ts.URL, method, path, body, header)
}

func doURL(t *testing.T, base, method, path string, body []byte, header map[string]string) resp {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// Every answer these tests read is checked against docs/openapi.yaml.
	res, err := (&http.Client{Transport: openapitest.Transport(t, nil)}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

// post sends POST /v1/tool-calls with an Idempotency-Key and a raw body.
func (b *bundle) post(key, body string, header ...string) resp {
	b.t.Helper()
	h := map[string]string{"Idempotency-Key": key}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return b.do(http.MethodPost, "/v1/tool-calls", []byte(body), h)
}

func (b *bundle) get(path string, header ...string) resp {
	b.t.Helper()
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return b.do(http.MethodGet, path, nil, h)
}

// waitFinal polls GET until the call is final and returns it.
func (b *bundle) waitFinal(callID string) wire.Call {
	b.t.Helper()
	return waitFinalURL(b.t, b.ts.URL, callID)
}

func waitFinalURL(t *testing.T, base, callID string) wire.Call {
	t.Helper()
	var last wire.Call
	eventually(t, "call "+callID+" reaches a final state", func() bool {
		r := doURL(t, base, http.MethodGet, wire.CallPath(callID), nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", callID, r.status, r.body)
		}
		last = r.call(t)
		return last.Status.Final()
	})
	return last
}

// eventually polls cond every 10ms until it holds, failing after waitDeadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", waitDeadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stats reads the store's counts directly.
func (b *bundle) stats() store.Stats {
	b.t.Helper()
	return storeStats(b.t, b.st)
}

func storeStats(t *testing.T, st store.Store) store.Stats {
	t.Helper()
	s, err := st.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return s
}

// events returns the audit event names of a call, in order.
func (b *bundle) events(callID string) []string {
	b.t.Helper()
	return auditEvents(b.t, b.st, callID)
}

// auditEvents is the call's story as its audit tells it (story).
func auditEvents(t *testing.T, st store.Store, callID string) []string {
	t.Helper()
	rows, err := st.Audit(context.Background(), callID, 0)
	if err != nil {
		t.Fatalf("Audit: %v", err)
	}
	return story(rows)
}

// story is the audit's events in order, the created row of a call claimed
// at creation standing for both steps it records: created, then claimed
// (store.ClaimOf). So a test states the lifecycle it expects whichever
// way the call was claimed; tests of the row itself read the rows.
func story(rows []store.AuditEvent) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Event)
		if _, ok := store.ClaimOf(r); ok && r.Event == store.EventCreated {
			out = append(out, store.EventClaimed)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// snapshot is everything a refused request must leave unchanged.
type snapshot struct {
	Stats store.Stats
	Calls []store.Call
	Audit []store.AuditEvent
}

func (b *bundle) snapshot() snapshot {
	b.t.Helper()
	ctx := context.Background()
	calls, err := b.st.ListCalls(ctx, store.ListFilter{})
	if err != nil {
		b.t.Fatal(err)
	}
	audit, err := b.st.Audit(ctx, "", 0)
	if err != nil {
		b.t.Fatal(err)
	}
	return snapshot{Stats: b.stats(), Calls: calls, Audit: audit}
}

func (s snapshot) equal(o snapshot) bool { return reflect.DeepEqual(s, o) }

// metricValue reads one sample from the Prometheus text at GET /metrics;
// series is the name with its labels as exposed, e.g.
// `idemctl_calls_total{outcome="created"}`. An absent series fails the
// test: read as 0, a renamed or removed metric would pass every "want 0".
func (b *bundle) metricValue(series string) float64 {
	b.t.Helper()
	r := b.get("/metrics")
	if r.status != http.StatusOK {
		b.t.Fatalf("GET /metrics: %d", r.status)
	}
	return metricSample(b.t, r.body, series)
}

// metricSample finds series in a Prometheus text exposition and fails the
// test when it is absent or its value is not a number.
func metricSample(t *testing.T, exposition []byte, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(exposition), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: bad value %q", series, v)
			}
			return f
		}
	}
	t.Fatalf("metric %s is not exposed at /metrics", series)
	return 0 // not reached
}

func netListen(t *testing.T) (net.Listener, error) {
	t.Helper()
	return net.Listen("tcp", "127.0.0.1:0")
}
