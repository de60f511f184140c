package sqlite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// BenchmarkWriterCycle drives b.N calls through the real Store the way
// `idemctl serve` does under distinct-key load: 20 callers create calls
// (the HTTP handlers), one scheduler claims them in batches for up to 32
// free workers, and each worker succeeds its call with an effect. All of
// it goes through the one committer, so the time and allocations per op
// are mostly the writer's cost of one call (create, a share of a claim,
// succeed, and a share of each batch's COMMIT). cpu-ns/op is the
// process's user+system CPU per call, which depends less on the machine's
// load than ns/op (the fsyncs' wall time is in ns/op, not in cpu-ns/op).
func BenchmarkWriterCycle(b *testing.B) {
	const (
		callers = 20
		workers = 32
	)
	s, err := Open(b.Context(), tempPathB(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	n := int64(b.N)
	var (
		created, done atomic.Int64
		wg            sync.WaitGroup
		failed        atomic.Value
	)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	fail := func(err error) {
		failed.CompareAndSwap(nil, err)
		poke()
	}
	work := make(chan store.Call, workers)
	slots := make(chan struct{}, workers) // a token per busy worker
	amount := int64(100)

	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range callers {
		wg.Go(func() {
			for {
				i := created.Add(1)
				if i > n {
					return
				}
				id := fmt.Sprintf("c_%016x", i)
				if _, _, err := s.CreateOrGet(ctx, store.NewCall{
					CallID: id, IdemKey: "k" + id, Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{"amount":100}`),
					Via: store.ViaHTTP, TombstoneRetention: 30 * 24 * time.Hour, // the server's default
				}); err != nil {
					fail(err)
					return
				}
				poke()
			}
		})
	}
	for range workers {
		wg.Go(func() {
			for c := range work {
				if _, err := s.Succeed(ctx, store.Completion{
					Lease:  store.LeaseOf(c),
					Result: []byte(`{"charged":100,"effect_id":"eff_` + c.CallID[2:] + `"}`),
					Effect: &store.Effect{EffectID: "eff_" + c.CallID[2:], Tool: "charge", Amount: &amount},
				}); err != nil {
					fail(err)
				}
				<-slots
				done.Add(1)
				poke()
			}
		})
	}
	// The scheduler: claim as many calls as there are free workers.
	for done.Load() < n && failed.Load() == nil {
		free := workers - len(slots)
		if free == 0 {
			<-wake
			continue
		}
		calls, err := s.ClaimNext(ctx, "bench", time.Minute, free)
		if err != nil {
			fail(err)
			break
		}
		for _, c := range calls {
			slots <- struct{}{}
			work <- c
		}
		if len(calls) == 0 {
			<-wake
		}
	}
	close(work)
	wg.Wait()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
