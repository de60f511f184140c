package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/wire"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// TestDecide: tracing is off unless --otel or an OTEL_* variable asks for
// it; OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER=none win over both; what
// is not supported is refused by name.
func TestDecide(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		enable  bool
		want    string
		wantErr string
	}{
		{name: "nothing", want: ""},
		{name: "--otel", enable: true, want: ExporterOTLP},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: ExporterOTLP},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: ExporterOTLP},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: ExporterOTLP},
		{name: "exporter console", env: map[string]string{"OTEL_TRACES_EXPORTER": "Console"}, want: ExporterConsole},
		{name: "exporter none beats --otel", enable: true, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: ""},
		{name: "sdk disabled beats --otel", enable: true,
			env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: ""},
		{name: "sdk disabled false", env: map[string]string{"OTEL_SDK_DISABLED": "false"}, enable: true, want: ExporterOTLP},
		{name: "http/protobuf", enable: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, want: ExporterOTLP},
		{name: "grpc refused", enable: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: `OTLP protocol "grpc" is not supported`},
		{name: "traces protocol wins", enable: true,
			env:     map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			wantErr: `OTLP protocol "http/json" is not supported`},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin" is not supported`},
		{name: "grpc ignored when off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: ""},
	}
	for _, c := range cases {
		got, err := Decide(env(c.env), c.enable)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: Decide = %q, %v; want an error with %q", c.name, got, err, c.wantErr)
			}
		case err != nil || got != c.want:
			t.Errorf("%s: Decide = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// TestSetupOffAndConsole: off, Setup gives no provider; with the console
// exporter the spans of the provider it gives are written out, with the
// service name, when it shuts down.
func TestSetupOffAndConsole(t *testing.T) {
	t.Parallel()
	off, err := Setup(t.Context(), Options{Getenv: env(nil)})
	if err != nil || off.Provider != nil || off.Exporter != "" {
		t.Fatalf("Setup with nothing asked = %+v, %v; want off", off, err)
	}
	if err := off.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown of an off Tracing: %v", err)
	}
	if _, err := Setup(t.Context(), Options{Getenv: env(map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"})}); err == nil {
		t.Fatal("Setup with an unsupported exporter: no error")
	}

	var out bytes.Buffer
	on, err := Setup(t.Context(), Options{Getenv: env(map[string]string{"OTEL_TRACES_EXPORTER": "console"}), Console: &out, Version: "v9.9.9"})
	if err != nil || on.Provider == nil || on.Exporter != ExporterConsole {
		t.Fatalf("Setup console = %+v, %v", on, err)
	}
	_, span := on.Provider.Tracer(Scope).Start(t.Context(), "probe")
	span.End()
	if err := on.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"probe"`, `"Value":"v9.9.9"`, `"service.version"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}

// TestTraceParentRoundTrip: the traceparent of a context's span, stored
// and read back, makes the remote parent of what starts from it; an empty
// or malformed value leaves the context as it was.
func TestTraceParentRoundTrip(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := WithTraceParent(context.Background(), tp)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("WithTraceParent(%s) = %+v", tp, sc)
	}
	if got := TraceParent(ctx); got != tp {
		t.Fatalf("TraceParent = %q, want %q", got, tp)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		if sc := trace.SpanContextFromContext(WithTraceParent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("WithTraceParent(%q) made a valid parent %+v", bad, sc)
		}
	}
	if got := TraceParent(context.Background()); got != "" {
		t.Errorf("TraceParent of an untraced context = %q, want empty", got)
	}
	h := http.Header{}
	InjectHeader(ctx, h)
	if h.Get(wire.HeaderTraceParent) != tp {
		t.Fatalf("InjectHeader: traceparent %q, want %q", h.Get(wire.HeaderTraceParent), tp)
	}
	if got := TraceParent(FromHeader(context.Background(), h)); got != tp {
		t.Fatalf("FromHeader then TraceParent = %q, want %q", got, tp)
	}
}

// TestTracerOffIsFree: without a span in the context the tool kinds get
// no tracer, and asking costs no allocation. (Not parallel: AllocsPerRun.)
func TestTracerOffIsFree(t *testing.T) {
	ctx := context.Background()
	if Tracer(ctx) != nil {
		t.Fatal("Tracer of an untraced context is not nil")
	}
	if n := testing.AllocsPerRun(100, func() { _ = Tracer(ctx); _ = TraceParent(ctx) }); n != 0 {
		t.Fatalf("Tracer and TraceParent of an untraced context allocate %v times, want 0", n)
	}
	if Tracer(WithTraceParent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")) == nil {
		t.Fatal("Tracer under a valid span context is nil")
	}
}

// TestSetupOTLPReachesCollector: --otel exports over OTLP/HTTP to
// OTEL_EXPORTER_OTLP_ENDPOINT (a stand-in collector here), with
// OTEL_SERVICE_NAME as service.name and OTEL_EXPORTER_OTLP_HEADERS sent;
// Shutdown flushes what is buffered. (Not parallel: it sets the
// process's environment, which the SDK reads.)
func TestSetupOTLPReachesCollector(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
		auth   []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			bodies = append(bodies, b)
			auth = append(auth, r.Header.Get("Authorization"))
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20collector-token")
	t.Setenv("OTEL_SERVICE_NAME", "idemctl-under-test")
	on, err := Setup(t.Context(), Options{Enable: true})
	if err != nil || on.Exporter != ExporterOTLP {
		t.Fatalf("Setup = %+v, %v", on, err)
	}
	_, span := on.Provider.Tracer(Scope).Start(t.Context(), "probe-span")
	span.End()
	if err := on.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown (flush to the collector): %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) == 0 {
		t.Fatal("the collector received no export request")
	}
	all := bytes.Join(bodies, nil)
	for _, want := range []string{"probe-span", "idemctl-under-test"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Errorf("the export does not carry %q", want)
		}
	}
	if auth[0] != "Bearer collector-token" {
		t.Errorf("the export's Authorization = %q, want the OTEL_EXPORTER_OTLP_HEADERS value", auth[0])
	}
}

// TestSetupLogsExportFailures: an export the collector refuses is a
// warning in serve's log, not a line of the standard library's log.
// (Not parallel: it sets the environment and the SDK's process-wide error
// handler.)
func TestSetupLogsExportFailures(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	var logged bytes.Buffer
	on, err := Setup(t.Context(), Options{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil || on.Provider == nil {
		t.Fatalf("Setup = %+v, %v", on, err)
	}
	_, span := on.Provider.Tracer(Scope).Start(t.Context(), "refused")
	span.End()
	_ = on.Shutdown(t.Context()) // the flush fails: the collector refuses
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "tracing: ") {
		t.Fatalf("log after a refused export:\n%s", logged.String())
	}
}
