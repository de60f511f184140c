package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemctl/idemctl/internal/exitcode"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tools"
)

// exitCrash is the exit status of a chaos crash.
const exitCrash = exitcode.Crash

// commitTimeout bounds one completion transaction. Completions do not use the
// worker's context: once a tool has run, recording its outcome matters more
// than a prompt shutdown.
const commitTimeout = 10 * time.Second

// executor runs tool calls on a worker pool separate from HTTP handling
// (docs/design.md, "Leases and dead-owner recovery"). One scheduler
// goroutine recovers expired leases and calls of dead owners, claims
// runnable calls up to the number of idle workers, and hands them to the
// workers. Every decision goes through the store's
// conditional updates, never through memory: a claim is won by exactly one
// claimer, and a completion commits only under the (owner, attempt) fencing
// token the claim returned.
type executor struct {
	st      store.Store
	running *runningCalls // tools running here, for cancel (cancel.go)
	// maxResult is Config.MaxResultBytes (result.go).
	maxResult int
	owner     string  // this server's claims, shared by all its workers (see ownerID)
	self      ownerID // this process, for dead-owner recovery
	// deadOwners: this process's identity is complete and /proc shows
	// every process (procFS.livenessCertain), so a missing pid means a
	// dead owner. Off, only lease expiry recovers.
	deadOwners bool
	proc       procFS
	workers    int
	lease      time.Duration
	interval   time.Duration
	chaos      bool
	exit       func(code int)
	// beforeCommit, if set, runs after the tool and before its completion
	// commits (tests: pause a worker past its lease).
	beforeCommit func(ctx context.Context, c store.Call)
	onFinal      func(callID string) // a completion committed
	log          *slog.Logger
	m            *metrics

	wake chan struct{}   // capacity 1: coalesces wake-ups
	jobs chan store.Call // capacity workers: never blocks, claims ≤ idle workers
	busy atomic.Int64    // claimed calls not yet finished

	workCtx    context.Context // cancelled when the shutdown grace runs out
	cancelWork context.CancelFunc
	stopSched  context.CancelFunc
	schedDone  chan struct{}
	workerWG   sync.WaitGroup
	stopOnce   sync.Once
	stopped    chan struct{} // closed when shutdown has finished
	stopErr    error

	lastErr map[string]string // scheduler-only: dedupes repeated error logs
}

// Wake asks the scheduler to claim now rather than at its next tick. It never
// blocks; wake-ups coalesce.
func (e *executor) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// start launches the scheduler and the workers. The scheduler stops claiming
// when ctx is done; workers keep running until shutdown.
func (e *executor) start(ctx context.Context) {
	e.wake = make(chan struct{}, 1)
	e.jobs = make(chan store.Call, e.workers)
	e.schedDone = make(chan struct{})
	e.stopped = make(chan struct{})
	e.lastErr = make(map[string]string)
	// Tools run under a context of their own: a cancelled request or
	// server context must not abandon them; only the end of the shutdown
	// grace does.
	e.workCtx, e.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	var schedCtx context.Context
	schedCtx, e.stopSched = context.WithCancel(ctx)
	for i := 0; i < e.workers; i++ {
		e.workerWG.Add(1)
		go e.worker()
	}
	go e.schedule(schedCtx)
}

// shutdown stops claiming, lets in-flight tools finish within grace (or
// until ctx is done), then cancels the rest, whose calls are released so
// another instance or the next start runs them again at once. Later calls
// wait for the first one to finish and return its result.
func (e *executor) shutdown(ctx context.Context, grace time.Duration) error {
	e.stopOnce.Do(func() {
		e.stopErr = e.stop(ctx, grace)
		close(e.stopped)
	})
	<-e.stopped
	return e.stopErr
}

func (e *executor) stop(ctx context.Context, grace time.Duration) error {
	e.stopSched()
	<-e.schedDone
	close(e.jobs) // only the scheduler sends, and it has returned

	done := make(chan struct{})
	go func() { e.workerWG.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		e.cancelWork()
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	n := e.busy.Load()
	e.log.Warn("shutdown grace over, abandoning running tools", "running", n)
	e.cancelWork()
	<-done // Run returns promptly on cancel; a commit in progress is bounded by commitTimeout
	return fmt.Errorf("shutdown: %d tool call(s) abandoned after the grace period", n)
}

// schedule is the scheduler loop: at start, every interval, and on wake.
func (e *executor) schedule(ctx context.Context) {
	defer close(e.schedDone)
	tick := time.NewTicker(e.interval)
	defer tick.Stop()
	for {
		e.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-e.wake:
		}
	}
}

// tick recovers what can be recovered, then claims up to the idle workers.
func (e *executor) tick(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	e.recoverExpired(ctx)
	e.releaseDeadOwners(ctx)
	for ctx.Err() == nil {
		free := e.workers - int(e.busy.Load())
		if free <= 0 {
			return
		}
		// The claim runs to completion even if ctx is cancelled meanwhile:
		// a claim committed but not handed to a worker would sit under our
		// lease until it expired.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		calls, err := e.st.ClaimNext(cctx, e.owner, e.lease, free)
		cancel()
		if e.noteErr("claim", err) {
			return
		}
		for _, c := range calls {
			e.busy.Add(1)
			e.m.busyWorkers.Inc()
			e.m.attempts.Observe(float64(c.Attempt))
			e.log.Info("claimed call", attrCallID, c.CallID, attrKey, c.IdemKey,
				attrTool, c.Tool, attrAttempt, c.Attempt)
			e.jobs <- c // never blocks: len(calls) ≤ free ≤ remaining capacity
		}
		if len(calls) < free {
			return // nothing more runnable now
		}
	}
}

// recoverExpired returns expired running calls to pending (audit recover).
func (e *executor) recoverExpired(ctx context.Context) {
	ids, err := e.st.RecoverExpired(ctx)
	if e.noteErr("recover", err) {
		return
	}
	for _, id := range ids {
		e.m.recoveries.WithLabelValues(recoverExpired).Inc()
		e.log.Warn("lease expired, call back to pending", e.callAttrs(ctx, id)...)
	}
}

// releaseDeadOwners returns at once the running calls whose owner was a
// process on this host that is gone (docs/lifecycle.md, "Recovery"): after a
// crash and restart there is no need to wait out the old lease. Only owners
// that provably no longer exist are released; other hosts and live
// processes are never touched.
func (e *executor) releaseDeadOwners(ctx context.Context) {
	if !e.deadOwners {
		return
	}
	running, err := e.st.ListCalls(ctx, store.ListFilter{Status: store.StatusRunning})
	if e.noteErr("list running", err) {
		return
	}
	for _, c := range running {
		if c.Owner == nil {
			continue
		}
		o, gone := e.proc.ownerGone(e.self, *c.Owner)
		if !gone {
			continue
		}
		reason := fmt.Sprintf("owner process gone (%s pid %d)", o.Host, o.PID)
		// Fenced on the owner and attempt we saw: if the call moved on
		// meanwhile, Release refuses and nothing happens.
		err := e.st.Release(ctx, c.CallID, *c.Owner, c.Attempt, reason)
		if errors.Is(err, store.ErrNotHeld) {
			continue
		}
		if err != nil {
			e.log.Warn("releasing call of dead owner", attrCallID, c.CallID, attrKey, c.IdemKey,
				attrOwner, *c.Owner, attrErr, err)
			continue
		}
		e.m.recoveries.WithLabelValues(recoverDeadOwner).Inc()
		e.log.Warn("owner process gone, call back to pending", attrCallID, c.CallID, attrKey, c.IdemKey,
			attrOwner, *c.Owner, attrAttempt, c.Attempt)
	}
}

// callAttrs returns the log attributes of a call known only by id.
func (e *executor) callAttrs(ctx context.Context, id string) []any {
	attrs := []any{attrCallID, id}
	if c, err := e.st.Get(ctx, id); err == nil {
		attrs = append(attrs, attrKey, c.IdemKey)
	}
	return attrs
}

// noteErr logs a scheduler error once per distinct message (the loop runs
// five times a second) and reports whether err is non-nil.
func (e *executor) noteErr(op string, err error) bool {
	if err == nil {
		if e.lastErr[op] != "" {
			e.log.Info("scheduler "+op+" works again", attrOwner, e.owner)
			delete(e.lastErr, op)
		}
		return false
	}
	if errors.Is(err, context.Canceled) {
		return true
	}
	if msg := err.Error(); e.lastErr[op] != msg {
		e.log.Warn("scheduler "+op+" failed", attrErr, err)
		e.lastErr[op] = msg
	}
	return true
}

// worker runs claimed calls until the job channel closes.
func (e *executor) worker() {
	defer e.workerWG.Done()
	for c := range e.jobs {
		e.safeExecute(c)
		e.busy.Add(-1)
		e.m.busyWorkers.Dec()
		e.Wake() // a worker is free: claim the backlog now
	}
}

// safeExecute keeps a bug in the completion path from taking the whole
// server down. The call stays running under this lease; when the lease
// expires another attempt runs it (fenced and effect-unique as always).
func (e *executor) safeExecute(c store.Call) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("worker panicked; the call waits for its lease to expire",
				attrCallID, c.CallID, attrKey, c.IdemKey, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	e.execute(c)
}

// execute runs one attempt of a claimed call and records its outcome.
func (e *executor) execute(c store.Call) {
	start := time.Now()
	log := e.log.With(attrCallID, c.CallID, attrKey, c.IdemKey, attrTool, c.Tool, attrAttempt, c.Attempt)
	args, out, ran := e.runTool(c, log)
	if !ran {
		return
	}

	chaos := tools.ChaosOf(args)
	// The before-commit crash fires on the first attempt only: the point is
	// one crash and the recovery after it, not a call that crashes the
	// server again on every restart. (The after-commit crash can fire only
	// once anyway: success is final.)
	if e.chaos && chaos.CrashBeforeCommit && c.Attempt == 1 {
		log.Warn("chaos: _crash_before_commit, exiting before the completion commits")
		e.m.executions.WithLabelValues(c.Tool, execCrashed).Inc()
		e.exit(exitCrash)
		return // only reached when exit is a test hook
	}
	// The pause stands for a worker frozen past its lease (a GC pause, a
	// stalled VM; docs/design.md, "The attempt as fencing token"): the
	// outcome is in hand, the lease runs out, another worker may take the
	// call over, and this commit must then be fenced. First attempt only, like the crash: the attempt that takes
	// over must be able to commit.
	if e.chaos && chaos.PauseBeforeCommit > 0 && c.Attempt == 1 {
		log.Warn("chaos: _pause_before_commit, pausing before the completion commits",
			durationAttr(attrPause, chaos.PauseBeforeCommit), durationAttr(attrLease, e.lease))
		t := time.NewTimer(chaos.PauseBeforeCommit)
		// When the shutdown grace runs out the pause ends early and the
		// commit goes ahead: the tool has run, and recording its outcome
		// (or being fenced) beats abandoning it, as for any completion.
		select {
		case <-t.C:
		case <-e.workCtx.Done():
			t.Stop()
		}
	}
	if e.beforeCommit != nil {
		e.beforeCommit(e.workCtx, c)
	}

	done, err := e.commit(c, out)
	switch {
	case errors.Is(err, store.ErrFenced):
		// Another worker took the call over after our lease expired; its
		// completion (or its coming one) is the call's. Ours must vanish.
		e.m.fenced.Inc()
		e.m.executions.WithLabelValues(c.Tool, execFenced).Inc()
		log.Warn("completion fenced: lease lost to another worker", attrOwner, e.owner, attrErr, err)
		return
	case refusedForGood(err):
		log.Error("the database refused the completion; recording the call as failed", attrErr, err)
		if done, err = e.failRefused(c, err); err != nil {
			if errors.Is(err, store.ErrFenced) {
				e.m.fenced.Inc()
				e.m.executions.WithLabelValues(c.Tool, execFenced).Inc()
				log.Warn("failure record fenced: lease lost to another worker", attrOwner, e.owner, attrErr, err)
				return
			}
			e.m.executions.WithLabelValues(c.Tool, execError).Inc()
			log.Error("recording the refusal as a failure failed too; the lease will bring the call back", attrErr, err)
			return
		}
	case err != nil:
		e.m.executions.WithLabelValues(c.Tool, execError).Inc()
		log.Error("recording completion failed; the lease will bring the call back", attrErr, err)
		return
	}
	e.m.executions.WithLabelValues(c.Tool, string(done.Status)).Inc()
	e.m.execSeconds.WithLabelValues(c.Tool).Observe(time.Since(start).Seconds())
	log.Info("call "+string(done.Status), attrStatus, done.Status, durationAttr(attrDuration, time.Since(start)))

	if e.chaos && chaos.CrashAfterCommit && done.Status == store.StatusSucceeded {
		log.Warn("chaos: _crash_after_commit, exiting before the response")
		e.m.executions.WithLabelValues(c.Tool, execCrashed).Inc()
		e.exit(exitCrash)
		return
	}
	e.onFinal(c.CallID)
}

// runTool decodes the stored args and runs the tool. ran is false when the
// attempt was abandoned (shutdown): the call has then been released.
func (e *executor) runTool(c store.Call, log *slog.Logger) (args map[string]any, out tools.Outcome, ran bool) {
	defer func() {
		// A panicking tool is a bug; it must not take the server down, and
		// re-running it would panic again: fail the call for good.
		if p := recover(); p != nil {
			log.Error("tool panicked", "panic", p, "stack", string(debug.Stack()))
			out, ran = tools.Outcome{Err: &tools.ToolError{Code: codeInternal,
				Message: fmt.Sprintf("tool panicked: %v", p)}}, true
		}
	}()
	v, err := fingerprint.ParseJSON(c.ArgsJSON)
	args, _ = v.(map[string]any)
	if err != nil || args == nil {
		return nil, tools.Outcome{Err: &tools.ToolError{Code: codeInternal,
			Message: fmt.Sprintf("stored args unreadable: %v", err)}}, true
	}
	if c.CancelRequested { // canceled while it ran before (then recovered): never run it again
		return args, tools.Outcome{Err: canceledError}, true
	}
	ctx, untrack := e.running.track(e.workCtx, c.CallID)
	defer untrack()
	out, err = tools.Run(ctx, tools.Invocation{CallID: c.CallID, Tool: c.Tool, Args: args, Attempt: c.Attempt})
	if err != nil && e.workCtx.Err() != nil {
		e.abandon(c, log)
		return args, out, false
	}
	if err != nil && canceledByRequest(ctx) {
		return args, tools.Outcome{Err: canceledError}, true
	}
	if err == nil {
		out = capResult(out, e.maxResult)
	}
	if err != nil {
		// Validate accepted these args when they were stored; refusing
		// them now means the rules changed. Retrying cannot help.
		return args, tools.Outcome{Err: &tools.ToolError{Code: "invalid_args", Message: err.Error()}}, true
	}
	return args, out, true
}

// abandon releases a call whose tool was cancelled by shutdown, so it runs
// again at once elsewhere instead of after its lease.
func (e *executor) abandon(c store.Call, log *slog.Logger) {
	e.m.executions.WithLabelValues(c.Tool, execAbandoned).Inc()
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	err := e.st.Release(ctx, c.CallID, e.owner, c.Attempt, "abandoned at shutdown")
	if err != nil && !errors.Is(err, store.ErrNotHeld) {
		log.Warn("releasing abandoned call failed; its lease will expire", attrErr, err)
		return
	}
	log.Warn("tool abandoned at shutdown, call released")
}

// commit records the outcome under the claim's fencing token. A transient
// failure is retried a few times: the lease is still ours, and a retry after
// an ambiguous failure is safe (fenced on owner and attempt; the effect is
// unique per call).
func (e *executor) commit(c store.Call, out tools.Outcome) (store.Call, error) {
	comp := store.Completion{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt}
	if out.Err != nil {
		raw, err := marshalJSON(out.Err)
		if err != nil {
			return store.Call{}, err
		}
		comp.Error = raw
	} else {
		comp.Result, comp.Effect = out.Result, out.Effect
	}
	var (
		done store.Call
		err  error
	)
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		if out.Err != nil {
			done, err = e.st.Fail(ctx, comp)
		} else {
			done, err = e.st.Succeed(ctx, comp)
		}
		cancel()
		// Only a transient failure is worth another try: a refusal of
		// this completion (refusedForGood) gets the same answer every
		// time, and execute records it as a failure instead.
		if err == nil || !transientErr(err) {
			return done, err
		}
	}
	return done, err
}

// transientErr reports whether a store error says "not now" rather than
// "not this": the database is unreachable or busy, or the commit ran out of
// time. The same completion may well commit on a retry.
func transientErr(err error) bool {
	return errors.Is(err, store.ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// refusedForGood reports whether a completion error is the database
// refusing this completion itself (a value it cannot store, a constraint):
// the backend says so with store.ErrRefused, as opposed to a lost lease
// (ErrFenced), a database that cannot write at the moment (ErrUnavailable,
// ErrReadOnly), a call that is gone (ErrNotFound) or an error nobody
// classified, which the lease retries. Such a refusal is deterministic: the
// same completion would be refused on every attempt, so retrying the call
// under a new lease never ends.
func refusedForGood(err error) bool {
	return errors.Is(err, store.ErrRefused)
}

// failRefused records, once and under the same fencing token, that the
// outcome of attempt c could not be recorded: the call fails with code
// internal and retryable false. Every accepted call must reach a final
// state without the client's help (docs/lifecycle.md, "Invariants"); a
// call whose completion the database refuses for good would otherwise be
// re-run once per lease, for ever.
//
// Why failing is consistent even for tools with an effect (charge,
// send_email): in this service the effect row is written only by the
// Succeed transaction, and that transaction was refused and rolled back,
// so no effect exists and "failed" tells the truth about the effects
// table. retryable is false because a same-key retry would run into the
// same refusal. The error object is fixed text plus a short reason built
// from the error's class, never from its message: a database message can
// quote the value it refused, and that is user data.
//
// If this write fails too (ErrFenced included), nothing more is tried
// here: the lease brings the call back, as for any failed completion.
func (e *executor) failRefused(c store.Call, refusal error) (store.Call, error) {
	raw, err := marshalJSON(tools.ToolError{
		Code:      codeInternal,
		Message:   "could not record the tool's outcome: " + refusalReason(refusal),
		Retryable: false,
	})
	if err != nil {
		return store.Call{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	return e.st.Fail(ctx, store.Completion{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt, Error: raw})
}

// refusalReason is the short, data-free reason of a refused completion:
// "the database refused it", with the refusal's code when the backend gives
// one (store.RefusedError.Code: an SQLSTATE such as 22P05 untranslatable
// character, or an SQLite result code; it names the class of problem and
// never the value).
func refusalReason(err error) string {
	const reason = "the database refused it"
	var refused *store.RefusedError
	if errors.As(err, &refused) && refused.Code != "" {
		return reason + " (" + refused.Code + ")"
	}
	return reason
}
