package fault

import (
	"context"
	"fmt"
	"github.com/idemctl/idemctl/internal/exitcode"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/client"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tools"
)

// Scenario timings.
const (
	// pollTimeout bounds waiting for a call to become final.
	pollTimeout = 15 * time.Second
	// crashWait is the Prefer: wait of the crash scenarios' POST: the reply
	// would come after the commit, so the crash eats it (§12.7.2).
	crashWait = 5 * time.Second
	// crashRetries covers the restart: backoffs of 0.1+0.2+0.4+0.8+1+1+...s.
	crashRetries = 8
	// serverDefaultLease is serve's default --lease, which the crash
	// scenarios keep: recovery must not have waited for it.
	serverDefaultLease = 30 * time.Second
	// leaseExpiryLease and leaseExpiryPause: server A's worker pauses well
	// past its lease, long enough for server B to see the lease expire
	// (up to one 200ms recovery tick late), claim the call and commit
	// before A wakes.
	leaseExpiryLease = time.Second
	leaseExpiryPause = 2.5 // seconds, _pause_before_commit
	// leaseExpiryHostA and leaseExpiryHostB are the servers'
	// --instance-host: different hosts never judge each other's pids, so
	// only the lease can hand A's call to B (A is alive anyway).
	leaseExpiryHostA = "fault-host-a"
	leaseExpiryHostB = "fault-host-b"
)

func chargeArgs(amount int64) map[string]any { return map[string]any{"amount": amount} }

// settle polls the call the client was answered with until it is final,
// and prints it as the scenario's final call line.
func (e *env) settle(ctx context.Context, c *client.Client, call client.Call) (client.Call, error) {
	if !call.Final() {
		var err error
		if call, err = c.Poll(ctx, call.CallID, pollTimeout); err != nil {
			return call, err
		}
	}
	e.logf("final call (polled until succeeded or failed):")
	e.printJSON("", call)
	return call, nil
}

// chargeAndSettle makes the scenarios' one logical call (charge 100 under
// key) and waits for its final state. It returns the client's result and
// the call ids the client was answered with; a missing answer or a call that
// never settles is recorded on rep (the error is non-nil only when the
// scenario must stop).
func (e *env) chargeAndSettle(ctx context.Context, rep *Report, c *client.Client, key string) (client.Result, []string, error) {
	res, callErr := c.Call(ctx, key, client.Request{Tool: tools.Charge, Args: chargeArgs(100)})
	answers := answeredIDs(res)
	if callErr != nil {
		return res, answers, noAnswer(ctx, rep, "the client", callErr)
	}
	final, err := e.settle(ctx, c, res.Call)
	if err != nil {
		if err := notFinal(ctx, rep, res.Call.CallID, err); err != nil {
			return res, answers, err
		}
	}
	return res, append(answers, final.CallID), nil
}

// noAnswer records a client that ended without an answer, or returns the
// context's error when the run was cancelled.
func noAnswer(ctx context.Context, rep *Report, who string, err error) error {
	return failUnlessCancelled(ctx, rep, "%s got no answer: %v", who, err)
}

// notFinal records a call that did not become final, or returns the
// context's error when the run was cancelled.
func notFinal(ctx context.Context, rep *Report, callID string, err error) error {
	return failUnlessCancelled(ctx, rep, "invariant 4: call %s did not become final: %v", callID, err)
}

// failUnlessCancelled records a failure, unless the run was cancelled: then
// nothing was disproved, and the context's error ends the scenario.
func failUnlessCancelled(ctx context.Context, rep *Report, format string, args ...any) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.fail(format, args...)
	return nil
}

// ---------------------------------------------------------------- drop-response

var dropResponse = scenario{
	name:  "drop-response",
	title: "the server runs the charge, but the proxy drops its first reply; the client times out and retries with the same key",
	plan: []string{
		"make a temp dir and database; start `idemctl serve` (the same binary) on a free loopback port",
		"start the chaos proxy in front of it: --mode drop-response --first 1",
		"client through the proxy: key drop-<unix time>, charge amount 100, --timeout 1s --retries 3",
		"attempt 0 reaches the server, which records and runs the charge; the reply is dropped, the client reports \"timed out\"",
		"attempt 1 carries the same key: the server answers with the original call instead of charging again",
		"poll the call until final; print calls, effects, audit and dupes from the database, and /stats",
		"PASS when calls=1, effects=1, no dupes, every call final, and every answer named the same call",
	},
	run:      func(ctx context.Context, e *env, rep *Report) error { return runDrop(ctx, e, rep, false) },
	contrast: func(ctx context.Context, e *env, rep *Report) error { return runDrop(ctx, e, rep, true) },
}

func runDrop(ctx context.Context, e *env, rep *Report, newKey bool) error {
	srv, err := e.startServer(ctx, serverOpts{label: "server"})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.commandLine(), srv.pid())
	proxy, base, err := e.startProxy(ctx, srv.base, chaos.ModeDropResponse, chaos.First(1))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("drop-%d", time.Now().Unix())
	c := e.client(base, "")
	c.NewKeyOnRetry = newKey
	flag := ""
	if newKey {
		flag = " --new-key-on-retry"
	}
	e.logf("client: idemctl call --base %s --key %s --amount 100 --timeout %s%s", base, key, c.Timeout, flag)

	res, answers, err := e.chargeAndSettle(ctx, rep, c, key)
	rep.Attempts = len(res.Attempts)
	if err != nil {
		return err
	}
	if newKey {
		// The dropped first key's call runs on without the client; wait
		// for it too, so the counts include its charge.
		direct := &client.Client{Base: srv.base}
		for _, a := range res.Attempts {
			if _, err := direct.PollByKey(ctx, a.Key, pollTimeout); err != nil && ctx.Err() == nil {
				e.logf("key %s: %v", a.Key, err)
			}
		}
	}
	if _, hits := proxy.Counts(); hits != 1 || len(res.Attempts) < 2 || res.Attempts[0].HTTP != 0 {
		rep.fail("the fault did not happen as planned: %d reply dropped, %d attempt(s), first attempt %+v",
			hits, len(res.Attempts), firstAttempt(res))
	}

	want := expect{calls: 1, effects: 1}
	if newKey {
		want = expect{calls: 2, effects: 2}
	}
	if _, err := e.evidence(ctx, srv.base, rep, want, answers); err != nil {
		return err
	}
	if newKey {
		rep.Verdict = Demo
		if len(rep.Failures) > 0 {
			rep.Verdict = NotReproduced
		}
	}
	return nil
}

func firstAttempt(res client.Result) client.AttemptRecord {
	if len(res.Attempts) == 0 {
		return client.AttemptRecord{}
	}
	return res.Attempts[0]
}

// ---------------------------------------------------------------- crash scenarios

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
		return runCrash(ctx, e, rep, tools.ArgCrashAfterCommit)
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
		return runCrash(ctx, e, rep, tools.ArgCrashBeforeCommit)
	},
}

// restartResult is what the supervisor saw and did.
type restartResult struct {
	code   int
	status string
	err    error // restarting failed
}

// restartOnExit restarts p once when its process exits, as a supervisor
// would. env.close stops the watcher before it kills the servers.
func (e *env) restartOnExit(ctx context.Context, p *serverProc) <-chan restartResult {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan restartResult, 1)
	done := make(chan struct{})
	e.stops = append(e.stops, func() { cancel(); <-done })
	oldPID := p.pid()
	go func() {
		defer close(done)
		select {
		case <-p.exited():
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil {
			return // the scenario is over: this exit is the clean-up
		}
		code := p.exitCode()
		status := statusText(code, p.exitStatus())
		e.logf("%s (pid %d) died: %s — restarting it on the same database, as a supervisor would", p.opts.label, oldPID, status)
		err := p.start(ctx)
		if err == nil {
			e.logf("%s is back (pid %d)", p.opts.label, p.pid())
		}
		ch <- restartResult{code: code, status: status, err: err}
	}()
	return ch
}

// exitCrash is serve's exit status for a chaos crash.
const exitCrash = exitcode.Crash

func runCrash(ctx context.Context, e *env, rep *Report, hook string) error {
	before := hook == tools.ArgCrashBeforeCommit
	srv, err := e.startServer(ctx, serverOpts{label: "server", chaos: true})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.commandLine(), srv.pid())
	restarted := e.restartOnExit(ctx, srv)

	key := fmt.Sprintf("crash-%d", time.Now().Unix())
	if before {
		key = fmt.Sprintf("crash-before-%d", time.Now().Unix())
	}
	c := e.client(srv.base, "")
	c.PreferWait = crashWait
	c.Timeout = crashWait + 2*time.Second // the held reply must not time out first
	c.Retries = crashRetries
	args := chargeArgs(100)
	args[hook] = true
	e.logf("client: POST key %s, charge 100 with %s=true, Prefer: wait=%d, same-key retries", key, hook, int(crashWait.Seconds()))

	res, callErr := c.Call(ctx, key, client.Request{Tool: tools.Charge, Args: args})
	rep.Attempts = len(res.Attempts)
	answers := answeredIDs(res)

	// By now the process has died (or never will): give the supervisor a
	// moment to report.
	var rr restartResult
	crashed := false
	select {
	case rr = <-restarted:
		crashed = true
	case <-time.After(readyTimeout):
	case <-ctx.Done():
		return ctx.Err()
	}
	switch {
	case !crashed:
		rep.fail("the fault did not happen: the server never died on %s", hook)
	case rr.err != nil:
		return fmt.Errorf("restarting the server: %w", rr.err)
	case rr.code != exitCrash:
		rep.fail("the server died with %s, not the chaos crash (exit status %d)", rr.status, exitCrash)
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
			c.Retries = -1
			if res, callErr = c.Call(ctx, key, client.Request{Tool: tools.Charge, Args: args}); callErr != nil {
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

	ev, err := e.evidence(ctx, srv.base, rep, expect{calls: 1, effects: 1}, answers)
	if err != nil {
		return err
	}
	if final.CallID != "" && final.Status != client.StatusSucceeded {
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
	claimed, recovered := firstEvent(ev.events, store.EventClaimed), firstEvent(ev.events, store.EventRecover)
	switch {
	case recovered == nil || claimed == nil:
		rep.fail("invariant 4: no recover row in the audit: the crashed call was never handed back")
	default:
		after := time.Duration((recovered.TS - claimed.TS) * float64(time.Second))
		e.logf("recovered %.2fs after the first claim (%s); the lease was %s", after.Seconds(), recovered.Detail, serverDefaultLease)
		if after >= serverDefaultLease {
			rep.fail("the crashed owner's call waited for its lease (%s) instead of being recovered at once", after.Round(time.Millisecond))
		}
	}
	return nil
}

func firstEvent(events []store.AuditEvent, name string) *store.AuditEvent {
	for i := range events {
		if events[i].Event == name {
			return &events[i]
		}
	}
	return nil
}

// ---------------------------------------------------------------- concurrent

var concurrent = scenario{
	name:  "concurrent",
	title: "many clients send the same key at the same moment; one call is recorded and one charge made",
	plan: []string{
		"make a temp dir and database; start `idemctl serve` on a free loopback port",
		"20 clients (--concurrency) wait at a barrier, then POST the same key conc-<unix time>, charge amount 100, with same-key retries",
		"the key's UNIQUE constraint and the write lock let exactly one insert win; every other request gets that call (§12.6.3)",
		"poll the call until final; print calls, effects, audit and dupes from the database, and /stats",
		"PASS when every client was answered with the same call_id, calls=1, effects=1",
	},
	run: runConcurrent,
}

func runConcurrent(ctx context.Context, e *env, rep *Report) error {
	srv, err := e.startServer(ctx, serverOpts{label: "server"})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.commandLine(), srv.pid())
	n := e.r.opts.Concurrency
	key := fmt.Sprintf("conc-%d", time.Now().Unix())
	e.logf("%d clients POST key %s (charge 100) at once", n, key)

	results := make([]client.Result, n)
	errs := make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		c := e.client(srv.base, fmt.Sprintf("[client %02d] ", i))
		wg.Go(func() {
			<-gate
			results[i], errs[i] = c.Call(ctx, key, client.Request{Tool: tools.Charge, Args: chargeArgs(100)})
		})
	}
	close(gate)
	wg.Wait()

	var answers []string
	var first client.Result
	replayed := 0
	for i := range n {
		rep.Attempts += len(results[i].Attempts)
		answers = append(answers, answeredIDs(results[i])...)
		if errs[i] != nil {
			if err := noAnswer(ctx, rep, fmt.Sprintf("client %02d", i), errs[i]); err != nil {
				return err
			}
			continue
		}
		if results[i].Replayed {
			replayed++
		}
		if first.Call.CallID == "" {
			first = results[i]
		}
	}
	e.logf("%d clients answered, %d of them with an existing call (Idempotent-Replayed), %d distinct call id(s)",
		n-countErrs(errs), replayed, len(distinct(answers)))
	if first.Call.CallID != "" {
		final, err := e.settle(ctx, e.client(srv.base, ""), first.Call)
		if err != nil {
			if err := notFinal(ctx, rep, first.Call.CallID, err); err != nil {
				return err
			}
		}
		answers = append(answers, final.CallID)
	}
	_, err = e.evidence(ctx, srv.base, rep, expect{calls: 1, effects: 1}, answers)
	return err
}

func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------- duplicate-request

var duplicateRequest = scenario{
	name:  "duplicate-request",
	title: "the network delivers the request twice (proxy duplicate-request); the server records one call and charges once",
	plan: []string{
		"make a temp dir and database; start `idemctl serve` on a free loopback port",
		"start the chaos proxy in front of it: --mode duplicate-request --first 1",
		"client through the proxy: key dup-<unix time>, charge amount 100",
		"the server receives two physical requests with the same key at the same moment; the second finds the first's call",
		"poll the call until final; print calls, effects, audit and dupes from the database, and /stats",
		"PASS when the proxy delivered the request twice and calls=1, effects=1",
	},
	run: runDuplicate,
}

func runDuplicate(ctx context.Context, e *env, rep *Report) error {
	srv, err := e.startServer(ctx, serverOpts{label: "server"})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.commandLine(), srv.pid())
	proxy, base, err := e.startProxy(ctx, srv.base, chaos.ModeDuplicateRequest, chaos.First(1))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("dup-%d", time.Now().Unix())
	c := e.client(base, "")
	e.logf("client: idemctl call --base %s --key %s --amount 100", base, key)
	res, answers, err := e.chargeAndSettle(ctx, rep, c, key)
	rep.Attempts = len(res.Attempts)
	if err != nil {
		return err
	}
	if _, hits := proxy.Counts(); hits != 1 {
		rep.fail("the fault did not happen as planned: %d request(s) duplicated, want 1", hits)
	}
	_, err = e.evidence(ctx, srv.base, rep, expect{calls: 1, effects: 1}, answers)
	return err
}

// ---------------------------------------------------------------- lease-expiry

var leaseExpiry = scenario{
	name:  "lease-expiry",
	title: "a worker pauses past its lease after running the charge (_pause_before_commit, like a long GC pause); a second server takes the call over and commits, and the paused worker's late commit is fenced",
	plan: []string{
		"make a temp dir and database; start server A: `idemctl serve --chaos --lease 1s --workers 1 --instance-host " + leaseExpiryHostA + "` on a free loopback port (one worker: A cannot take its own call back)",
		"client: POST to A, key lease-<unix time>, charge amount 100 with _pause_before_commit=2.5",
		"A claims the call (attempt 1), runs the charge and pauses before its commit; its lease runs out meanwhile",
		"once A has claimed, start server B on the same database: `idemctl serve --chaos --lease 1s --instance-host " + leaseExpiryHostB + "` (another host: no dead-owner shortcut; A is alive anyway)",
		"the expired lease goes back to pending (audit recover); B claims attempt 2 (the pause fires on attempt 1 only), runs the charge and commits it with its effect",
		"A wakes and tries to commit attempt 1: the commit is fenced on (owner, attempt) and refused (audit fenced), no second effect",
		"print calls, effects, audit and dupes from the database, and /stats",
		"PASS when calls=1, effects=1, the call succeeded at attempt 2 claimed by B, exactly one completion committed, and A's stale one was fenced",
	},
	run: runLeaseExpiry,
}

func runLeaseExpiry(ctx context.Context, e *env, rep *Report) error {
	a, err := e.startServer(ctx, serverOpts{label: "server A", chaos: true, lease: leaseExpiryLease,
		workers: 1, instanceHost: leaseExpiryHostA})
	if err != nil {
		return err
	}
	e.logf("server A: %s (pid %d)", a.commandLine(), a.pid())
	key := fmt.Sprintf("lease-%d", time.Now().Unix())
	ca := e.client(a.base, "")
	args := chargeArgs(100)
	args[tools.ArgPauseBeforeCommit] = leaseExpiryPause
	e.logf("client: POST key %s to A, charge 100 with %s=%g (lease %s)", key, tools.ArgPauseBeforeCommit, leaseExpiryPause, leaseExpiryLease)
	res, err := ca.Call(ctx, key, client.Request{Tool: tools.Charge, Args: args})
	rep.Attempts = len(res.Attempts)
	if err != nil {
		return fmt.Errorf("posting the call to server A: %w", err)
	}
	callID := res.Call.CallID
	answers := answeredIDs(res)

	// B starts only once A has claimed: B must not win attempt 1.
	var seen client.Call
	err = waitFor(ctx, 5*time.Second, func() (bool, error) {
		seen, err = (&client.Client{Base: a.base}).Get(ctx, callID)
		return err == nil && seen.Status != client.StatusPending, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("server A never claimed %s: %w", callID, err)
	}
	if seen.Status != client.StatusRunning || seen.Attempt != 1 {
		rep.fail("the fault did not happen as planned: the call was %s at attempt %d before B started, want running at attempt 1", seen.Status, seen.Attempt)
	}
	e.logf("server A claimed attempt %d and pauses before its commit; its %s lease runs out meanwhile", seen.Attempt, leaseExpiryLease)

	b, err := e.startServer(ctx, serverOpts{label: "server B", chaos: true, lease: leaseExpiryLease,
		instanceHost: leaseExpiryHostB})
	if err != nil {
		return err
	}
	e.logf("server B: %s (pid %d), same database", b.commandLine(), b.pid())
	final, err := e.settle(ctx, e.client(b.base, ""), client.Call{CallID: callID})
	if err != nil {
		if err := notFinal(ctx, rep, callID, err); err != nil {
			return err
		}
	}
	answers = append(answers, final.CallID)

	e.logf("waiting for server A to wake up and try to commit attempt 1 under the lease it lost")
	st, err := e.openDB(ctx)
	if err != nil {
		return err
	}
	var fenced *store.AuditEvent
	err = waitFor(ctx, 10*time.Second, func() (bool, error) {
		events, err := st.Audit(ctx, callID, 0)
		fenced = firstEvent(events, store.EventFenced)
		return fenced != nil, err
	})
	st.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		e.logf("no fenced row: %v", err)
	} else {
		e.logf("server A's late commit was fenced: %s", fenced.Detail)
	}

	ev, err := e.evidence(ctx, b.base, rep, expect{calls: 1, effects: 1}, answers)
	if err != nil {
		return err
	}
	if final.CallID != "" && final.Status != client.StatusSucceeded {
		rep.fail("the call ended %q, want succeeded", final.Status)
	}
	if rep.Attempt != 2 {
		rep.fail("attempt=%d, want 2 (A's, then B's after the lease expired)", rep.Attempt)
	}
	if n := countEvents(ev.events, store.EventSucceeded); n != 1 {
		rep.fail("%d completions committed, want exactly 1", n)
	}
	if rep.Fenced < 1 {
		rep.fail("the paused worker's stale commit was not fenced (no fenced row in the audit)")
	}
	checkTakeover(rep, ev.events)
	return nil
}

// checkTakeover checks the audit tells the planned story: A claimed, the
// lease expired (recover), B claimed, B's completion committed, and only
// then A's commit was fenced. Anything else means the fault did not happen
// as planned (A woke before B could take over, say), even if the
// invariants held. The recover row is optional: a claim may take a running
// call whose lease has just expired directly, between a scheduler's
// recovery pass and its claim.
func checkTakeover(rep *Report, events []store.AuditEvent) {
	var claims []store.AuditEvent
	var story []string
	for _, ev := range events {
		if ev.Event == store.EventClaimed {
			claims = append(claims, ev)
		}
		if ev.Event != store.EventCreated && ev.Event != store.EventRecover {
			story = append(story, ev.Event)
		}
	}
	by := func(i int, host string) bool {
		return len(claims) > i && strings.HasPrefix(claims[i].Detail, host+":")
	}
	if !by(0, leaseExpiryHostA) || !by(1, leaseExpiryHostB) || len(claims) != 2 {
		rep.fail("the fault did not happen as planned: want attempt 1 claimed by A (%s) and attempt 2 by B (%s), the audit has %d claim(s)",
			leaseExpiryHostA, leaseExpiryHostB, len(claims))
	}
	want := []string{store.EventClaimed, store.EventClaimed, store.EventSucceeded, store.EventFenced}
	if !slices.Equal(story, want) {
		rep.fail("the fault did not happen as planned: audit %s (recover rows left out), want %s",
			strings.Join(story, " → "), strings.Join(want, " → "))
	}
}

func countEvents(events []store.AuditEvent, name string) int {
	n := 0
	for _, ev := range events {
		if ev.Event == name {
			n++
		}
	}
	return n
}
