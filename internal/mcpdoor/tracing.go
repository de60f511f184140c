package mcpdoor

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/wire"
)

// startCall starts the server span of one tools/call at the door
// (docs/operations.md, "Traces"): a child of params._meta.traceparent,
// else of the HTTP request's traceparent header. The call recorded under
// it stores its context, so the call's attempts continue this trace.
// Without a tracer it does nothing.
func (d *door) startCall(ctx context.Context, req *mcp.CallToolRequest, tool string) (context.Context, trace.Span) {
	if d.opts.Tracer == nil {
		return ctx, nil
	}
	if tp, _ := req.Params.Meta[wire.MetaTraceParent].(string); tp != "" {
		ctx = telemetry.WithTraceParent(ctx, tp)
	} else if req.Extra != nil && req.Extra.Header != nil {
		ctx = telemetry.FromHeader(ctx, req.Extra.Header)
	}
	return d.opts.Tracer.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.MCPMethod.String("tools/call"), telemetry.GenAIToolName.String(tool),
			telemetry.Tool.String(tool)))
}

// endCall records the call the door answered with (id, status) or the
// refusal's code, and ends the span.
func endCall(span trace.Span, call Call, err error) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		code := wire.CodeInternal
		var e *Error
		if errors.As(err, &e) {
			code = e.Code
		}
		span.SetAttributes(telemetry.ErrorCode.String(code))
		span.SetStatus(codes.Error, code)
	default:
		span.SetAttributes(telemetry.CallID.String(call.CallID), telemetry.Outcome.String(string(call.Status)))
	}
	span.End()
}
