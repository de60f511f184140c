// Package serveproc runs `idemctl serve` as a real process, for code that
// needs a process boundary: a crash (os.Exit, SIGKILL), a restart on the same
// address and database, several servers at once. It is the one place that
// does so: the fault scenarios use it inside the `idemctl fault` command, and
// tests use it through servertest, which adds building the binary once per
// test process. It does not import the testing package, so the idemctl
// binary does not link it.
//
// Outside tests (idemctl fault), the binary is Self, the running executable,
// and Start runs the server.
package serveproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// MainPackage is the import path of the idemctl command.
const MainPackage = "github.com/idemctl/idemctl/cmd/idemctl"

// ServingPrefix starts the line `idemctl serve` prints once it listens:
// "idemctl serving on http://ADDR (db: ..., workers N, lease L)".
const ServingPrefix = "idemctl serving on "

// StartTimeout bounds how long a start waits for the serving line (and,
// with Config.WaitReady, for /readyz).
const StartTimeout = 20 * time.Second

// DefaultAddr is the --addr a Config without Addr gets: a free loopback port.
const DefaultAddr = "127.0.0.1:0"

// Build compiles the idemctl command into dir and returns the binary's
// path. It runs `go build` from the current directory, which must be inside
// the module (as a test's working directory is).
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "idemctl")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, MainPackage)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", MainPackage, err, out)
	}
	return bin, nil
}

// Self returns the running executable, for a process that is idemctl
// itself (the fault command starts its servers from its own binary). Under
// go test the running executable is the test binary, which has no serve
// command: Self refuses, and tests use Binary.
func Self() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("serveproc: finding the running idemctl executable: %w", err)
	}
	// A test binary (pkg.test) has no serve command. Checked by name, not
	// with testing.Testing, so that the idemctl binary does not link the
	// testing package.
	if strings.HasSuffix(filepath.Base(exe), ".test") {
		return "", errors.New("serveproc: under go test the running executable is not idemctl; use servertest.Binary")
	}
	return exe, nil
}

// Config describes one `idemctl serve` process.
type Config struct {
	// Binary is the idemctl executable (Binary, Self, or a path).
	Binary string
	// Addr is --addr; "" means DefaultAddr. A restart reuses the address
	// the first run bound, so clients keep their base URL.
	Addr string
	// DB is --db; "" leaves it to Args (or serve's default).
	DB string
	// Chaos adds --chaos.
	Chaos bool
	// Args are further serve flags, after the ones above; a later flag
	// overrides an earlier one.
	Args []string
	// Log, if set, receives a copy of everything the process writes
	// (stdout and stderr), line by line, across restarts.
	Log io.Writer
	// WaitReady makes a start also wait for GET /readyz to answer 200, not
	// only for the serving line.
	WaitReady bool
	// Env are KEY=VALUE pairs added to the process's environment, after
	// the caller's IDEMCTL_* variables are dropped (IDEMCTL_FAILPOINTS,
	// say).
	Env []string
}

// Process is a running (or exited) `idemctl serve`, which can be restarted.
type Process struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:40123"; a
	// restart keeps it.
	URL string
	// Cmd is the current run's command. Restart replaces it: read it only
	// while no restart is in progress, or use Pid.
	Cmd *exec.Cmd

	cfg    Config
	addr   string // the bound address, after the first start
	output *syncBuffer

	mu    sync.Mutex
	done  chan struct{} // closed when the current run has exited and been reaped
	state *os.ProcessState
	pids  []int
}

// Start starts `bin serve --addr ADDR [--db DB] [--chaos] args...` and waits
// for its serving line (and /readyz with WaitReady). The process is not
// tied to ctx, which bounds only the start: the caller ends it with Stop or
// Kill. If the start fails, the process is killed and the error carries
// its output.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	if cfg.Binary == "" {
		return nil, errors.New("serveproc: no idemctl binary given")
	}
	p := &Process{cfg: cfg, output: &syncBuffer{}}
	addr := cfg.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	if err := p.start(ctx, addr); err != nil {
		return nil, err
	}
	return p, nil
}

// args is the serve command line for a run on addr.
func (p *Process) args(addr string) []string {
	args := []string{"serve", "--addr", addr}
	if p.cfg.DB != "" {
		args = append(args, "--db", p.cfg.DB)
	}
	if p.cfg.Chaos {
		args = append(args, "--chaos")
	}
	return append(args, p.cfg.Args...)
}

// CommandLine is the current run's command line as a user would type it
// (with the bound address once known), for narration and messages.
func (p *Process) CommandLine() string {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	if addr == "" {
		addr = p.cfg.Addr
		if addr == "" {
			addr = DefaultAddr
		}
	}
	return "idemctl " + strings.Join(p.args(addr), " ")
}

// start runs the process once on addr and waits until it serves.
func (p *Process) start(ctx context.Context, addr string) error {
	full := p.args(addr)
	cmd := exec.Command(p.cfg.Binary, full...) // not CommandContext: the server outlives ctx
	cmd.Env = append(cleanEnv(), p.cfg.Env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := startChild(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", p.cfg.Binary, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.Cmd, p.done, p.state = cmd, done, nil
	p.pids = append(p.pids, cmd.Process.Pid)
	p.mu.Unlock()

	urls := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Text()
			p.output.WriteLine(line)
			if p.cfg.Log != nil {
				_, _ = io.WriteString(p.cfg.Log, line+"\n")
			}
			if !found && strings.HasPrefix(line, ServingPrefix) {
				found = true
				u, _, _ := strings.Cut(strings.TrimPrefix(line, ServingPrefix), " ")
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		// Every line is in the output (and Log) before Done: a caller may
		// close Log once the process has exited.
		<-scanned
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()

	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	fail := func(why string) error {
		p.Kill()
		return fmt.Errorf("idemctl %s %s:\n%s", strings.Join(full, " "), why, p.tail())
	}
	select {
	case u := <-urls:
		if p.URL == "" {
			p.URL = u
		}
		p.mu.Lock()
		p.addr = strings.TrimPrefix(u, "http://")
		p.mu.Unlock()
	case <-done:
		return fail(fmt.Sprintf("exited before serving (%v)", p.State()))
	case <-ctx.Done():
		return fail(fmt.Sprintf("did not print %q: %v", ServingPrefix, context.Cause(ctx)))
	}
	if p.cfg.WaitReady {
		if err := p.waitReady(ctx, done); err != nil {
			return fail(err.Error())
		}
	}
	return nil
}

// waitReady polls /readyz until it answers 200, the process exits, or ctx
// ends.
func (p *Process) waitReady(ctx context.Context, done <-chan struct{}) error {
	hc := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("exited before /readyz answered 200 (%v)", p.State())
		case <-ctx.Done():
			return fmt.Errorf("/readyz not 200: %w", context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restart starts the server again after its process exited (a crash the
// caller provoked, say): same binary, flags and database, and the address
// the first run bound, so URL stays valid. It fails if the process still
// runs.
func (p *Process) Restart(ctx context.Context) error {
	select {
	case <-p.Done():
	default:
		return errors.New("serveproc: restart of a running server")
	}
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	return p.start(ctx, addr)
}

// cleanEnv drops IDEMCTL_* variables so the caller's environment (or an
// idemctl user's) cannot change the flags the server is started with.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEMCTL_") {
			env = append(env, kv)
		}
	}
	return env
}

// Pid is the current run's process id.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Cmd.Process.Pid
}

// Pids lists the process ids of every run, restarts included.
func (p *Process) Pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.pids...)
}

// Done is closed when the current run has exited (and been reaped).
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// State is how the current run ended (its String is "exit status 3",
// "signal: killed", ...), or nil while it runs.
func (p *Process) State() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// ExitCode is the current run's exit status: -1 while it runs or when a
// signal ended it.
func (p *Process) ExitCode() int {
	if st := p.State(); st != nil {
		return st.ExitCode()
	}
	return -1
}

// Stderr returns everything the process wrote so far (stdout and stderr,
// all runs).
func (p *Process) Stderr() string { return p.output.String() }

// tail is the end of the output, for error messages.
func (p *Process) tail() string {
	const max = 2000
	out := strings.TrimSpace(p.output.String())
	if len(out) > max {
		out = "..." + out[len(out)-max:]
	}
	return out
}

// Kill sends SIGKILL (no cleanup of any kind in the process) and waits for
// it to be reaped. A process that already exited is left alone.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done := p.Cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-done
}

// Signal sends sig to the current run (SIGSTOP and SIGCONT freeze and
// thaw it: a pause past its lease). A run that already exited is left alone.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd, done := p.Cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return errors.New("serveproc: the process has exited")
	default:
	}
	return cmd.Process.Signal(sig)
}

// Stop asks the process to shut down cleanly (SIGTERM; a kill where there
// is no such signal) and waits up to timeout for the exit; it returns the
// exit code, or an error if the process did not exit in time (it is then
// killed).
func (p *Process) Stop(timeout time.Duration) (int, error) {
	p.mu.Lock()
	cmd := p.Cmd
	p.mu.Unlock()
	_ = terminate(cmd.Process)
	return p.Wait(timeout)
}

// Wait waits up to timeout for the process to exit by itself and returns its
// exit code (-1 when killed by a signal). On timeout the process is killed
// and an error returned.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.Done():
		return p.ExitCode(), nil
	case <-t.C:
		p.Kill()
		return -1, errors.New("process did not exit within " + timeout.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) WriteLine(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
	b.buf.WriteByte('\n')
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
