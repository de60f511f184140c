package executor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/tool"
)

// attemptSpan is the span of one attempt (docs/operations.md, "Traces"),
// nil when tracing is off.
type attemptSpan struct{ span trace.Span }

// startAttempt starts the span of c's attempt under ctx. Its parent is the
// trace context stored with the call (store.Call.TraceParent), so the
// attempt continues the trace of the request that created the call, on
// whichever instance claims it and however much later: a child, not a
// link, so that one trace shows the request, each attempt and each
// downstream request, and the downstream's traceparent names the client's
// trace. A call stored without one starts a trace of its own.
func (e *Executor) startAttempt(ctx context.Context, c store.Call) (context.Context, attemptSpan) {
	if e.tracer == nil {
		return ctx, attemptSpan{}
	}
	ctx, span := e.tracer.Start(telemetry.WithTraceParent(ctx, c.TraceParent), "attempt "+c.Tool,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(telemetry.CallID.String(c.CallID), telemetry.Tool.String(c.Tool),
			telemetry.Attempt.Int64(c.Attempt)))
	return ctx, attemptSpan{span}
}

// end records how the attempt ended (an execution outcome: succeeded,
// failed, retry, fenced, abandoned, error, crashed) and the tool's error
// code, if any, and ends the span.
func (a attemptSpan) end(outcome string, out tool.Outcome, extensions int64) {
	if a.span == nil {
		return
	}
	attrs := []attribute.KeyValue{telemetry.Outcome.String(outcome), attribute.Int64("idemctl.lease_extensions", extensions)}
	if out.Err != nil {
		attrs = append(attrs, telemetry.ErrorCode.String(out.Err.Code))
		a.span.SetStatus(codes.Error, out.Err.Code)
	}
	a.span.SetAttributes(attrs...)
	a.span.End()
}

// startCompletion is the span of the completion's transaction, a child of
// the attempt's: the database's share of an attempt, and where a fenced
// completion shows. nil when tracing is off.
func (e *Executor) startCompletion(ctx context.Context) trace.Span {
	if e.tracer == nil {
		return nil
	}
	_, span := e.tracer.Start(ctx, "complete", trace.WithSpanKind(trace.SpanKindInternal))
	return span
}

// endCompletion ends a completion span with the store's error, if any.
func endCompletion(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, "completion not recorded")
	}
	span.End()
}
