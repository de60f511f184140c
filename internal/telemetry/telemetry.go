// Package telemetry sets up OpenTelemetry tracing for idemctl serve
// (docs/operations.md, "Traces") and holds the few helpers every traced
// package shares: the tracer's scope, the attribute keys, and the W3C
// traceparent that carries a trace from the request that created a call
// to the attempts that run it, on any instance, later.
//
// Tracing is off unless asked for, the standard way (the OTEL_*
// variables) or with serve --otel. Off, Setup returns a nil provider and
// every traced path skips its work: no spans, no propagation.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/wire"
)

// Scope is the instrumentation scope of every idemctl span.
const Scope = "github.com/idemctl/idemctl"

// ServiceName is service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "idemctl"

// The attributes idemctl puts on its spans (docs/operations.md, "Traces").
// Args, results, headers and tokens never become attributes.
const (
	CallID    = attribute.Key("idemctl.call.id")
	Tool      = attribute.Key("idemctl.tool")
	Attempt   = attribute.Key("idemctl.attempt")
	Outcome   = attribute.Key("idemctl.outcome")
	ErrorCode = attribute.Key("idemctl.error.code")
	// MCPMethod and GenAIToolName are the semantic conventions' names for
	// an MCP request's method and the tool it calls.
	MCPMethod     = attribute.Key("mcp.method.name")
	GenAIToolName = attribute.Key("gen_ai.tool.name")
)

// The exporters OTEL_TRACES_EXPORTER may name.
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterNone    = "none"
)

// ProtocolHTTP is the one OTLP protocol supported: HTTP with protobuf
// bodies (port 4318), the specification's default. gRPC would bring a
// second network stack into the binary for the same spans.
const ProtocolHTTP = "http/protobuf"

// Options configure Setup.
type Options struct {
	// Enable is serve's --otel: trace even though no OTEL_* variable asks
	// for it (OTLP to OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4318).
	Enable bool
	// Getenv reads the OTEL_* variables that decide whether and where to
	// export; nil is os.Getenv. (The exporter and the resource read their
	// own variables, endpoint, headers, service name, from the process
	// environment, as the SDK always does.)
	Getenv func(string) string
	// Version is service.version; "" is the main module's version from
	// the build information.
	Version string
	// Console receives the spans of OTEL_TRACES_EXPORTER=console; nil is
	// io.Discard.
	Console io.Writer
	// Log, if set, receives the SDK's errors (an export the collector
	// refused or never answered) as warnings, instead of the standard
	// library's log on standard error. The SDK's error handler is
	// process-wide: Setup sets it only when tracing is on.
	Log *slog.Logger
}

// Decide says which exporter the OTEL_* variables and --otel ask for: ""
// when tracing is off. It refuses what it does not support, by name, so a
// misspelt setting is an error at start, never a silent absence of traces.
func Decide(getenv func(string) string, enable bool) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case ExporterNone:
		return "", nil
	case "":
		if !enable && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return "", nil
		}
		exporter = ExporterOTLP
	case ExporterOTLP, ExporterConsole:
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q is not supported: use %s, %s or %s", exporter, ExporterOTLP, ExporterConsole, ExporterNone)
	}
	if exporter == ExporterOTLP {
		proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
		if proto == "" {
			proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
		}
		if proto != "" && proto != ProtocolHTTP {
			return "", fmt.Errorf("OTLP protocol %q is not supported: use %s (the collector's port 4318)", proto, ProtocolHTTP)
		}
	}
	return exporter, nil
}

// Tracing is a started tracer provider and how to stop it.
type Tracing struct {
	// Provider is nil when tracing is off.
	Provider trace.TracerProvider
	// Exporter is what Decide chose ("" off).
	Exporter string
	shutdown func(context.Context) error
}

// Shutdown flushes the spans still buffered and stops the exporter. Safe
// on a Tracing that is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Setup starts tracing as opts and the environment ask, or returns a
// Tracing that is off. Sampling (OTEL_TRACES_SAMPLER), batching
// (OTEL_BSP_*), the endpoint, headers and timeout (OTEL_EXPORTER_OTLP_*)
// and the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are the
// SDK's, read as it documents them.
func Setup(ctx context.Context, opts Options) (*Tracing, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = osGetenv
	}
	exporter, err := Decide(getenv, opts.Enable)
	if err != nil || exporter == "" {
		return &Tracing{}, err
	}
	var exp sdktrace.SpanExporter
	switch exporter {
	case ExporterConsole:
		w := opts.Console
		if w == nil {
			w = io.Discard
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: %s exporter: %w", exporter, err)
	}
	version := opts.Version
	if bi, ok := debug.ReadBuildInfo(); ok && version == "" {
		version = bi.Main.Version
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(version)),
		resource.WithFromEnv())
	// A malformed OTEL_RESOURCE_ATTRIBUTES member gives a partial
	// resource and an error: the spans still go out, with what parsed.
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if opts.Log != nil {
		log := opts.Log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing: " + err.Error())
		}))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{Provider: tp, Exporter: exporter, shutdown: tp.Shutdown}, nil
}

// w3c is the W3C Trace Context propagator: traceparent and tracestate.
var w3c = propagation.TraceContext{}

// TraceParent is the W3C traceparent of the span in ctx, "" when ctx holds
// no valid span context (tracing off).
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c[wire.HeaderTraceParent]
}

// WithTraceParent returns ctx with the remote span context tp names as the
// parent of the spans started from it; ctx unchanged when tp is empty or
// not a valid traceparent (a stored value is never trusted blindly).
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{wire.HeaderTraceParent: tp})
}

// FromHeader returns ctx with the span context of h's traceparent (and
// tracestate) as the parent of the spans started from it.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// InjectHeader sets traceparent (and tracestate) on h from ctx's span.
func InjectHeader(ctx context.Context, h http.Header) {
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// Tracer is the tracer of the span in ctx, for code that is handed a
// context rather than a provider (the tool kinds): nil when ctx holds no
// valid span, so an untraced attempt does no tracing work at all.
func Tracer(ctx context.Context) trace.Tracer {
	sp := trace.SpanFromContext(ctx)
	if !sp.SpanContext().IsValid() {
		return nil
	}
	return sp.TracerProvider().Tracer(Scope)
}

// osGetenv is os.Getenv, named so Options.Getenv's default reads plainly.
var osGetenv = os.Getenv

// EndRequest ends the client span of one request a tool sent (an http
// tool's downstream request, an mcp tool's tools/call): an error status
// with the tool error's code, or "no outcome" when the tool returned an
// error instead of one (the attempt was cut short).
func EndRequest(span trace.Span, toolErr *wire.CallError, err error) {
	if span == nil {
		return
	}
	switch {
	case toolErr != nil:
		span.SetAttributes(ErrorCode.String(toolErr.Code))
		span.SetStatus(codes.Error, toolErr.Code)
	case err != nil:
		span.SetStatus(codes.Error, "no outcome")
	}
	span.End()
}
