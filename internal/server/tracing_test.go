package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// The client's trace context in these tests: what a traced client sends
// on its POST.
const (
	clientTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID     = "00f067aa0ba902b7"
	clientTraceParnt = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	// traceSecret is a tools file header's ${TOKEN}; traceArg an
	// argument's value. Neither may appear in any span.
	traceSecret = "tok-trace-5e1f0a"
	traceArg    = "arg-trace-77c2d1"
)

// recorder is an in-memory span exporter behind a real SDK provider.
func recorder(t *testing.T) (*tracetest.InMemoryExporter, trace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

// spanNamed waits until exp holds an ended span called name and returns
// it (the last one).
func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var got tracetest.SpanStub
	eventually(t, "a span "+name+" ended", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				got = s
			}
		}
		return got.Name != ""
	})
	return got
}

// attrs is a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs fails unless s has each attribute of want, as a string.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[k]; !ok || g.Emit() != v {
			t.Errorf("span %q: %s = %q (present: %v), want %q; all: %v", s.Name, k, g.Emit(), ok, v, s.Attributes)
		}
	}
}

// noSecrets fails if any span's name, attributes, events or status
// carries one of secrets.
func noSecrets(t *testing.T, exp *tracetest.InMemoryExporter, secrets ...string) {
	t.Helper()
	for _, s := range exp.GetSpans() {
		text := fmt.Sprint(s.Name, s.Attributes, s.Events, s.Status, s.Links, s.Resource.Attributes())
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("span %q carries %q: %s", s.Name, secret, text)
			}
		}
	}
}

// traceDownstream is an http tool's downstream that records the
// traceparent of each request.
type traceDownstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newTraceDownstream(t *testing.T) *traceDownstream {
	t.Helper()
	d := &traceDownstream{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.seen = append(d.seen, r.Header.Get(wire.HeaderTraceParent))
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *traceDownstream) traceparents() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.seen...)
}

// traceTools is a tools file with one http tool, notify, in front of url,
// that sends the secret in a header.
func traceTools(t *testing.T, url string) *toolreg.Registry {
	t.Helper()
	reg, err := toolreg.Parse([]byte(fmt.Sprintf(`
tools:
  - name: notify
    kind: http
    url: %s/notify?to=somebody
    headers: {Authorization: "Bearer ${TOKEN}"}
    schema: {type: object, properties: {note: {type: string}}}
`, url)), func(k string) (string, bool) { return traceSecret, k == "TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// parentOf is a traceparent's trace id and parent (span) id.
func parentOf(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" {
		t.Fatalf("traceparent %q is not a W3C version 00 traceparent", tp)
	}
	return parts[1], parts[2]
}

// TestTraceOfACall: one traced POST gives one trace: the request's server
// span (a child of the client's traceparent, named after the route), the
// attempt (a child of the request's span, through the traceparent stored
// with the call), its completion, and the downstream request's client
// span, whose traceparent the downstream receives. The attributes name
// the call, tool, attempt and outcome; no secret, argument, key or URL
// path reaches any span.
func TestTraceOfACall(t *testing.T) {
	t.Parallel()
	exp, tp := recorder(t)
	down := newTraceDownstream(t)
	b := setup(t, func(c *Config) { c.Tools, c.TracerProvider = traceTools(t, down.URL), tp })

	r := b.post("k-traced-"+traceArg[:3], `{"tool":"notify","args":{"note":"`+traceArg+`"}}`, wire.HeaderTraceParent, clientTraceParnt)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	callID := r.call(t).CallID
	if c := b.waitFinal(callID); c.Status != wire.StatusSucceeded {
		t.Fatalf("call: %s %s", c.Status, c.Error)
	}

	req := spanNamed(t, exp, "POST "+wire.PathCalls)
	if req.SpanKind != trace.SpanKindServer || req.SpanContext.TraceID().String() != clientTraceID ||
		req.Parent.SpanID().String() != clientSpanID || !req.Parent.IsRemote() {
		t.Fatalf("request span: kind %v, trace %s, parent %s; want a server span under the client's %s",
			req.SpanKind, req.SpanContext.TraceID(), req.Parent.SpanID(), clientTraceParnt)
	}
	wantAttrs(t, req, map[attribute.Key]string{
		telemetry.CallID: callID, telemetry.Tool: "notify", telemetry.Outcome: "created",
		"http.route": wire.PathCalls, "http.request.method": "POST", "http.response.status_code": "202",
	})
	stored, err := b.st.GetAny(t.Context(), callID)
	if err != nil || stored.TraceParent != "00-"+clientTraceID+"-"+req.SpanContext.SpanID().String()+"-01" {
		t.Fatalf("stored trace parent = %q, %v; want the request span's", stored.TraceParent, err)
	}

	att := spanNamed(t, exp, "attempt notify")
	if att.SpanContext.TraceID().String() != clientTraceID || att.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Fatalf("attempt span: trace %s, parent %s; want a child of the request span %s in the client's trace",
			att.SpanContext.TraceID(), att.Parent.SpanID(), req.SpanContext.SpanID())
	}
	wantAttrs(t, att, map[attribute.Key]string{telemetry.CallID: callID, telemetry.Tool: "notify",
		telemetry.Attempt: "1", telemetry.Outcome: "succeeded"})
	if comp := spanNamed(t, exp, "complete"); comp.Parent.SpanID() != att.SpanContext.SpanID() {
		t.Errorf("complete span's parent = %s, want the attempt %s", comp.Parent.SpanID(), att.SpanContext.SpanID())
	}

	cl := spanNamed(t, exp, "POST")
	if cl.SpanKind != trace.SpanKindClient || cl.Parent.SpanID() != att.SpanContext.SpanID() {
		t.Fatalf("downstream span: kind %v, parent %s; want a client span under the attempt", cl.SpanKind, cl.Parent.SpanID())
	}
	wantAttrs(t, cl, map[attribute.Key]string{"http.request.method": "POST", "server.address": "127.0.0.1",
		"http.response.status_code": "200"})
	got := down.traceparents()
	if len(got) != 1 {
		t.Fatalf("downstream saw %d requests, want 1", len(got))
	}
	if tid, sid := parentOf(t, got[0]); tid != clientTraceID || sid != cl.SpanContext.SpanID().String() {
		t.Fatalf("downstream traceparent %q; want trace %s, parent the client span %s", got[0], clientTraceID, cl.SpanContext.SpanID())
	}
	noSecrets(t, exp, traceSecret, traceArg, "k-traced", "/notify", "to=somebody")
}

// TestTraceRecordsErrorCodes: a refused request's span carries the
// refusal's code; a failed attempt's span its outcome and code.
func TestTraceRecordsErrorCodes(t *testing.T) {
	t.Parallel()
	exp, tp := recorder(t)
	b := setup(t, func(c *Config) { c.TracerProvider = tp })

	if r := b.post("k-bad", `{"tool":"charge","args":{"amount":0}}`); r.status != http.StatusBadRequest {
		t.Fatalf("POST bad args: %d %s", r.status, r.body)
	}
	req := spanNamed(t, exp, "POST "+wire.PathCalls)
	wantAttrs(t, req, map[attribute.Key]string{telemetry.ErrorCode: wire.CodeBadRequest, "http.response.status_code": "400"})

	r := b.post("k-fail", `{"tool":"fail","args":{"retryable":false}}`)
	c := b.waitFinal(r.call(t).CallID)
	code := callError(t, c).Code
	att := spanNamed(t, exp, "attempt fail")
	wantAttrs(t, att, map[attribute.Key]string{telemetry.Outcome: "failed", telemetry.ErrorCode: code, telemetry.Attempt: "1"})

	if r := b.get("/v1/tool-calls/c_0000000000000000"); r.status != http.StatusNotFound {
		t.Fatalf("GET unknown: %d", r.status)
	}
	get := spanNamed(t, exp, "GET /v1/tool-calls/{call_id}")
	wantAttrs(t, get, map[attribute.Key]string{telemetry.ErrorCode: wire.CodeNotFound, "http.route": "/v1/tool-calls/{call_id}"})
	if r := b.get("/no/such/path"); r.status != http.StatusNotFound {
		t.Fatalf("GET unknown path: %d", r.status)
	}
	if r := b.do("BREW", "/v1/tool-calls", nil, nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("BREW /v1/tool-calls: %d", r.status)
	}
	spanNamed(t, exp, "_OTHER /v1/tool-calls")
	for _, s := range exp.GetSpans() {
		if strings.Contains(s.Name, "/no/such") || strings.Contains(s.Name, "BREW") {
			t.Errorf("span named after a raw path or method: %q (names must be routes)", s.Name)
		}
	}
}

// TestTracingOffSendsAndStoresNothing: without a tracer provider a
// client's traceparent is neither stored with the call nor passed on.
func TestTracingOffSendsAndStoresNothing(t *testing.T) {
	t.Parallel()
	down := newTraceDownstream(t)
	b := setup(t, func(c *Config) { c.Tools = traceTools(t, down.URL) })
	r := b.post("k-off", `{"tool":"notify","args":{}}`, wire.HeaderTraceParent, clientTraceParnt)
	c := b.waitFinal(r.call(t).CallID)
	if c.Status != wire.StatusSucceeded {
		t.Fatalf("call: %s %s", c.Status, c.Error)
	}
	if stored, err := b.st.GetAny(t.Context(), c.CallID); err != nil || stored.TraceParent != "" {
		t.Fatalf("stored trace parent = %q, %v; want none with tracing off", stored.TraceParent, err)
	}
	if got := down.traceparents(); len(got) != 1 || got[0] != "" {
		t.Fatalf("downstream traceparents = %q; want one request without one", got)
	}
}

// TestTraceContinuesAfterRestart: a call is recorded by one server, which
// stops before running it; a new server on the same database runs it.
// Its attempt is a child of the first server's request span, and the
// downstream receives a traceparent of the trace the client sent on the
// POST.
func TestTraceContinuesAfterRestart(t *testing.T) {
	t.Parallel()
	down := newTraceDownstream(t)
	dbPath := filepath.Join(t.TempDir(), "idem.db")

	expA, tpA := recorder(t)
	stA, err := sqlite.Open(context.Background(), dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := setupStore(t, stA, false, func(c *Config) { c.Tools, c.TracerProvider = traceTools(t, down.URL), tpA })
	r := a.post("k-restart", `{"tool":"notify","args":{}}`, wire.HeaderTraceParent, clientTraceParnt)
	callID := r.call(t).CallID
	req := spanNamed(t, expA, "POST "+wire.PathCalls)
	a.ts.Close()
	if err := a.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := stA.Close(); err != nil {
		t.Fatal(err)
	}
	if got := down.traceparents(); len(got) != 0 {
		t.Fatalf("the first server ran the call (%d downstream requests); it must only record it", len(got))
	}

	expB, tpB := recorder(t)
	b := setupOn(t, dbPath, func(c *Config) { c.Tools, c.TracerProvider = traceTools(t, down.URL), tpB })
	if c := b.waitFinal(callID); c.Status != wire.StatusSucceeded {
		t.Fatalf("call after the restart: %s %s", c.Status, c.Error)
	}
	got := down.traceparents()
	if len(got) != 1 {
		t.Fatalf("downstream saw %d requests, want 1", len(got))
	}
	if tid, _ := parentOf(t, got[0]); tid != clientTraceID {
		t.Fatalf("downstream traceparent %q after the restart; want the client's trace %s", got[0], clientTraceID)
	}
	att := spanNamed(t, expB, "attempt notify")
	if att.Parent.SpanID() != req.SpanContext.SpanID() || !att.Parent.IsRemote() {
		t.Fatalf("attempt after the restart: parent %s, want the first server's request span %s",
			att.Parent.SpanID(), req.SpanContext.SpanID())
	}
}

// TestTraceMCPDoorAndUpstream: a tools/call at /mcp is a server span, a
// child of the caller's params._meta.traceparent (SEP-414); the call it
// records runs an mcp tool whose upstream receives _meta.traceparent of
// the same trace, from the upstream tools/call's client span.
func TestTraceMCPDoorAndUpstream(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		upMetas []string
	)
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "0"}, nil)
	up.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tp, _ := req.Params.Meta[wire.MetaTraceParent].(string)
			mu.Lock()
			upMetas = append(upMetas, tp)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	upTS := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(upTS.Close)
	reg, err := toolreg.Parse([]byte(fmt.Sprintf("tools:\n  - {name: up, kind: mcp, url: %q}\n", upTS.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := reg.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	exp, tp := recorder(t)
	b := setup(t, func(c *Config) { c.Tools, c.TracerProvider = reg, tp })

	cs := mustMCP(t, b, "")
	res := callTool(t, cs, "up_echo", map[string]any{"idempotency_key": "k-mcp-trace"}, map[string]any{wire.MetaTraceParent: clientTraceParnt})
	if res.IsError {
		t.Fatalf("tools/call: %+v", res)
	}
	door := spanNamed(t, exp, "tools/call up_echo")
	if door.SpanKind != trace.SpanKindServer || door.SpanContext.TraceID().String() != clientTraceID ||
		door.Parent.SpanID().String() != clientSpanID {
		t.Fatalf("door span: kind %v, trace %s, parent %s; want a server span under _meta.traceparent",
			door.SpanKind, door.SpanContext.TraceID(), door.Parent.SpanID())
	}
	wantAttrs(t, door, map[attribute.Key]string{telemetry.MCPMethod: "tools/call", telemetry.Tool: "up_echo"})
	if _, ok := attrs(door)[telemetry.CallID]; !ok {
		t.Errorf("door span has no %s: %v", telemetry.CallID, door.Attributes)
	}
	att := spanNamed(t, exp, "attempt up_echo")
	if att.Parent.SpanID() != door.SpanContext.SpanID() {
		t.Fatalf("attempt's parent = %s, want the door's tools/call span %s", att.Parent.SpanID(), door.SpanContext.SpanID())
	}
	cl := spanNamed(t, exp, "tools/call echo")
	if cl.SpanKind != trace.SpanKindClient || cl.Parent.SpanID() != att.SpanContext.SpanID() {
		t.Fatalf("upstream span: kind %v, parent %s; want a client span under the attempt", cl.SpanKind, cl.Parent.SpanID())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(upMetas) != 1 {
		t.Fatalf("upstream saw %d tools/call, want 1", len(upMetas))
	}
	if tid, sid := parentOf(t, upMetas[0]); tid != clientTraceID || sid != cl.SpanContext.SpanID().String() {
		t.Fatalf("upstream _meta.traceparent %q; want trace %s, parent the client span %s", upMetas[0], clientTraceID, cl.SpanContext.SpanID())
	}
	noSecrets(t, exp, "k-mcp-trace")
}

// TestTracingOffCostsNothingPerRequest: without a provider the request
// path is not wrapped at all, and the helpers the shared middleware
// calls on every request allocate nothing. (Not parallel: AllocsPerRun
// counts the whole process's allocations.)
func TestTracingOffCostsNothingPerRequest(t *testing.T) {
	s := &Server{} // New sets tracer only from Config.TracerProvider
	next := &countingHandler{}
	if h, ok := s.traced(next).(*countingHandler); !ok || h != next {
		t.Fatalf("traced without a provider wraps the handler (%T); it must return it as it is", s.traced(next))
	}
	r := httptest.NewRequest(http.MethodPost, wire.PathCalls, nil)
	r.Pattern = "POST " + wire.PathCalls
	sw := &statusWriter{ResponseWriter: httptest.NewRecorder()}
	call := store.Call{CallID: "c_0000000000000001", Tool: "charge"}
	if n := testing.AllocsPerRun(100, func() {
		endRequestSpan(r, sw, http.StatusAccepted)
		noteCall(r.Context(), call, store.Created)
		noteErrorCode(sw, wire.CodeBadRequest)
	}); n != 0 {
		t.Fatalf("the request path's tracing helpers allocate %v times per request with tracing off, want 0", n)
	}
}

type countingHandler struct{ n int }

func (h *countingHandler) ServeHTTP(http.ResponseWriter, *http.Request) { h.n++ }
