package fault

// The crash scenarios: the server dies right after its commit (crash), or
// after the tool ran but before the commit (crash-before-commit).

import (
	"context"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

// Timings of the crash scenarios.
const (
	// crashWait is the Prefer: wait of the crash scenarios' POST: the reply
	// would come after the commit, so the crash eats it.
	crashWait = 5 * time.Second
	// crashRetries covers the restart: backoffs of 0.1+0.2+0.4+0.8+1+1+...s.
	crashRetries = 8
)

var crashAfterCommit = scenario{
	name:  "crash",
	title: "the server commits the charge and dies before it can answer (_crash_after_commit); restarted, it answers the same-key retry with the original result",
	plan: []string{
		"make a temp dir and database; start `idemctl serve --chaos` on a free loopback port",
		"client: key crash-<unix time>, charge amount 100 with _crash_after_commit=true, Prefer: wait=5 (the reply would follow the commit), same-key retries",
		"the worker commits the call (succeeded + one effect) and the process exits at once (status 3): the reply is never written",
		"a supervisor restarts the server on the same database; recovery leaves the succeeded call alone",
		"the client's same-key retry is answered from the record (200, Idempotent-Replayed), the charge does not run again",
		"print calls, effects, audit and dupes from the database, and /stats",
		"PASS when the crash happened, calls=1, effects=1, attempt=1 (never re-run), the retry was a replay",
	},
	run: func(ctx context.Context, e *env, rep *Report) error {
		return runCrash(ctx, e, rep, tool.ArgCrashAfterCommit)
	},
}

var crashBeforeCommit = scenario{
	name:  "crash-before-commit",
	title: "the server runs the charge and dies before its transaction commits (_crash_before_commit); restarted, it sees the owner is gone and runs the call again at once",
	plan: []string{
		"make a temp dir and database; start `idemctl serve --chaos` (lease 30s) on a free loopback port",
		"client: key crash-before-<unix time>, charge amount 100 with _crash_before_commit=true, Prefer: wait=5, same-key retries",
		"the worker runs the charge, then the process exits (status 3) before the success transaction: the call stays running, no effect row",
		"a supervisor restarts the server on the same database; its recovery sees the owner process is gone and returns the call to pending at once (audit recover), long before the 30s lease",
		"attempt 2 runs and commits under the same effect id; the client's same-key retry gets the result",
		"print calls, effects, audit and dupes from the database, and /stats",
		"PASS when the crash happened, calls=1, effects=1, attempt=2, recovered before the lease would have expired",
	},
	run: func(ctx context.Context, e *env, rep *Report) error {
		return runCrash(ctx, e, rep, tool.ArgCrashBeforeCommit)
	},
}

// restartResult is what the supervisor saw and did.
type restartResult struct {
	code   int
	status string
	err    error // restarting failed
}

// awaitCrash waits for the supervisor's report that the server died on
// hook and was restarted, and records in rep a fault that did not happen as
// planned. It reports whether the server died at all; an error means the
// scenario cannot go on (the restart failed, or ctx ended).
func awaitCrash(ctx context.Context, restarted <-chan restartResult, hook string, rep *Report) (bool, error) {
	// By now the process has died (or never will): give the supervisor a
	// moment to report.
	var rr restartResult
	select {
	case rr = <-restarted:
	case <-time.After(serveproc.StartTimeout):
		rep.fail("the fault did not happen: the server never died on %s", hook)
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
	switch {
	case rr.err != nil:
		return true, fmt.Errorf("restarting the server: %w", rr.err)
	case rr.code != exitcode.Crash:
		rep.fail("the server died with %s, not the chaos crash (exit status %d)", rr.status, exitcode.Crash)
	}
	return true, nil
}

// restartOnExit restarts p once when its process exits, as a supervisor
// would. env.close stops the watcher before it stops the servers.
func (e *env) restartOnExit(ctx context.Context, p *serverProc) <-chan restartResult {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan restartResult, 1)
	done := make(chan struct{})
	e.stops = append(e.stops, func() { cancel(); <-done })
	oldPID := p.Pid()
	exited := p.Done()
	go func() {
		defer close(done)
		select {
		case <-exited:
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil {
			return // the scenario is over: this exit is the clean-up
		}
		code, status := p.ExitCode(), p.State().String()
		e.logf("%s (pid %d) died: %s — restarting it on the same database, as a supervisor would", p.label, oldPID, status)
		err := p.Restart(ctx)
		if err == nil {
			e.logf("%s is back (pid %d)", p.label, p.Pid())
		}
		ch <- restartResult{code: code, status: status, err: err}
	}()
	return ch
}

func runCrash(ctx context.Context, e *env, rep *Report, hook string) error {
	before := hook == tool.ArgCrashBeforeCommit
	srv, err := e.startServer(ctx, serverOpts{label: "server", chaos: true})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	restarted := e.restartOnExit(ctx, srv)

	key := fmt.Sprintf("crash-%d", time.Now().Unix())
	if before {
		key = fmt.Sprintf("crash-before-%d", time.Now().Unix())
	}
	// The held reply must not time out first: the client gives a held
	// POST its hold on top of the attempt timeout.
	c, err := e.client(srv.URL, "", client.WithPreferWait(crashWait), client.WithAttemptTimeout(2*time.Second),
		client.WithRetries(crashRetries))
	if err != nil {
		return err
	}
	args := chargeArgs(100)
	args[hook] = true
	e.logf("client: POST key %s, charge 100 with %s=true, Prefer: wait=%d, same-key retries", key, hook, int(crashWait.Seconds()))

	res, callErr := c.Submit(ctx, builtin.Charge, args, client.WithKey(key))
	rep.Attempts = len(res.Attempts)
	answers := answeredIDs(res)

	crashed, err := awaitCrash(ctx, restarted, hook, rep)
	if err != nil {
		return err
	}

	var final client.Call
	if callErr != nil {
		if err := noAnswer(ctx, rep, "the client", callErr); err != nil {
			return err
		}
	} else {
		if crashed && !res.Replayed && !before {
			// The reply made it out before the exit: retry once more on
			// the restarted server, which must answer from the record.
			e.logf("retrying the same key on the restarted server:")
			once, err := e.client(srv.URL, "", client.WithPreferWait(crashWait), client.WithAttemptTimeout(2*time.Second),
				client.WithRetries(0))
			if err != nil {
				return err
			}
			if res, callErr = once.Submit(ctx, builtin.Charge, args, client.WithKey(key)); callErr != nil {
				rep.fail("the same-key retry after the restart failed: %v", callErr)
			}
			answers = append(answers, answeredIDs(res)...)
		}
		if final, err = e.settle(ctx, c, res.Call); err != nil {
			if err := notFinal(ctx, rep, res.Call.CallID, err); err != nil {
				return err
			}
		}
		answers = append(answers, final.CallID)
	}

	ev, err := e.evidence(ctx, srv.URL, rep, expect{calls: 1, effects: 1}, answers)
	if err != nil {
		return err
	}
	if final.CallID != "" && final.Status != wire.StatusSucceeded {
		rep.fail("the call ended %s, want succeeded", final.Status)
	}
	if !before {
		if rep.Attempt != 1 {
			rep.fail("the committed call ran again after the restart: attempt=%d, want 1", rep.Attempt)
		}
		if callErr == nil && !res.Replayed {
			rep.fail("the same-key retry was not answered from the record (no Idempotent-Replayed)")
		}
		return nil
	}
	if rep.Attempt != 2 {
		rep.fail("attempt=%d, want 2 (the crashed attempt, then the recovered one)", rep.Attempt)
	}
	claimed, recovered := firstClaim(ev.events), firstEvent(ev.events, store.EventRecover)
	switch {
	case recovered == nil || claimed == nil:
		rep.fail("invariant 4: no recover row in the audit: the crashed call was never handed back")
	default:
		after := time.Duration((recovered.TS - claimed.TS) * float64(time.Second))
		e.logf("recovered %.2fs after the first claim (%s); the lease was %s", after.Seconds(), recovered.Detail, executor.DefaultLease)
		if after >= executor.DefaultLease {
			rep.fail("the crashed owner's call waited for its lease (%s) instead of being recovered at once", after.Round(time.Millisecond))
		}
	}
	return nil
}
