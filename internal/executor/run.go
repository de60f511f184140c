package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// safeExecute keeps a bug in the completion path from taking the whole
// server down. The call stays running under this lease; when the lease
// expires another attempt runs it (fenced and effect-unique as always).
// sent is when the request that claimed c was sent (startHeartbeat).
func (e *Executor) safeExecute(c store.Call, sent time.Time) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("worker panicked; the call waits for its lease to expire",
				logkey.CallID, c.CallID, logkey.Key, c.IdemKey, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	e.execute(c, sent)
}

// execute runs one attempt of a claimed call and records its outcome.
func (e *Executor) execute(c store.Call, sent time.Time) {
	start := time.Now()
	log := attemptLogger(e.log, c)

	// The attempt's span ends with the execution outcome the metrics
	// count (outcome is set before every return).
	ctx, span := e.startAttempt(e.workCtx, c)
	var (
		outcome    = execError
		out        tool.Outcome
		extensions int64
	)
	defer func() { span.end(outcome, out, extensions) }()

	// The tool's context ends at the end of the shutdown grace, or when a
	// heartbeat learns that the call was taken over (errLeaseLost).
	toolCtx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	beat := e.startHeartbeat(c, log, lose, sent)
	toolCtx = tool.WithLeaseCheck(toolCtx, beat.held)
	var (
		args      map[string]any
		ran       bool
		unsettled bool
	)
	// A call whose previous attempt's outcome is unknown runs only if its
	// tool's on_unknown lets it (unknown.go): a lookup or a hold may
	// decide the outcome without an attempt.
	switch s, decided, uns := e.beforeAttempt(toolCtx, c, log); s {
	case giveUp:
		beat.stop()
		if e.workCtx.Err() != nil {
			e.abandon(c, log)
		}
		return
	case recordOutcome:
		out, ran, unsettled = decided, true, uns
	default:
		args, out, ran = e.runTool(toolCtx, c, log)
		out = e.holdUnknown(c, out)
	}
	// The beats end with the tool, before the chaos pause and the
	// beforeCommit hook: those stand for a worker frozen past its lease,
	// and a frozen worker does not extend it.
	extensions = beat.stop()
	if !ran {
		outcome = execAbandoned
		e.abandon(c, log) // after the beats: a beat racing the release would be refused
		return
	}

	chaos := tool.ChaosOf(args)
	// The before-commit crash fires on the first attempt only: the point is
	// one crash and the recovery after it, not a call that crashes the
	// server again on every restart. (The after-commit crash can fire only
	// once anyway: success is final.)
	if e.chaos && chaos.CrashBeforeCommit && c.Attempt == 1 {
		outcome = execCrashed
		log.Warn("chaos: _crash_before_commit, exiting before the completion commits")
		e.m.executions.WithLabelValues(c.Tool, execCrashed).Inc()
		e.exit(exitCrash)
		return // only reached when exit is a test hook
	}
	// The pause stands for a worker frozen past its lease (a GC pause, a
	// stalled VM; docs/design.md, "The attempt as fencing token"): the
	// outcome is in hand, the lease runs out, another worker may take the
	// call over, and this commit must then be fenced. First attempt only,
	// like the crash: the attempt that takes over must be able to commit.
	if e.chaos && chaos.PauseBeforeCommit > 0 && c.Attempt == 1 {
		log.Warn("chaos: _pause_before_commit, pausing before the completion commits",
			logkey.DurationAttr(logkey.Pause, chaos.PauseBeforeCommit), logkey.DurationAttr(logkey.Lease, e.lease))
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

	completion := e.startCompletion(ctx)
	done, err := e.commit(c, out, unsettled, extensions)
	endCompletion(completion, err)
	switch {
	case errors.Is(err, store.ErrFenced):
		outcome = execFenced
		// Another worker took the call over after our lease expired; its
		// completion (or its coming one) is the call's. Ours must vanish.
		e.m.fenced.Inc()
		e.m.executions.WithLabelValues(c.Tool, execFenced).Inc()
		log.Warn("completion fenced: lease lost to another worker", logkey.Owner, e.owner, logkey.Err, err)
		return
	case refusedForGood(err):
		log.Error("the database refused the completion; recording the call as failed", logkey.Err, err)
		if done, err = e.failRefused(c, err, extensions); err != nil {
			if errors.Is(err, store.ErrFenced) {
				outcome = execFenced
				e.m.fenced.Inc()
				e.m.executions.WithLabelValues(c.Tool, execFenced).Inc()
				log.Warn("failure record fenced: lease lost to another worker", logkey.Owner, e.owner, logkey.Err, err)
				return
			}
			e.m.executions.WithLabelValues(c.Tool, execError).Inc()
			log.Error("recording the refusal as a failure failed too; the lease will bring the call back", logkey.Err, err)
			return
		}
	case err != nil:
		e.m.executions.WithLabelValues(c.Tool, execError).Inc()
		log.Error("recording completion failed; the lease will bring the call back", logkey.Err, err)
		return
	}
	// The outcome is recorded: a breaker-guarded tool's breaker counts it
	// (a fenced attempt returned above and is not counted: the attempt
	// that took it over is).
	e.gates.report(e.st, c, out, log.Warn)
	if done.Status == store.StatusPending {
		// A server-side retry was scheduled: not final, nobody is told;
		// the call is pending again (back-pressure counts it).
		outcome = execRetry
		e.queue.added()
		e.m.executions.WithLabelValues(c.Tool, execRetry).Inc()
		e.m.execSeconds.WithLabelValues(c.Tool).Observe(time.Since(start).Seconds())
		var in time.Duration
		if done.NotBefore != nil { // the store's clock on both sides
			in = time.Duration((*done.NotBefore - done.UpdatedAt) * float64(time.Second)).Round(time.Millisecond)
		}
		log.Info("call failed, retry scheduled", logkey.Err, out.Err, logkey.DurationAttr(logkey.RetryIn, in),
			logkey.MaxAttempts, e.policy(c.Tool).MaxAttempts, "lease_extensions", extensions)
		return
	}
	outcome = string(done.Status)
	e.m.executions.WithLabelValues(c.Tool, string(done.Status)).Inc()
	e.m.execSeconds.WithLabelValues(c.Tool).Observe(time.Since(start).Seconds())
	// Debug: per call; idemctl_executions_total counts outcomes. Built
	// only when on: its arguments (the duration's text) cost allocations.
	if log.Enabled(ctx, slog.LevelDebug) {
		log.Debug("call "+string(done.Status), logkey.Status, done.Status, logkey.DurationAttr(logkey.Duration, time.Since(start)),
			"lease_extensions", extensions)
	}

	if e.chaos && chaos.CrashAfterCommit && done.Status == store.StatusSucceeded {
		outcome = execCrashed
		log.Warn("chaos: _crash_after_commit, exiting before the response")
		e.m.executions.WithLabelValues(c.Tool, execCrashed).Inc()
		e.exit(exitCrash)
		return
	}
	e.onFinal(c.CallID)
}

// runTool decodes the stored args and runs the tool under ctx. ran is
// false when the shutdown grace ran out and cancelled the tool: the caller
// then releases the call. A tool cancelled because its lease was lost still counts as
// ran, with an error outcome: its completion goes to the store and is
// fenced there, which audits the lost attempt like any stale one.
func (e *Executor) runTool(ctx context.Context, c store.Call, log *slog.Logger) (args map[string]any, out tool.Outcome, ran bool) {
	defer func() {
		// A panicking tool is a bug; it must not take the server down, and
		// re-running it would panic again: fail the call for good.
		if p := recover(); p != nil {
			log.Error("tool panicked", "panic", p, "stack", string(debug.Stack()))
			out, ran = tool.Outcome{Err: &tool.ToolError{Code: wire.CodeInternal,
				Message: fmt.Sprintf("tool panicked: %v", p)}}, true
		}
	}()
	v, err := fingerprint.ParseJSON(c.ArgsJSON)
	args, _ = v.(map[string]any)
	if err != nil || args == nil {
		return nil, tool.Outcome{Err: &tool.ToolError{Code: wire.CodeInternal,
			Message: fmt.Sprintf("stored args unreadable: %v", err)}}, true
	}
	if c.CancelRequested { // canceled while it ran before (then recovered): never run it again
		return args, tool.Outcome{Err: canceledError}, true
	}
	ctx, untrack := e.running.track(ctx, c.CallID)
	defer untrack()
	var runFn func(context.Context, tool.Invocation) (tool.Outcome, error) = e.tools.Run
	if e.runToolFn != nil {
		runFn = e.runToolFn
	}
	out, err = runFn(ctx, tool.Invocation{CallID: c.CallID, Tool: c.Tool, Args: args, Attempt: c.Attempt, Log: log})
	switch {
	case err == nil:
		return args, capResult(out, e.maxResult), true
	case canceledByRequest(ctx):
		return args, tool.Outcome{Err: canceledError}, true
	case errors.Is(context.Cause(ctx), errLeaseLost):
		return args, tool.Outcome{Err: &tool.ToolError{Code: wire.CodeInternal,
			Message: errLeaseLost.Error(), Retryable: true}}, true
	case e.workCtx.Err() != nil:
		return args, out, false
	}
	// Validate accepted these args when they were stored; refusing them
	// now means the rules changed. Retrying cannot help.
	return args, tool.Outcome{Err: &tool.ToolError{Code: wire.CodeInvalidArgs, Message: err.Error()}}, true
}

// abandon releases a call whose tool was cancelled by shutdown, so it runs
// again at once elsewhere instead of after its lease.
func (e *Executor) abandon(c store.Call, log *slog.Logger) {
	e.m.executions.WithLabelValues(c.Tool, execAbandoned).Inc()
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	err := e.st.Release(ctx, store.Lease{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt}, "abandoned at shutdown")
	if err != nil && !errors.Is(err, store.ErrNotHeld) {
		log.Warn("releasing abandoned call failed; its lease will expire", logkey.Err, err)
		return
	}
	log.Warn("tool abandoned at shutdown, call released")
}
