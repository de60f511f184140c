package executor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
)

// TestDeadOwnerPassOncePerInterval: the scheduler is woken by every new
// call and every finished run, but looks for calls of dead owners (a listing
// of every running call) at most once per interval, not on every wake-up.
func TestDeadOwnerPassOncePerInterval(t *testing.T) {
	t.Parallel()
	var running atomic.Int64 // listings of running calls, the dead-owner pass's query
	b := setup(t, func(c *testConfig) {
		c.RecoverInterval = time.Hour
		c.wrap = func(st store.Store) store.Store {
			return &storefake.Store{Base: st, ListCallsFunc: func(ctx context.Context, f store.ListFilter) ([]store.Call, error) {
				if f.Status == store.StatusRunning {
					running.Add(1)
				}
				return st.ListCalls(ctx, f)
			}}
		}
	})
	if !b.ex.deadOwners {
		t.Skip("dead-owner recovery is off on this host (no complete process identity)")
	}
	const n = 30
	var ids []string
	for i := range n {
		ids = append(ids, b.submit(fmt.Sprintf("k-pass-%d", i), `{"tool":"charge","args":{"amount":1}}`).CallID)
	}
	for _, id := range ids {
		b.waitFinal(id)
	}
	// n creates and n finished runs woke the scheduler up to 2n times; with
	// an interval of an hour only the first tick may list running calls.
	if got := running.Load(); got != 1 {
		t.Fatalf("running calls listed %d times for %d wake-ups, want once (the first tick)", got, 2*n)
	}
}
