package executor

import (
	"context"
	"testing"
	"time"
)

// TestCancelBeforeToolStarts: a cancel that reaches this process between
// the claim and the tool's start still cancels the tool.
func TestCancelBeforeToolStarts(t *testing.T) {
	t.Parallel()
	r := newRunningCalls()
	r.cancel("c_1")
	ctx, done := r.track(context.Background(), "c_1")
	defer done()
	if ctx.Err() == nil || !canceledByRequest(ctx) {
		t.Fatal("an early cancel was lost")
	}
	other, done2 := r.track(context.Background(), "c_2")
	done2()
	if canceledByRequest(other) {
		t.Fatal("a finished tool's context reads as canceled by request")
	}

	// A mark nobody picks up (the tool had finished) does not stay for ever,
	// and does not cancel a later run of the call.
	now := time.Now()
	r.now = func() time.Time { return now }
	r.cancel("c_stale")
	now = now.Add(earlyCancelTTL)
	r.cancel("c_other")
	if _, ok := r.early["c_stale"]; ok {
		t.Fatal("a stale early cancel was kept")
	}
	now = now.Add(earlyCancelTTL)
	late, done3 := r.track(context.Background(), "c_other")
	defer done3()
	if late.Err() != nil {
		t.Fatal("an early cancel older than the TTL cancelled a later run")
	}
}
