package fault

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// stopTimeout is how long a server may take to stop cleanly before it is
// killed.
const stopTimeout = 3 * time.Second

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
	logs  []*os.File // the servers' log files
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
		_, _ = p.Stop(stopTimeout)
	}
	for _, f := range e.logs {
		_ = f.Close()
	}
	if e.r.opts.KeepDir {
		e.logf("kept %s (idemctl inspect calls --db %s)", e.dir, e.db)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// pids lists every server process the run started, restarts included.
func (e *env) pids() []int {
	var pids []int
	for _, p := range e.procs {
		pids = append(pids, p.Pids()...)
	}
	return pids
}

// logf prints one "[fault] " narration line.
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
	// tools is --tools, the server's tools file ("": the built-ins only).
	tools string
}

// serverProc is one `idemctl serve` subprocess on the scenario's database,
// run by servertest (which also restarts it on the same address).
type serverProc struct {
	*serveproc.Process
	label string
}

// startServer starts a server on a free loopback port and waits until it is
// ready. Its output goes to <label>.log in the scenario's directory.
func (e *env) startServer(ctx context.Context, o serverOpts) (*serverProc, error) {
	var args []string
	if o.lease > 0 {
		args = append(args, "--lease", o.lease.String())
	}
	if o.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(o.workers))
	}
	if o.tools != "" {
		args = append(args, "--tools", o.tools)
	}
	if o.instanceHost != "" {
		args = append(args, "--instance-host", o.instanceHost)
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, strings.ReplaceAll(o.label, " ", "-")+".log"),
		os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	e.logs = append(e.logs, logf)
	p, err := serveproc.Start(ctx, serveproc.Config{
		Binary:    e.r.binary,
		DB:        e.db,
		Chaos:     o.chaos,
		Args:      args,
		Log:       logf,
		WaitReady: true,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.label, err)
	}
	sp := &serverProc{Process: p, label: o.label}
	e.procs = append(e.procs, sp)
	return sp, nil
}

// client returns a client of base with the runner's attempt timeout, no
// Prefer: wait and a wait of pollTimeout, whose attempts are printed as
// JSON lines (prefixed when prefix is set); opts come after those.
func (e *env) client(base, prefix string, opts ...client.Option) (*client.Client, error) {
	return client.New(base, slices.Concat([]client.Option{
		client.WithAttemptTimeout(e.r.opts.ClientTimeout),
		client.WithPreferWait(0),
		client.WithWaitTimeout(pollTimeout),
		client.WithOnAttempt(func(rec client.AttemptRecord) { e.printJSON(prefix, rec) }),
	}, opts)...)
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
