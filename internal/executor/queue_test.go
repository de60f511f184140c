package executor

import (
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// TestQueueGaugeEstimate: between reads, the gauge adds this server's new
// pending calls and subtracts its claims, never below zero; a read
// replaces the estimate; a read is due at first and then once per
// interval.
func TestQueueGaugeEstimate(t *testing.T) {
	t.Parallel()
	q := &queueGauge{}
	if q.pending() != 0 || !q.due(time.Hour) {
		t.Fatalf("before any read: pending %d due %v, want 0 and due", q.pending(), q.due(time.Hour))
	}
	q.set(store.Queue{Pending: 5})
	if q.pending() != 5 || q.due(time.Hour) {
		t.Fatalf("after reading 5: pending %d due %v, want 5 and not due", q.pending(), q.due(time.Hour))
	}
	q.claimed(3)
	q.added()
	q.added()
	if got := q.pending(); got != 4 {
		t.Fatalf("5 - 3 + 2: pending %d, want 4", got)
	}
	q.claimed(10)
	if got := q.pending(); got != 0 {
		t.Fatalf("more claims than counted: pending %d, want 0", got)
	}
	q.set(store.Queue{Pending: 1})
	if got := q.pending(); got != 1 {
		t.Fatalf("after a read: pending %d, want the read's 1", got)
	}
}
