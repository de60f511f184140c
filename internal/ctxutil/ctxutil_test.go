package ctxutil

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSleep: a cancelled context ends a long sleep with its error, a zero
// sleep reports an ended context, and a short sleep on a live context
// returns nil.
func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("Sleep ignored the cancel")
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(ended ctx, 0) = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(live ctx, 1ms) = %v", err)
	}
}
