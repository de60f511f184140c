package mcptool

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/wire"
)

// startSpan starts the client span of one upstream tools/call, a child of
// the attempt's span in ctx, and puts its traceparent in meta
// (docs/operations.md, "Traces"). Its attributes name the method and the
// upstream's tool, never the arguments or the result. Without a span in
// ctx (tracing off) it does nothing.
func startSpan(ctx context.Context, upstreamTool string, meta mcp.Meta) (context.Context, trace.Span) {
	tr := telemetry.Tracer(ctx)
	if tr == nil {
		return ctx, nil
	}
	ctx, span := tr.Start(ctx, "tools/call "+upstreamTool, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(telemetry.MCPMethod.String("tools/call"), telemetry.GenAIToolName.String(upstreamTool)))
	if tp := telemetry.TraceParent(ctx); tp != "" {
		meta[wire.MetaTraceParent] = tp
	}
	return ctx, span
}
