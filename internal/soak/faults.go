package soak

// The fault runner: waits each planned gap, then kills an instance, fires a
// crash hook, ends the servers' PostgreSQL connections, restarts
// PostgreSQL with the user's command, pauses an instance past its lease or
// partitions it from the database.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/blackhole"
	"github.com/idemctl/idemctl/internal/ctxutil"
	"github.com/idemctl/idemctl/internal/tool"
)

const (
	// upWait bounds the wait for an instance to be back before a fault
	// aimed at it.
	upWait = 30 * time.Second
	// crashWait bounds the wait for a crash hook's exit.
	crashWait = 10 * time.Second
	// pgBackWait bounds the wait for PostgreSQL after a restart command.
	pgBackWait = 60 * time.Second
)

// faultRunner inflicts the planned faults.
type faultRunner struct {
	hist   *History
	inst   *instances
	send   *sender
	prefix string
	log    func(format string, args ...any)
	// pg is the admin DSN (PostgreSQL only) and app the application_name
	// of the servers' connections.
	pg, app    string
	restartCmd string
	cmdOut     io.Writer
	// lease is the servers' lease; pauseMin and pauseMax bound a pause,
	// partMin and partMax a partition.
	lease              time.Duration
	pauseMin, pauseMax time.Duration
	partMin, partMax   time.Duration
	// running reads the calls running now (for the pauses).
	running func(context.Context) ([]HeldCall, error)
	// proxies are the instances' database proxies (--pg-partition).
	proxies []*blackhole.Proxy

	kills, crashHooks, crashes, terminated, restarts int
	pauses, paused, partitions                       int
}

// run inflicts faults from gen until cycles are done (cycles < 0: until
// stop closes) or stop closes; it returns how many it inflicted.
func (r *faultRunner) run(ctx context.Context, gen *FaultGenerator, cycles int, stop <-chan struct{}) int {
	n := 0
	for cycles < 0 || n < cycles {
		f := gen.Next()
		select {
		case <-stop:
			return n
		case <-ctx.Done():
			return n
		case <-time.After(f.Gap):
		}
		r.inflict(ctx, n, f)
		n++
	}
	return n
}

func (r *faultRunner) inflict(ctx context.Context, n int, f Fault) {
	i := f.Instance % len(r.inst.procs)
	switch f.Kind {
	case FaultKill:
		if r.inst.kill(i, upWait) {
			r.kills++
			r.log("%s cycle %d: SIGKILL instance %d", offset(r.hist.Now()), n+1, i)
		} else {
			r.log("cycle %d: instance %d did not come back within %s; no kill", n+1, i, upWait)
		}
	case FaultCrashHook:
		r.crashHook(ctx, n, i)
	case FaultPGTerminate:
		r.pgTerminate(ctx, n)
	case FaultPGRestart:
		r.pgRestart(ctx, n)
	case FaultPause:
		r.pause(ctx, n, i, f)
	case FaultPartition:
		r.partition(ctx, n, i, f)
	}
}

// crashHook sends an http-tool call with _crash_before_commit to instance
// i: whichever instance claims it runs the tool (the downstream charges),
// then exits 3 before recording the outcome; restarted, it runs the call
// again under the same effect id. The runner then retries the key, a
// same-key retry of an unanswered request.
func (r *faultRunner) crashHook(ctx context.Context, n, i int) {
	if !r.inst.waitUp(i, upWait) {
		r.log("cycle %d: instance %d did not come back within %s; no crash hook", n+1, i, upWait)
		return
	}
	key := fmt.Sprintf("%s-crash-%d", r.prefix, n)
	p := WithRef(Payload{HTTPTool, map[string]any{"amount": 1 + n, tool.ArgCrashBeforeCommit: true}}, key)
	r.hist.AddKey(key, p)
	// Drain stale crash notices (an earlier hook's exit seen late).
	for len(r.inst.crashes) > 0 {
		<-r.inst.crashes
	}
	now := r.hist.Now()
	r.hist.Event(Event{Kind: EventCrashHook, Instance: i, At: now, End: now, Planned: true, Detail: key})
	r.crashHooks++
	r.log("%s cycle %d: crash hook %s (http tool with %s) to instance %d", offset(r.hist.Now()), n+1, key, tool.ArgCrashBeforeCommit, i)
	r.send.send(-1, OpNew, key, p, Same, i, true, false)
	select {
	case <-r.inst.crashes:
		r.crashes++
	case <-time.After(crashWait):
		r.log("cycle %d: crash hook %s: no instance exited within %s (a kill may have taken the call first)", n+1, key, crashWait)
	case <-ctx.Done():
		return
	}
	r.inst.waitAllUp(upWait)
	r.send.send(-1, OpRetry, key, p, Same, i, true, false)
}

// pgConnect opens an admin connection of its own name.
func (r *faultRunner) pgConnect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, r.pg)
}

// pgTerminate ends every backend of the servers' application_name.
func (r *faultRunner) pgTerminate(ctx context.Context, n int) {
	at := r.hist.Now()
	conn, err := r.pgConnect(ctx)
	if err != nil {
		r.log("cycle %d: pg-terminate: connecting: %v", n+1, err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ended int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name = $1 AND pid <> pg_backend_pid()) t`, r.app).Scan(&ended)
	end := r.hist.Now()
	if err != nil {
		r.log("cycle %d: pg-terminate: %v", n+1, err)
	}
	r.terminated++
	detail := fmt.Sprintf("%d backend(s) of application_name %s ended", ended, r.app)
	r.log("%s cycle %d: pg_terminate_backend: %s", offset(at), n+1, detail)
	r.hist.Event(Event{Kind: EventPGTerminate, Instance: -1, At: at, End: end, Planned: true, Detail: detail})
}

// pgRestart runs the user's restart command (sh -c) and waits until
// PostgreSQL answers again.
func (r *faultRunner) pgRestart(ctx context.Context, n int) {
	at := r.hist.Now()
	cmd := exec.CommandContext(ctx, "sh", "-c", r.restartCmd)
	cmd.Stdout, cmd.Stderr = r.cmdOut, r.cmdOut
	err := cmd.Run()
	detail := "restart command ok"
	if err != nil {
		detail = "restart command: " + err.Error()
		r.log("cycle %d: pg-restart: %v", n+1, err)
	}
	deadline := time.Now().Add(pgBackWait)
	for {
		conn, cerr := r.pgConnect(ctx)
		if cerr == nil {
			perr := conn.Ping(ctx)
			conn.Close(context.WithoutCancel(ctx))
			if perr == nil {
				break
			}
			cerr = perr
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			detail += "; database not back within " + pgBackWait.String() + ": " + cerr.Error()
			break
		}
		_ = ctxutil.Sleep(ctx, 200*time.Millisecond)
	}
	r.restarts++
	r.log("%s cycle %d: PostgreSQL restart: %s", offset(at), n+1, detail)
	r.hist.Event(Event{Kind: EventPGRestart, Instance: -1, At: at, End: r.hist.Now(), Planned: true, Detail: detail})
}

// pauseLook bounds the wait for the instance to run a call before a pause:
// a pause that freezes no running tool proves nothing about fencing.
const pauseLook = 2 * time.Second

// baitSeconds is the length of the sleep call a pause sends to its instance
// first: long enough to be still running when the freeze lands (it is
// frozen as soon as it is seen running, within pauseLook), so every pause
// freezes at least one tool mid-run, whatever the workload happens to be
// doing.
const baitSeconds = 5

// pauseTakeoverWait bounds how much longer than planned a pause lasts while
// the calls it froze are not yet taken over.
const pauseTakeoverWait = 10 * time.Second

// pause freezes instance i (SIGSTOP) for a length within the pause range,
// longer than the servers' lease, while it runs a call, then thaws it
// (SIGCONT). It first sends i a sleep call (the bait) and waits up to
// pauseLook for i to run one. The calls frozen are read after the freeze,
// so each was still running in the database when the instance stopped:
// another instance (or, alone, its own recovery once it wakes) takes them
// over when their lease runs out, and the frozen worker's late completion
// must then be fenced (checkPausedFenced).
func (r *faultRunner) pause(ctx context.Context, n, i int, f Fault) {
	if !r.inst.waitUp(i, upWait) {
		r.log("cycle %d: instance %d did not come back within %s; no pause", n+1, i, upWait)
		return
	}
	p := r.inst.procs[i]
	pid := p.Pid()
	r.bait(ctx, i, fmt.Sprintf("%s-pause-%d", r.prefix, n))
	deadline := time.Now().Add(pauseLook)
	for r.running != nil {
		held, err := r.heldBy(ctx, pid)
		if err != nil || len(held) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	length := Within(r.pauseMin, r.pauseMax, f.Frac)
	at := r.hist.Now()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		r.log("cycle %d: pause of instance %d: %v", n+1, i, err)
		return
	}
	// Frozen: none of its calls can change state from here on, so what the
	// database shows running under it now was running when it stopped.
	var held []HeldCall
	if r.running != nil {
		held, _ = r.heldBy(ctx, pid)
	}
	r.pauses++
	r.paused += len(held)
	r.log("%s cycle %d: SIGSTOP instance %d (pid %d) for %s, past its %s lease; it runs %d call(s)",
		offset(at), n+1, i, pid, length.Round(time.Millisecond), r.lease, len(held))
	t := time.NewTimer(length)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	// Frozen past its lease, the instance's calls are taken over by whoever
	// claims next; on a loaded machine that may come late, so the freeze
	// lasts until none of them runs under it any more (up to
	// pauseTakeoverWait more): a thaw before the takeover would test
	// nothing. Alone, an instance is only taken over by its own recovery,
	// once it wakes.
	for deadline := time.Now().Add(pauseTakeoverWait); len(r.inst.procs) > 1 && len(held) > 0 && time.Now().Before(deadline) && ctx.Err() == nil; {
		still, err := r.heldBy(ctx, pid)
		if err != nil || len(still) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Thawed whatever happens: a frozen process would outlive the soak.
	if err := p.Signal(syscall.SIGCONT); err != nil {
		r.log("cycle %d: SIGCONT instance %d: %v", n+1, i, err)
	}
	end := r.hist.Now()
	r.hist.Event(Event{Kind: EventPause, Instance: i, At: at, End: end, Planned: true,
		Detail: fmt.Sprintf("SIGSTOP pid %d for %s", pid, length.Round(time.Millisecond))})
	r.hist.AddPause(Pause{Instance: i, At: at, End: end, PID: pid, Calls: held})
}

// heldBy lists the calls running under a worker of process pid.
func (r *faultRunner) heldBy(ctx context.Context, pid int) ([]HeldCall, error) {
	calls, err := r.running(ctx)
	var held []HeldCall
	for _, c := range calls {
		if ownerPID(c.Owner) == pid {
			held = append(held, c)
		}
	}
	return held, err
}

// bait submits a sleep call with a new key to instance i without waiting
// for it, recorded in the history like any other attempt. The instance
// that accepts a call wakes its own worker at once, so i nearly always
// runs it; when another instance wins it, the pause freezes whatever i
// runs.
func (r *faultRunner) bait(ctx context.Context, i int, key string) {
	r.submit(ctx, i, key, Payload{ToolSleep, map[string]any{"seconds": baitSeconds}}, attemptTimeout)
}

// submit sends one request with a new key to instance i, without waiting
// for the call to end, and records it in the history as an attempt.
func (r *faultRunner) submit(ctx context.Context, i int, key string, p Payload, timeout time.Duration) Attempt {
	r.hist.AddKey(key, p)
	a := Attempt{Client: -1, Op: OpNew, Key: key, Variant: Same, Instance: i, Start: r.hist.Now()}
	var res client.Submission
	c, err := client.New(r.inst.procs[i].URL, client.WithHTTPClient(&http.Client{}), client.WithAttemptTimeout(timeout),
		client.WithRetries(0), client.WithPreferWait(0))
	if err == nil {
		res, err = c.Submit(ctx, p.Tool, p.Args, client.WithKey(key))
	}
	a.End = r.hist.Now()
	if len(res.Attempts) > 0 {
		x := res.Attempts[len(res.Attempts)-1]
		a.HTTP, a.Code, a.CallID, a.Status, a.Err = x.HTTP, x.Code, x.CallID, x.Status, x.Error
	} else if err != nil {
		a.Err = err.Error()
	}
	r.hist.Record(a)
	return a
}

// ownerPID is the pid of a lease owner "host:pid:start[/suffix]", or -1.
func ownerPID(owner string) int {
	if j := strings.IndexByte(owner, '/'); j >= 0 {
		owner = owner[:j]
	}
	parts := strings.Split(owner, ":")
	if len(parts) < 3 {
		return -1
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return -1
	}
	return pid
}

// partition blackholes instance i's database connections for a length
// within the partition range, then heals them. While it lasts, a probe
// (a new key, sent to i with a timeout far above PartitionBound) measures
// how long the instance takes to answer; after the heal, probes with new
// keys measure how long until i acknowledges one again.
func (r *faultRunner) partition(ctx context.Context, n, i int, f Fault) {
	if i >= len(r.proxies) {
		return
	}
	if !r.inst.waitUp(i, upWait) {
		r.log("cycle %d: instance %d did not come back within %s; no partition", n+1, i, upWait)
		return
	}
	length := Within(r.partMin, r.partMax, f.Frac)
	px := r.proxies[i]
	at := r.hist.Now()
	px.Partition()
	r.partitions++
	r.log("%s cycle %d: partition: instance %d's database connections blackholed for %s", offset(at), n+1, i, length.Round(time.Millisecond))
	during := make(chan struct{})
	go func() {
		defer close(during)
		// A moment in: the pooled connections in use are stuck by then.
		if ctxutil.Sleep(ctx, min(probeDelay, length/2)) != nil {
			return
		}
		// /readyz pings the database (2 s bound): it shows the cut is real.
		r.log("%s cycle %d: instance %d cut off: /readyz %s", offset(r.hist.Now()), n+1, i, r.readyz(ctx, i))
		key := fmt.Sprintf("%s-partition-%d", r.prefix, n)
		r.probe(ctx, i, key, true, PartitionBound+probeSlack, 0)
	}()
	t := time.NewTimer(length)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	px.Heal()
	end := r.hist.Now()
	r.hist.Event(Event{Kind: EventPartition, Instance: i, At: at, End: end, Planned: true,
		Detail: fmt.Sprintf("instance %d blackholed for %s", i, length.Round(time.Millisecond))})
	r.log("%s cycle %d: partition of instance %d healed", offset(end), n+1, i)
	<-during
	// Service resumes: new keys to i until one is acknowledged.
	key := fmt.Sprintf("%s-resume-%d", r.prefix, n)
	for ctx.Err() == nil {
		pr := r.probe(ctx, i, key, false, attemptTimeout, end)
		if pr.HTTP/100 == 2 || r.hist.Now()-end > ResumeBound+probeSlack {
			break
		}
		_ = ctxutil.Sleep(ctx, 200*time.Millisecond)
	}
}

const (
	// probeDelay is how long into a partition its probe is sent.
	probeDelay = time.Second
	// probeSlack is how long a probe waits beyond the bound it is judged
	// by, so that a late answer is seen (and reported) as late.
	probeSlack = 10 * time.Second
)

// readyz is instance i's GET /readyz answer, in brief.
func (r *faultRunner) readyz(ctx context.Context, i int) string {
	ctx, cancel := context.WithTimeout(ctx, PartitionBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.inst.procs[i].URL+"/readyz", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "no answer: " + err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return resp.Status
}

// probe sends one request with a new key's charge to instance i with the
// given timeout, records it as an attempt and as a probe, and returns the
// probe.
func (r *faultRunner) probe(ctx context.Context, i int, key string, during bool, timeout, healed time.Duration) Probe {
	a := r.submit(ctx, i, key, Payload{ToolCharge, map[string]any{"amount": 1}}, timeout)
	pr := Probe{Instance: i, Key: key, During: during, Start: a.Start, End: a.End, Healed: healed, HTTP: a.HTTP, Code: a.Code, Err: a.Err}
	r.hist.AddProbe(pr)
	return pr
}
