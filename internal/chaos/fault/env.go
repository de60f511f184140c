package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/client"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// readyTimeout bounds how long a freshly started server may take to answer
// /readyz.
const readyTimeout = 15 * time.Second

// env is one self-contained run: a temporary directory with its database,
// the servers started on it, and the proxies in front of them. close undoes
// all of it, also after a failure or a cancelled context.
type env struct {
	r     *Runner
	name  string
	dir   string
	db    string
	out   io.Writer // the runner's locked evidence writer
	procs []*serverProc
	pids  []int // every server process started, restarts included
	stops []func()
}

func (r *Runner) newEnv(name string) (*env, error) {
	dir, err := os.MkdirTemp(r.opts.TempDir, "idemctl-fault-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	return &env{r: r, name: name, dir: dir, db: filepath.Join(dir, "idem.db"), out: r.out}, nil
}

// close stops the proxies and servers and removes the directory (unless the
// runner keeps it, for a look with idemctl inspect).
func (e *env) close() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	for _, p := range e.procs {
		p.kill()
	}
	if e.r.opts.KeepDir {
		e.logf("kept %s (idemctl inspect calls --db %s)", e.dir, e.db)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// logf prints one "[fault]" narration line.
func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.out, "[fault] "+format+"\n", args...)
}

// serverOpts are the serve flags a scenario needs.
type serverOpts struct {
	label   string // "server", "server A", ...
	chaos   bool
	lease   time.Duration // 0: the server's default
	workers int           // 0: the server's default
	// instanceHost is --instance-host, the host part of the server's lease
	// owner ("": derived from this machine).
	instanceHost string
}

// serverProc is one `idemctl serve` subprocess. It can be restarted on the
// same address and database.
type serverProc struct {
	e    *env
	opts serverOpts
	addr string
	base string
	log  string // file receiving the server's stdout and stderr

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	exitErr error
}

// startServer starts a server on a free loopback port and waits until it is
// ready. A port taken between choosing and binding is retried on another.
func (e *env) startServer(ctx context.Context, o serverOpts) (*serverProc, error) {
	var lastErr error
	for try := 0; try < 3; try++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		p := &serverProc{e: e, opts: o, addr: addr, base: "http://" + addr,
			log: filepath.Join(e.dir, strings.ReplaceAll(o.label, " ", "-")+".log")}
		if lastErr = p.start(ctx); lastErr == nil {
			e.procs = append(e.procs, p)
			return p, nil
		}
		p.kill()
	}
	return nil, lastErr
}

// freeAddr asks the kernel for a free loopback port. The port is released
// before the server binds it; startServer retries if another process won it.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// args are the serve command line.
func (p *serverProc) args() []string {
	args := []string{"serve", "--addr", p.addr, "--db", p.e.db}
	if p.opts.chaos {
		args = append(args, "--chaos")
	}
	if p.opts.lease > 0 {
		args = append(args, "--lease", p.opts.lease.String())
	}
	if p.opts.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(p.opts.workers))
	}
	if p.opts.instanceHost != "" {
		args = append(args, "--instance-host", p.opts.instanceHost)
	}
	return args
}

// commandLine is args as a user would type them, for the narration.
func (p *serverProc) commandLine() string {
	return "idemctl " + strings.Join(p.args(), " ")
}

// start launches the process (again, for a restart) and waits for /readyz.
func (p *serverProc) start(ctx context.Context) error {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	// Not CommandContext: the process must outlive the start-up context;
	// env.close ends it.
	cmd := exec.Command(p.e.r.binary, p.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	if err := startChild(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", p.opts.label, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exitErr = cmd, done, nil
	p.e.pids = append(p.e.pids, cmd.Process.Pid)
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return p.waitReady(ctx, done)
}

// cleanEnv is the environment without IDEMCTL_* variables, so a user's
// config or environment cannot change the scenario's servers.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEMCTL_") {
			out = append(out, kv)
		}
	}
	return out
}

// waitReady polls /readyz until it answers 200, the process exits, or the
// deadline passes.
func (p *serverProc) waitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up (%v); its log:\n%s", p.opts.label, p.exitStatus(), p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w; its log:\n%s", p.opts.label, readyTimeout, ctx.Err(), p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// exitStatus describes how the last process ended (nil while running).
func (p *serverProc) exitStatus() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// exitCode is the last process's exit status, -1 if killed by a signal or
// still running.
func (p *serverProc) exitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// pid is the current process id.
func (p *serverProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited returns a channel closed when the current process ends.
func (p *serverProc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// waitExit waits for the current process to end (a crash the scenario
// triggered) up to d.
func (p *serverProc) waitExit(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%s still running after %s", p.opts.label, d)
	}
}

// kill ends the process: TERM, then KILL if it lingers.
func (p *serverProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = terminate(cmd.Process)
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// logTail returns the end of the server's log, for error messages.
func (p *serverProc) logTail() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 2000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(bytes.TrimSpace(data))
}

// client returns a client of base with the runner's attempt timeout, whose
// attempts are printed as JSON lines (prefixed when prefix is set).
func (e *env) client(base, prefix string) *client.Client {
	return &client.Client{
		Base:    base,
		Timeout: e.r.opts.ClientTimeout,
		OnAttempt: func(rec client.AttemptRecord) {
			e.printJSON(prefix, rec)
		},
	}
}

// printJSON prints v as one JSON line, as idemctl call does.
func (e *env) printJSON(prefix string, v any) {
	line, err := jsonLine(v)
	if err != nil {
		line = fmt.Sprintf("(unprintable: %v)", err)
	}
	fmt.Fprintf(e.out, "%s%s\n", prefix, line)
}

// startProxy runs an in-process chaos proxy in front of target, logging its
// decisions as "[proxy]" lines.
func (e *env) startProxy(ctx context.Context, target string, mode chaos.Mode, sel chaos.Selector) (*chaos.Proxy, string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, "", err
	}
	logger := slog.New(slog.NewTextHandler(&linePrefixer{w: e.out, prefix: "[proxy] "}, &slog.HandlerOptions{
		Level: slog.LevelDebug, // the "duplicate delivered" / "dropped reply" lines are evidence
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
				return slog.Attr{} // narration, not a log file: no time or level
			}
			return a
		},
	}))
	p, err := chaos.New(chaos.Options{Target: u, Mode: mode, Select: sel, Log: logger})
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = p.Serve(pctx, ln)
	}()
	e.stops = append(e.stops, func() { cancel(); <-served })
	e.logf("proxy: http://%s → %s, mode %s, %s", ln.Addr(), target, mode, sel)
	return p, "http://" + ln.Addr().String(), nil
}

// linePrefixer prefixes every write (one slog record each) with a tag.
type linePrefixer struct {
	w      io.Writer
	prefix string
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(l.w, l.prefix+string(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// openDB opens the scenario's database read-only, as idemctl inspect does:
// safe while the servers write.
func (e *env) openDB(ctx context.Context) (store.Store, error) {
	st, err := backend.Open(ctx, e.db, store.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("opening %s read-only: %w", e.db, err)
	}
	return st, nil
}

// waitFor re-checks cond every 50ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met after %s", d)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// statusText describes a process end for the narration.
func statusText(code int, err error) string {
	if err == nil {
		return "running"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && code >= 0 {
		return "exit status " + strconv.Itoa(code)
	}
	return err.Error()
}
