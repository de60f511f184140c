package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// listCounter counts the listings of running calls, the dead-owner pass's
// query.
type listCounter struct {
	store.Store
	running atomic.Int64
}

func (l *listCounter) ListCalls(ctx context.Context, f store.ListFilter) ([]store.Call, error) {
	if f.Status == store.StatusRunning {
		l.running.Add(1)
	}
	return l.Store.ListCalls(ctx, f)
}

// TestDeadOwnerPassOncePerInterval: the scheduler is woken by every new
// call and every finished run, but looks for calls of dead owners (a listing
// of every running call) at most once per interval, not on every wake-up.
func TestDeadOwnerPassOncePerInterval(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counted := &listCounter{Store: st}
	srv, err := New(Config{Addr: "127.0.0.1:0", Logger: testLogger(t), RecoverInterval: time.Hour}, counted)
	if err != nil {
		t.Fatal(err)
	}
	if !srv.exec.deadOwners {
		t.Skip("dead-owner recovery is off on this host (no complete process identity)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background()) //nolint:errcheck // test teardown
	base := startHTTP(t, srv)
	const n = 30
	var ids []string
	for i := range n {
		r := doURL(t, base, "POST", "/v1/tool-calls", []byte(`{"tool":"charge","args":{"amount":1}}`),
			map[string]string{"Idempotency-Key": fmt.Sprintf("k-pass-%d", i)})
		var c wire.Call
		if r.status != 202 && r.status != 200 {
			t.Fatalf("POST: %d %s", r.status, r.body)
		}
		c = r.call(t)
		ids = append(ids, c.CallID)
	}
	for _, id := range ids {
		waitFinalURL(t, base, id)
	}
	// n creates and n finished runs woke the scheduler up to 2n times; with
	// an interval of an hour only the first tick may list running calls.
	if got := counted.running.Load(); got != 1 {
		t.Fatalf("running calls listed %d times for %d wake-ups, want once (the first tick)", got, 2*n)
	}
}
