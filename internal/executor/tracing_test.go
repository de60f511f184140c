package executor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestAttemptSpans: each attempt of a call is a span of its own, a child
// of the trace context stored with the call, numbered, with how it ended:
// a retryable failure under a retry policy is retry_scheduled with the
// tool's code, the next attempt succeeded. Each has its completion span.
func TestAttemptSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, withPolicy(builtin.Fail, ToolPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}),
		func(c *testConfig) { c.tracer = tp.Tracer(telemetry.Scope) })
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c := submitWith(t, b.st, b.ex, "k-spans", `{"tool":"fail","args":{"times":1,"retryable":true}}`,
		func(n *store.NewCall) { n.TraceParent = parent })
	if done := b.waitFinal(c.CallID); done.Status != store.StatusSucceeded || done.Attempt != 2 {
		t.Fatalf("call = %s at attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}
	var attempts []tracetest.SpanStub
	completions := 0
	eventually(t, "two attempt spans and their completions ended", func() bool {
		attempts, completions = nil, 0
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "attempt fail":
				attempts = append(attempts, s)
			case "complete":
				completions++
			}
		}
		return len(attempts) == 2 && completions == 2
	})
	want := []map[attribute.Key]string{
		{telemetry.Attempt: "1", telemetry.Outcome: execRetry, telemetry.ErrorCode: wire.CodeToolFailed, telemetry.CallID: c.CallID},
		{telemetry.Attempt: "2", telemetry.Outcome: "succeeded", telemetry.CallID: c.CallID, telemetry.Tool: "fail"},
	}
	for i, s := range attempts {
		if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("attempt %d: trace %s, parent %s; want a child of the stored %s", i+1, s.SpanContext.TraceID(), s.Parent.SpanID(), parent)
		}
		got := map[attribute.Key]string{}
		for _, kv := range s.Attributes {
			got[kv.Key] = kv.Value.Emit()
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("attempt %d: %s = %q, want %q (all: %v)", i+1, k, got[k], v, got)
			}
		}
	}
	for _, kv := range attempts[1].Attributes {
		if kv.Key == telemetry.ErrorCode {
			t.Errorf("the successful attempt has an error code: %v", attempts[1].Attributes)
		}
	}
}

// TestAttemptSpanOffIsFree: without a tracer an attempt's span costs no
// allocation. (Not parallel: AllocsPerRun.)
func TestAttemptSpanOffIsFree(t *testing.T) {
	e := &Executor{}
	c := store.Call{CallID: "c_0000000000000001", Tool: "charge", Attempt: 1,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, span := e.startAttempt(ctx, c)
		endCompletion(e.startCompletion(ctx), nil)
		span.end(execRetry, tool.Outcome{}, 0)
	}); n != 0 {
		t.Fatalf("an untraced attempt's span helpers allocate %v times, want 0", n)
	}
}
