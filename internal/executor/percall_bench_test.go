package executor

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/store/storefake"
)

// BenchmarkRunCharge is the executor's part of one call of a fast tool,
// as a create that claimed it hands it over: the reservation, the run's
// goroutine, its heartbeat, the built-in charge and the completion. The
// completion is answered in memory (the store's own cost is the store
// benchmarks'), so allocs/op and B/op are the executor's. The scheduler
// runs on a real database beside it and claims nothing.
func BenchmarkRunCharge(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	fake := &storefake.Store{Base: st, SucceedFunc: func(_ context.Context, c store.Completion) (store.Call, error) {
		return store.Call{CallID: c.Lease.CallID, Status: store.StatusSucceeded, Attempt: c.Lease.Attempt}, nil
	}}
	finals := make(chan string, 1)
	ex, err := New(Config{}, Deps{Store: fake, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnFinal: func(id string) { finals <- id }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := ex.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cancel()
		_ = ex.Shutdown(context.Background())
	})
	owner := ex.owner
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r, ok := ex.Reserve("charge")
		if !ok {
			b.Fatal("no reservation")
		}
		c := store.Call{CallID: "c_" + strconv.Itoa(i), IdemKey: "k" + strconv.Itoa(i), Tool: "charge",
			ArgsJSON: []byte(`{"amount":100}`), Status: store.StatusRunning, Owner: &owner, Attempt: 1}
		if !r.Start(c) {
			b.Fatal("not started")
		}
		<-finals
	}
}
