package soak

// The fault runner: waits each planned gap, then kills an instance, fires a
// crash hook, ends the servers' PostgreSQL connections or restarts
// PostgreSQL with the user's command.

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5"

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

	kills, crashHooks, crashes, terminated, restarts int
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
	p := Payload{HTTPTool, map[string]any{"amount": 1 + n, tool.ArgCrashBeforeCommit: true}}
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
