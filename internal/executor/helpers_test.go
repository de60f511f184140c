package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// The executor is tested as the server drives it, without HTTP: calls are
// recorded in a real SQLite store as the server's submit records them
// (CreateOrGet, then Added and Wake), and the outcome is read back from
// the store and from the executor's metrics.

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

// syncBuffer is a bytes.Buffer safe for the executor's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testConfig is what a test may adjust before New: the Config, the logger,
// and a wrapper around the store (a fake that counts or refuses).
type testConfig struct {
	Config
	Logger *slog.Logger
	wrap   func(store.Store) store.Store
	tracer trace.Tracer // Deps.Tracer
}

// bundle is one started executor on a temp SQLite database.
type bundle struct {
	t      *testing.T
	dbPath string
	st     *sqlite.Store
	ex     *Executor
	reg    *prometheus.Registry // the executor's metrics
	exits  chan int             // codes passed to Config.Exit (chaos crashes)
	finals chan string          // call ids passed to Deps.OnFinal
}

// setup starts an executor on a fresh database. Options adjust the
// configuration before New.
func setup(t *testing.T, opts ...func(*testConfig)) *bundle {
	t.Helper()
	return setupOn(t, filepath.Join(t.TempDir(), "idem.db"), opts...)
}

// setupOn is setup on a given database file: a second executor on the
// same file is another server on the same database.
func setupOn(t *testing.T, dbPath string, opts ...func(*testConfig)) *bundle {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dbPath, store.Options{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	b := &bundle{t: t, dbPath: dbPath, st: st, exits: make(chan int, 16), finals: make(chan string, 1024)}
	tc := testConfig{Logger: testLogger(t)}
	tc.Exit = func(code int) { b.exits <- code }
	for _, o := range opts {
		o(&tc)
	}
	var used store.Store = st
	if tc.wrap != nil {
		used = tc.wrap(st)
	}
	b.ex, err = New(tc.Config, Deps{Store: used, Logger: tc.Logger, Tracer: tc.tracer, OnFinal: func(id string) {
		select {
		case b.finals <- id:
		default:
		}
	}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.reg = prometheus.NewRegistry()
	b.reg.MustRegister(b.ex.Collector())
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.ex.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = b.ex.Shutdown(context.Background())
		_ = st.Close()
	})
	return b
}

// submit records a call as the server's POST /v1/tool-calls does for key
// and a body such as {"tool":"charge","args":{"amount":1}}, and tells the
// executor. It returns the call the key names.
func (b *bundle) submit(key, body string) store.Call {
	b.t.Helper()
	return submitTo(b.t, b.st, b.ex, key, body)
}

// submitTo records a call in st and, if ex is not nil, tells ex about it.
func submitTo(t *testing.T, st store.Store, ex *Executor, key, body string) store.Call {
	t.Helper()
	return submitWith(t, st, ex, key, body, nil)
}

// submitWith is submitTo with a change to the NewCall before it is
// recorded (edit may be nil).
func submitWith(t *testing.T, st store.Store, ex *Executor, key, body string, edit func(*store.NewCall)) store.Call {
	t.Helper()
	var req struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	v, err := fingerprint.ParseJSON(req.Args)
	args, _ := v.(map[string]any)
	if err != nil || args == nil {
		t.Fatalf("args %s: %v", req.Args, err)
	}
	canon, err := fingerprint.Canonical(args)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fingerprint.Of(req.Tool, args)
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	n := store.NewCall{CallID: "c_" + hex.EncodeToString(id),
		Principal: store.DefaultPrincipal, IdemKey: key, Fingerprint: fp, Tool: req.Tool, ArgsJSON: canon}
	if edit != nil {
		edit(&n)
	}
	c, outcome, err := st.CreateOrGet(context.Background(), n)
	if err != nil {
		t.Fatalf("CreateOrGet %s: %v", key, err)
	}
	if ex != nil && (outcome == store.Created || outcome == store.RetryReset) {
		ex.Added()
		ex.Wake()
	}
	return c
}

// get reads a call from the store.
func (b *bundle) get(id string) store.Call {
	b.t.Helper()
	c, err := b.st.GetAny(context.Background(), id)
	if err != nil {
		b.t.Fatalf("Get %s: %v", id, err)
	}
	return c
}

// waitFinal polls the store until the call is final and returns it.
func (b *bundle) waitFinal(callID string) store.Call {
	b.t.Helper()
	var last store.Call
	eventually(b.t, "call "+callID+" reaches a final state", func() bool {
		last = b.get(callID)
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
	s, err := b.st.Stats(context.Background())
	if err != nil {
		b.t.Fatalf("Stats: %v", err)
	}
	return s
}

// events returns the audit event names of a call, in order.
func (b *bundle) events(callID string) []string {
	b.t.Helper()
	return auditEvents(b.t, b.st, callID)
}

func auditEvents(t *testing.T, st store.Store, callID string) []string {
	t.Helper()
	rows, err := st.Audit(context.Background(), callID, 0)
	if err != nil {
		t.Fatalf("Audit: %v", err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r.Event)
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

// metricValue reads one sample of the executor's metrics in the Prometheus
// text format the server's /metrics serves; series is the name with its
// labels as exposed, e.g. `idemctl_lease_recoveries_total{reason="expired"}`.
// An absent series fails the test: read as 0, a renamed or removed metric
// would pass every "want 0".
func (b *bundle) metricValue(series string) float64 {
	b.t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(b.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.t.Fatalf("metric %s: bad value %q", series, v)
			}
			return f
		}
	}
	b.t.Fatalf("metric %s is not exposed", series)
	return 0 // not reached
}
