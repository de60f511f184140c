package soak

// The instances: N `idemctl serve` processes run through serveproc, each
// watched by a supervisor goroutine that records its exits and restarts it
// on the same database and address, as a process manager would.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/serveproc"
)

// restartTries bounds the restarts of one exit before the soak gives up on
// the instance (it stays down; its requests get no answer).
const restartTries = 5

type instances struct {
	hist *History
	// redact hides the database password in serveproc's messages, which
	// quote the serve command line.
	redact func(string) string
	procs  []*serveproc.Process
	logs   []*os.File

	mu      sync.Mutex
	up      []bool
	killing []bool
	crashes chan int // instance numbers of exits with status 3 (crash hooks)
	stop    chan struct{}
	wg      sync.WaitGroup
	errs    []error
}

// startInstances starts one server per entry of args (its flags), logging
// each to dir/server-I.log, and their supervisors.
func startInstances(ctx context.Context, hist *History, bin, dir string, args [][]string, redact func(string) string) (*instances, error) {
	n := len(args)
	in := &instances{hist: hist, redact: redact, up: make([]bool, n), killing: make([]bool, n),
		crashes: make(chan int, 64), stop: make(chan struct{})}
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("server-%d.log", i)))
		if err != nil {
			in.close()
			return nil, err
		}
		in.logs = append(in.logs, f)
		p, err := serveproc.Start(ctx, serveproc.Config{Binary: bin, Args: args[i], Log: f, WaitReady: true})
		if err != nil {
			in.close()
			return nil, errors.New(redact(err.Error()))
		}
		in.procs = append(in.procs, p)
		in.up[i] = true
	}
	for i := range in.procs {
		in.wg.Add(1)
		go in.supervise(ctx, i)
	}
	return in, nil
}

// supervise records each exit of instance i and restarts it until stop.
func (in *instances) supervise(ctx context.Context, i int) {
	defer in.wg.Done()
	p := in.procs[i]
	for {
		select {
		case <-in.stop:
			return
		case <-p.Done():
		}
		in.mu.Lock()
		planned := in.killing[i]
		in.killing[i], in.up[i] = false, false
		in.mu.Unlock()
		in.recordExit(i, planned, false)
		select {
		case <-in.stop:
			return
		default:
		}
		var err error
		for range restartTries {
			if err = p.Restart(ctx); err == nil {
				break
			}
			// The new process exited before it was ready: a crash hook
			// it claimed at once (status 3), or a failure to start,
			// which no_unplanned_exit must see.
			in.recordExit(i, false, true)
			select {
			case <-in.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err != nil {
			in.mu.Lock()
			in.errs = append(in.errs, fmt.Errorf("instance %d: restart failed %d times: %s", i, restartTries, in.redact(err.Error())))
			in.mu.Unlock()
			return
		}
		now := in.hist.Now()
		in.hist.Event(Event{Kind: EventUp, Instance: i, At: now, End: now, Detail: fmt.Sprintf("pid %d", p.Pid())})
		in.mu.Lock()
		in.up[i] = true
		in.mu.Unlock()
	}
}

// recordExit records the exit of instance i's current run (starting: a
// restarted process that exited before /readyz answered). It is planned
// when the soak killed it, or when it exited with status 3: only the
// soak's crash hooks make serve do that, and the fault runner is told.
func (in *instances) recordExit(i int, planned, starting bool) {
	p := in.procs[i]
	at := in.hist.Now()
	how := "unknown"
	if st := p.State(); st != nil {
		how = st.String()
	}
	code := p.ExitCode()
	if code == exitcode.Crash {
		planned = true
		select {
		case in.crashes <- i:
		default:
		}
	}
	if starting {
		how = "while starting, before /readyz answered: " + how
	}
	in.hist.Event(Event{Kind: EventExit, Instance: i, At: at, End: at, Planned: planned, Code: code, Starting: starting, Detail: how})
}

// kill sends SIGKILL to instance i once it is up (waiting up to wait);
// false if it did not come up in time.
func (in *instances) kill(i int, wait time.Duration) bool {
	if !in.waitUp(i, wait) {
		return false
	}
	in.mu.Lock()
	in.killing[i], in.up[i] = true, false
	in.mu.Unlock()
	now := in.hist.Now()
	in.hist.Event(Event{Kind: EventKill, Instance: i, At: now, End: now, Planned: true, Detail: fmt.Sprintf("SIGKILL pid %d", in.procs[i].Pid())})
	in.procs[i].Kill()
	return true
}

// waitUp waits until instance i serves, up to d.
func (in *instances) waitUp(i int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		in.mu.Lock()
		up := in.up[i]
		in.mu.Unlock()
		if up {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAllUp waits until every instance serves, up to d.
func (in *instances) waitAllUp(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for i := range in.procs {
		if !in.waitUp(i, time.Until(deadline)) {
			return false
		}
	}
	return true
}

// pids are the current process ids, -1 for an instance that is down.
func (in *instances) pids() []int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]int, len(in.procs))
	for i, p := range in.procs {
		out[i] = -1
		if in.up[i] {
			out[i] = p.Pid()
		}
	}
	return out
}

// urls are the instances' base URLs (a restart keeps them).
func (in *instances) urls() []string {
	out := make([]string, len(in.procs))
	for i, p := range in.procs {
		out[i] = p.URL
	}
	return out
}

// restartErrors are the restarts that failed for good.
func (in *instances) restartErrors() []error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]error(nil), in.errs...)
}

// close stops the supervisors, then the servers (cleanly, so SQLite
// checkpoints), and closes the logs.
func (in *instances) close() {
	select {
	case <-in.stop:
	default:
		close(in.stop)
	}
	in.wg.Wait()
	for _, p := range in.procs {
		if _, err := p.Stop(5 * time.Second); err != nil {
			p.Kill()
		}
	}
	for _, f := range in.logs {
		_ = f.Close()
	}
}
