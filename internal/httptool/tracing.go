package httptool

import (
	"context"
	"net/http"
	"strconv"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/telemetry"
)

// startSpan starts the client span of one downstream request, a child of
// the attempt's span in ctx, and puts its traceparent on req
// (docs/operations.md, "Traces"). Its attributes name the method and the
// downstream's host and port, never the URL's path or query, the headers
// or the body. Without a span in ctx (tracing off) it does nothing.
func startSpan(ctx context.Context, req *http.Request) (context.Context, trace.Span) {
	tr := telemetry.Tracer(ctx)
	if tr == nil {
		return ctx, nil
	}
	port, _ := strconv.Atoi(req.URL.Port())
	if port == 0 {
		port = 80
		if req.URL.Scheme == "https" {
			port = 443
		}
	}
	ctx, span := tr.Start(ctx, req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(req.Method),
			semconv.ServerAddress(req.URL.Hostname()), semconv.ServerPort(port)))
	telemetry.InjectHeader(ctx, req.Header)
	return ctx, span
}

// noteStatus records the downstream's status code on the request's span.
func noteStatus(span trace.Span, status int) {
	if span != nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
}
