package executor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// A claimed call runs on a worker goroutine that stays, idle, for the next
// one (up to workerIdle), instead of on a goroutine of its own: a new
// goroutine starts with a small stack that the attempt grows by copying,
// and that copy (runtime.copystack) was a third of the executor's CPU per
// call of a fast tool (BenchmarkRunCharge). What runs, and when, is as
// before: a call still starts at once, on an idle worker or a new one;
// the slots (--workers) and Shutdown's wait are the runs', not the
// workers'.

// workerIdle is how long an idle worker waits for a call before it ends.
const workerIdle = 10 * time.Second

// runJob is a claimed call handed to a worker: the arguments of run.
type runJob struct {
	c    store.Call
	sent time.Time
}

// workerPool hands calls to idle workers. idle counts the workers waiting
// for a call that no start has taken for itself: a start that takes one
// (CompareAndSwap down) sends it its call, and a worker that ends must
// take its own count back first, so a call handed over always has a
// worker to receive it.
type workerPool struct {
	jobs chan runJob   // unbuffered: a handover
	quit chan struct{} // closed when the runs have ended: the workers end
	idle atomic.Int64
	live atomic.Int64 // worker goroutines, for tests
	wg   sync.WaitGroup
}

// stop ends the workers and waits for them; every run has ended (a run,
// or a reservation that may start one, holds Executor.runs), so none is
// handed another call.
func (p *workerPool) stop() {
	close(p.quit)
	p.wg.Wait()
}

func newWorkerPool() *workerPool {
	return &workerPool{jobs: make(chan runJob), quit: make(chan struct{})}
}

// startRun runs c on an idle worker, or on a new one when none is idle.
func (e *Executor) startRun(c store.Call, sent time.Time) {
	p := e.workers
	for {
		n := p.idle.Load()
		if n == 0 {
			p.live.Add(1)
			p.wg.Add(1)
			go e.worker(runJob{c: c, sent: sent})
			return
		}
		if p.idle.CompareAndSwap(n, n-1) {
			p.jobs <- runJob{c: c, sent: sent}
			return
		}
	}
}

// worker runs j, then each call handed to it, until it has been idle for
// workerIdle or the executor has stopped.
func (e *Executor) worker(j runJob) {
	p := e.workers
	defer p.wg.Done()
	defer p.live.Add(-1)
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		e.run(j.c, j.sent)
		t.Reset(workerIdle)
		p.idle.Add(1)
		select {
		case j = <-p.jobs:
			continue
		case <-t.C:
		case <-p.quit:
		}
		if !p.leave() {
			j = <-p.jobs // a start took this worker's count: its call is on the way
		} else {
			return
		}
	}
}

// leave takes back an idle worker's count, and reports false when a start
// has taken it (and sends the worker a call).
func (p *workerPool) leave() bool {
	for {
		n := p.idle.Load()
		if n == 0 {
			return false
		}
		if p.idle.CompareAndSwap(n, n-1) {
			return true
		}
	}
}
