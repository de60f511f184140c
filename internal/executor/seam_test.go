package executor

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

// The tests of the seam the server drives: OnFinal, Cancel, Start and
// Shutdown.

// TestOnFinalOnlyWhenFinal: OnFinal hears of a call once, when its
// completion made it final; the scheduled retry before it (the call is
// pending again) is not announced.
func TestOnFinalOnlyWhenFinal(t *testing.T) {
	t.Parallel()
	b := setup(t, withPolicy(builtin.Fail, ToolPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}))
	c := b.submit("k-final", `{"tool":"fail","args":{"times":1,"retryable":true}}`)
	if done := b.waitFinal(c.CallID); done.Status != store.StatusSucceeded || done.Attempt != 2 {
		t.Fatalf("call %+v, want succeeded at attempt 2", done)
	}
	if !contains(b.events(c.CallID), store.EventRetryScheduled) {
		t.Fatalf("audit %v: no retry was scheduled, the test proves nothing", b.events(c.CallID))
	}
	select {
	case id := <-b.finals:
		if id != c.CallID {
			t.Fatalf("OnFinal(%s), want %s", id, c.CallID)
		}
	case <-time.After(waitDeadline):
		t.Fatal("OnFinal was not called for the final call")
	}
	// The commit that made the call final told OnFinal before the test
	// read the call back, so a second announcement would be queued by now.
	select {
	case id := <-b.finals:
		t.Fatalf("OnFinal(%s) called twice: the scheduled retry was announced", id)
	default:
	}
}

// TestCancelStopsRunningTool: the server's cancel of a running call (the
// store marks it, then Executor.Cancel) stops its tool; the call is failed
// with the canceled error, not retryable. The tool here runs until its
// context ends, and the lease is long enough that no heartbeat (the other
// way a cancel reaches a tool) comes before the test gives up.
func TestCancelStopsRunningTool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started := make(chan struct{}, 1)
	b := setup(t, func(c *testConfig) {
		c.Lease = time.Minute
		c.runTool = func(ctx context.Context, inv tool.Invocation) (tool.Outcome, error) {
			started <- struct{}{}
			<-ctx.Done()
			return tool.Outcome{}, ctx.Err()
		}
	})
	c := b.submit("k-cancel", `{"tool":"sleep","args":{"seconds":10}}`)
	select {
	case <-started:
	case <-time.After(waitDeadline):
		t.Fatal("the tool never started")
	}
	errJSON, err := CanceledErrorJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, out, err := b.st.Cancel(ctx, c.CallID, errJSON, nil); err != nil || out != store.CancelRequested {
		t.Fatalf("store cancel: %v %v, want CancelRequested", out, err)
	}
	b.ex.Cancel(c.CallID)
	done := b.waitFinal(c.CallID)
	var e tool.ToolError
	if err := json.Unmarshal(done.ErrorJSON, &e); err != nil || done.Status != store.StatusFailed ||
		e.Code != wire.CodeCanceled || e.Retryable || done.Attempt != 1 {
		t.Fatalf("after cancel: status %s attempt %d error %s, want failed at attempt 1 with code canceled, not retryable",
			done.Status, done.Attempt, done.ErrorJSON)
	}
}

// TestStartOnceShutdownIdle: a second Start is refused, Shutdown of an
// executor that never started returns at once, and a second Shutdown
// returns the first one's result.
func TestStartOnceShutdownIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.ex.Start(context.Background()); err == nil {
		t.Error("a second Start was accepted")
	}
	idle, err := New(Config{}, Deps{Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of an executor never started: %v", err)
	}
	if err := b.ex.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := b.ex.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}
