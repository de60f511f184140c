package server

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
)

// traced starts the server span of each request (docs/operations.md,
// "Traces"), a child of the client's traceparent when it sends one. It
// is outermost but for lingerUnread, so a refused token is traced too.
// The span's name, route and status are set by instrument, the one
// middleware that sees the route the mux matched. Without a tracer it is
// next itself: tracing off costs nothing per request.
func (s *Server) traced(next http.Handler) http.Handler {
	if s.tracer == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := telemetry.FromHeader(r.Context(), r.Header)
		method := spanMethod(r.Method)
		ctx, span := s.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.HTTPRequestMethodKey.String(method)))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// spanMethod is the method as a span records it: a client may send any
// token as its method, so one outside HTTP's own is "_OTHER" (as the
// semantic conventions say), keeping span names few.
func spanMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// spanName is a request span's name: the mux's pattern, which names the
// route and never a raw path (low cardinality), with the method in front
// when the pattern has none; the method alone for an unmatched path.
func spanName(method, pattern string) string {
	method = spanMethod(method)
	switch {
	case pattern == "" || pattern == "/":
		return method
	case strings.HasPrefix(pattern, "/"):
		return method + " " + pattern
	}
	return pattern
}

// endRequestSpan names the request's span after its route and records
// the answer: status, and the error code of an error body. Called by
// instrument; a no-op when the request is not traced.
func endRequestSpan(r *http.Request, sw *statusWriter, status int) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetName(spanName(r.Method, r.Pattern))
	attrs := []attribute.KeyValue{semconv.HTTPResponseStatusCode(status)}
	if p := r.Pattern; p != "" && p != "/" {
		attrs = append(attrs, semconv.HTTPRoute(p[strings.IndexByte(p, '/'):]))
	}
	if sw.code != "" {
		attrs = append(attrs, telemetry.ErrorCode.String(sw.code))
	}
	span.SetAttributes(attrs...)
	if status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, sw.code)
	}
}

// noteCall puts the call a request created or found on its span: id,
// tool, and what the store decided (created, replayed, ...).
func noteCall(ctx context.Context, call store.Call, outcome store.Outcome) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(telemetry.CallID.String(call.CallID), telemetry.Tool.String(call.Tool),
		telemetry.Outcome.String(outcome.String()))
}

// noteErrorCode remembers an error body's code on the statusWriter under
// w, for the request's span (endRequestSpan).
func noteErrorCode(w http.ResponseWriter, code string) {
	for {
		switch t := w.(type) {
		case *statusWriter:
			t.code = code
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return
		}
	}
}
