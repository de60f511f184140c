// Package executor runs recorded tool calls, concurrently and apart from
// HTTP handling (docs/design.md, "Leases and dead-owner recovery"). It is
// split by role as river splits its producer, job executor, completer and
// rescuer:
//
//	executor.go    the executor itself: Start, Wake, Shutdown; the limiter
//	seam.go        New and what the server calls: Added, Pending, Cancel
//	config.go      its Config, defaults and validation
//	scheduler.go   one goroutine that recovers, claims what can start now
//	               (in batches, up to the free capacity) and starts a run per call
//	reserve.go     claim at creation: a free worker reserved for a call its
//	               create claims, then started or given back
//	workers.go     the goroutines runs run on, kept for the next call
//	run.go         one attempt of one call: the tool, the chaos hooks, the outcome
//	calllog.go     an attempt's logger
//	heartbeat.go   extends a running call's lease every lease/3, fenced
//	completion.go  commits the outcome under the claim's fencing token
//	recovery.go    expired leases and calls of dead owners back to pending
//	owner.go       the lease owner's identity and whether a process is gone
//	queue.go       the pending count the scheduler keeps for back-pressure
//	policy.go      per-tool policies: server-side retries, concurrency caps
//	gate.go        per-tool rate limits and circuit breakers: admission before
//	               a claim, each attempt's outcome after it (state in the store)
//	running.go     the tools running in this process, for cancel
//	result.go      the bound on a stored result
//	metrics.go     the executor's Prometheus collectors
//
// Every decision goes through the store's conditional updates, never
// through memory: a claim is won by exactly one claimer, and a heartbeat or
// a completion commits only under the (owner, attempt) fencing token the
// claim returned (docs/lifecycle.md, "Completion and fencing").
//
// The server talks to it through a narrow seam: Wake when a call became
// runnable, Added and Pending for the back-pressure of new keys, Reserve
// for a call its create claims, Cancel for a running call, and
// Deps.OnFinal back when a completion committed.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
)

// exitCrash is the exit status of a chaos crash.
const exitCrash = exitcode.Crash

// commitTimeout bounds one completion transaction. Completions do not use the
// tool's context: once a tool has run, recording its outcome matters more
// than a prompt shutdown.
const commitTimeout = 10 * time.Second

// Executor runs tool calls: at most Config.Workers at once, a worker
// goroutine per running call (workers.go; its heartbeat is a timer, which
// takes a goroutine only while a beat runs), and a single scheduler
// goroutine that claims for all of them, so an idle executor costs one
// goroutine and one tick, whatever Workers says, once its workers have
// been idle for workerIdle. Create it with New.
type Executor struct {
	st      store.Store
	running *runningCalls // tools running here, for Cancel
	tools   tool.Runner   // the registry (Deps.Tools): runs a tool of any kind
	// maxResult is Config.MaxResultBytes (result.go).
	maxResult int
	owner     string  // this executor's claims, shared by all its runs (see ownerID)
	self      ownerID // this process, for dead-owner recovery
	// deadOwners: this process's identity is complete and /proc shows
	// every process (procFS.livenessCertain), so a missing pid means a
	// dead owner. Off, only lease expiry recovers; whyNoDeadOwners says why.
	deadOwners      bool
	whyNoDeadOwners string
	proc            procFS
	limit           limiter
	gates           *gates // rate limits and breakers (gate.go)
	lease           time.Duration
	interval        time.Duration
	grace           time.Duration
	chaos           bool
	exit            func(code int)
	queue           *queueGauge // the pending count, refreshed by the scheduler
	// beforeCommit, if set, runs after the tool and before its completion
	// commits (tests: pause a worker past its lease).
	beforeCommit func(ctx context.Context, c store.Call)
	// policy is Config.Policies with defaults (policy.go): retries and
	// per-tool caps.
	policy func(tool string) ToolPolicy
	// lookupFn asks a tool's downstream whether a call's effect happened
	// (the registry's LookupEffect; unknown.go).
	lookupFn func(ctx context.Context, inv tool.Invocation) (tool.LookupAnswer, error)
	// runToolFn, if set, replaces builtin.Run (tests).
	runToolFn func(ctx context.Context, inv tool.Invocation) (tool.Outcome, error)
	onFinal   func(callID string) // a completion committed
	log       *slog.Logger
	m         *metrics
	tracer    trace.Tracer // nil: tracing off (tracing.go)

	wake chan struct{} // capacity 1: coalesces wake-ups

	started    atomic.Bool
	workCtx    context.Context // cancelled when the shutdown grace runs out
	cancelWork context.CancelFunc
	stopSched  context.CancelFunc
	schedDone  chan struct{}
	workers    *workerPool    // the goroutines runs run on (workers.go)
	runs       sync.WaitGroup // one per claimed call (or reservation) until its run ends
	stopOnce   sync.Once
	stopped    chan struct{} // closed when shutdown has finished
	stopErr    error

	// reserving is set under stopMu when Start has finished and cleared
	// when a stop begins: reservations are taken only while it is set
	// (reserve.go).
	stopMu    sync.Mutex
	reserving bool

	lastErr map[string]string // scheduler-only: dedupes repeated error logs
	// lastOwnerPass is when the scheduler last looked for calls of dead
	// owners (scheduler-only; zero: never).
	lastOwnerPass time.Time
}

// Wake asks the scheduler to claim now rather than at its next tick. It never
// blocks; wake-ups coalesce.
func (e *Executor) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Start launches the scheduler. It stops claiming when ctx is done; runs
// keep going until Shutdown. An Executor starts once.
func (e *Executor) Start(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("executor: already started")
	}
	if e.deadOwners {
		e.log.Info("dead-owner recovery on: calls of crashed processes on this host are released at once",
			"dead_owner_recovery", true)
	} else {
		e.log.Warn("dead-owner recovery off: calls of crashed servers wait for their lease to expire",
			"dead_owner_recovery", false, logkey.Reason, e.whyNoDeadOwners)
	}
	e.wake = make(chan struct{}, 1)
	e.schedDone = make(chan struct{})
	e.workers = newWorkerPool()
	e.stopped = make(chan struct{})
	e.lastErr = make(map[string]string)
	// Tools run under a context of their own: a cancelled request or
	// server context must not abandon them; only the end of the shutdown
	// grace does.
	e.workCtx, e.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	var schedCtx context.Context
	schedCtx, e.stopSched = context.WithCancel(ctx)
	go e.schedule(schedCtx)
	e.stopMu.Lock()
	e.reserving = true
	e.stopMu.Unlock()
	return nil
}

// Shutdown stops claiming, lets in-flight tools finish within
// Config.ShutdownGrace (or until ctx is done), then cancels the rest, whose
// calls are released so another instance or the next start runs them again
// at once. Later calls wait for the first one to finish and return its
// result. Safe to call on an executor that never started.
func (e *Executor) Shutdown(ctx context.Context) error {
	if !e.started.Load() {
		return nil
	}
	e.stopOnce.Do(func() {
		e.stopErr = e.stop(ctx, e.grace)
		close(e.stopped)
	})
	<-e.stopped
	return e.stopErr
}

func (e *Executor) stop(ctx context.Context, grace time.Duration) error {
	e.stopMu.Lock()
	e.reserving = false
	e.stopMu.Unlock()
	e.stopSched()
	<-e.schedDone // no new run starts after this
	// Once every run has ended (on every return below), the workers end:
	// Shutdown leaves no goroutine of the executor behind.
	defer e.workers.stop()
	e.gates.stop()

	done := make(chan struct{})
	go func() { e.runs.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		e.cancelWork()
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	n := e.limit.running()
	e.log.Warn("shutdown grace over, abandoning running tools", "running", n)
	e.cancelWork()
	<-done // Run returns promptly on cancel; a commit in progress is bounded by commitTimeout
	return fmt.Errorf("shutdown: %d tool call(s) abandoned after the grace period", n)
}

// limiter bounds how many tool executions run at once. The scheduler
// holds what a claim may fill while it claims (beginRound) and takes a
// slot per claimed call (endRound), a claim at creation takes its slot
// beforehand (tryAcquire), and the run gives it back.
type limiter interface {
	// tryAcquire takes a slot for a call of tool if one is free under the
	// global limit and the tool's cap, less what a claim round in flight
	// holds, and reports whether it did.
	tryAcquire(tool string) bool
	// beginRound starts a claim round: how many calls it may claim and
	// how many more calls of each capped tool may start (a tool's
	// ToolPolicy.Concurrency less its running calls), for ClaimNext;
	// tools without a cap are not listed. It holds that many slots (and each
	// quota) until endRound, so tryAcquire meanwhile never takes a slot
	// the round may fill; a share of the free slots is left out of the
	// round for tryAcquire (roundHeadroom).
	beginRound() (limit int, quotas []store.ToolQuota)
	// endRound takes a slot for each call the round claimed and lets go
	// of what beginRound held.
	endRound(claimed []store.Call)
	// release gives back a slot acquire took.
	release(tool string)
	// running is how many slots are taken.
	running() int
}

// toolLimit is the global limit (--workers) composed with each tool's
// ToolPolicy.Concurrency. The per-tool bound is enforced by the claim
// itself (quotas → store.ToolQuota): a call of a tool at its cap is never
// claimed, so it never waits idle under this server's lease, and the
// calls of other tools behind it are claimed meanwhile.
type toolLimit struct {
	global *globalLimit
	policy func(tool string) ToolPolicy
	// names lists the tools whose policy may cap them (builtin.Names).
	names func() []string

	mu sync.Mutex
	n  map[string]int // running calls by tool
	// held and heldTool are what a claim round in flight may still fill:
	// its limit, and its quota of each capped tool (beginRound).
	held     int
	heldTool map[string]int
}

func newToolLimit(workers int, policy func(string) ToolPolicy, names func() []string) *toolLimit {
	return &toolLimit{global: newGlobalLimit(workers), policy: policy, names: names, n: map[string]int{},
		heldTool: map[string]int{}}
}

// roundHeadroom is the share of the free slots a claim round leaves to
// claims at creation (a quarter, none of a single slot): a round claims
// in batches, and while its statement runs, new calls may still start at
// once instead of waiting for the next round. A round that fills its
// limit is followed by another at once, so pending calls lose nothing.
func roundHeadroom(free int) int { return free / 4 }

func (l *toolLimit) beginRound() (int, []store.ToolQuota) {
	l.mu.Lock()
	defer l.mu.Unlock()
	free := l.global.free()
	limit := free - roundHeadroom(free)
	if limit <= 0 {
		return 0, nil
	}
	l.held = limit
	var quotas []store.ToolQuota
	for _, tool := range l.names() {
		if c := l.policy(tool).Concurrency; c > 0 {
			q := store.ToolQuota{Tool: tool, Max: c - l.n[tool]}
			quotas = append(quotas, q)
			l.heldTool[tool] = max(q.Max, 0)
		}
	}
	return limit, quotas
}

func (l *toolLimit) endRound(claimed []store.Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = 0
	clear(l.heldTool)
	for _, c := range claimed {
		l.global.acquire(c.Tool)
		l.n[c.Tool]++
	}
}

func (l *toolLimit) running() int { return l.global.running() }

func (l *toolLimit) tryAcquire(tool string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.policy(tool).Concurrency; c > 0 && l.n[tool]+l.heldTool[tool] >= c {
		return false
	}
	if !l.global.tryAcquire(tool, l.held) {
		return false
	}
	l.n[tool]++
	return true
}

func (l *toolLimit) release(tool string) {
	l.global.release(tool)
	l.mu.Lock()
	if l.n[tool]--; l.n[tool] <= 0 {
		delete(l.n, tool)
	}
	l.mu.Unlock()
}

// globalLimit is --workers: one bound on all tool executions of this
// server, whatever the tool.
type globalLimit struct {
	mu  sync.Mutex
	max int
	n   int
}

func newGlobalLimit(max int) *globalLimit { return &globalLimit{max: max} }

func (g *globalLimit) free() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max - g.n
}

func (g *globalLimit) acquire(string) {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

// tryAcquire takes a slot if one is free beyond the held ones.
func (g *globalLimit) tryAcquire(_ string, held int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n+held >= g.max {
		return false
	}
	g.n++
	return true
}

func (g *globalLimit) release(string) {
	g.mu.Lock()
	g.n--
	g.mu.Unlock()
}

func (g *globalLimit) running() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}
