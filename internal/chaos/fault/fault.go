// Package fault runs idemctl's self-contained fault scenarios: each builds
// its own temporary database, starts the server as a real `idemctl serve`
// process (through servertest; the chaos proxy runs in-process where
// needed), drives the client through the fault, and prints the evidence
// chain — the client's attempt lines, the calls, effects and audit rows read
// back from the database, /stats — and a verdict: PASS, or FAIL naming the
// invariant that broke (docs/lifecycle.md, "Invariants"). The command is
// described in docs/cli.md, "fault".
//
// Where it applies, a scenario also runs its contrast: the same fault with a
// client that takes a new key per retry, which ends with two calls and two
// effects (docs/design.md, "What a retry with a new key does"); for the
// downstream scenario, a downstream that ignores Idempotency-Key, which
// charges twice (docs/tools.md, "The demo downstream"). That is reported as
// the expected demonstration of the bug, neither a pass nor a failure.
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/serveproc"
)

// Verdict is how a scenario ended.
type Verdict string

// The verdicts.
const (
	// Pass: every invariant held.
	Pass Verdict = "PASS"
	// Fail: an invariant broke; Report.Failures says which.
	Fail Verdict = "FAIL"
	// Demo: a contrast run that showed the bug it exists to show.
	Demo Verdict = "DEMO"
	// NotReproduced: a contrast run that did not show the bug (a note,
	// not a failure of the service).
	NotReproduced Verdict = "NOT-REPRODUCED"
)

// Report is the outcome of one scenario run.
type Report struct {
	// Scenario is the scenario's name (drop-response, crash, ...).
	Scenario string
	// Verdict is PASS or FAIL (DEMO / NOT-REPRODUCED for a contrast).
	Verdict Verdict
	// Failures lists the broken invariants, one sentence each.
	Failures []string
	// Calls and Effects are the database's counts at the end; ByStatus the
	// calls per status.
	Calls, Effects int64
	ByStatus       map[string]int64
	// CallID, Status and Attempt describe the scenario's logical call at
	// the end (attempt = how many times it was claimed).
	CallID  string
	Status  string
	Attempt int64
	// Fenced and Recovered count the audit's fenced and recover rows.
	Fenced, Recovered int
	// Attempts are the client's attempt lines (of all clients).
	Attempts int
	// Charges is the demo downstream's ledger count at the end (the
	// downstream scenario only; 0 elsewhere).
	Charges int
	// Contrast is the scenario's contrast run, if any.
	Contrast *Report
	// PIDs are the server processes the scenario started (restarts
	// included); all are gone when the run returns.
	PIDs []int
	// Elapsed is the scenario's wall time.
	Elapsed time.Duration

	demo string // what a DEMO verdict demonstrated; "" for the new-key contrast
}

// Failed reports whether the scenario (not its contrast) broke an invariant.
func (r Report) Failed() bool { return r.Verdict == Fail }

// Options configure a Runner.
type Options struct {
	// Binary is the idemctl executable started as the server; "" means
	// this process's own executable (serveproc.Self), which is right for
	// the idemctl command; tests pass serveproc.Binary.
	Binary string
	// Out receives the narration and evidence; nil discards it.
	Out io.Writer
	// ClientTimeout is the client's per-attempt timeout; zero means 1s,
	// the default of idemctl call.
	ClientTimeout time.Duration
	// Concurrency is the number of clients of the concurrent scenario;
	// zero means 20.
	Concurrency int
	// NoContrast skips the contrast runs (a new key per retry; a
	// downstream that ignores Idempotency-Key).
	NoContrast bool
	// KeepDir keeps each scenario's temporary directory (database and
	// server logs) instead of removing it.
	KeepDir bool
	// TempDir is where the scenario directories go; "" means os.TempDir.
	TempDir string
}

// Runner runs scenarios. One Runner runs one scenario at a time.
type Runner struct {
	opts   Options
	binary string
	out    io.Writer // serialized: proxy, clients and narration write at once
}

// New returns a Runner for opts.
func New(opts Options) (*Runner, error) {
	if opts.ClientTimeout < 0 || opts.Concurrency < 0 {
		return nil, errors.New("fault: client timeout and concurrency must not be negative")
	}
	if opts.ClientTimeout == 0 {
		opts.ClientTimeout = time.Second
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 20
	}
	bin := opts.Binary
	if bin == "" {
		exe, err := serveproc.Self()
		if err != nil {
			return nil, fmt.Errorf("fault: %w", err)
		}
		bin = exe
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("fault: idemctl binary: %w", err)
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	return &Runner{opts: opts, binary: bin, out: &lockedWriter{w: out}}, nil
}

// watchOutput returns ctx cancelled on the first failed write of the
// evidence, and a func to call when the run is over.
func (r *Runner) watchOutput(ctx context.Context) (context.Context, func()) {
	if lw, ok := r.out.(*lockedWriter); ok {
		return lw.watch(ctx)
	}
	return ctx, func() {}
}

// lockedWriter serializes writes, so lines from the proxy, many clients
// and the narration never interleave mid-line. The first write error (the
// reader went away: `idemctl fault --all | head`) cancels the run, so the
// scenario stops and cleans up instead of running on unseen.
type lockedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	err    error
	cancel context.CancelCauseFunc // set while a run is in progress
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.w.Write(p)
	if err != nil {
		l.err = fmt.Errorf("writing the evidence: %w", err)
		if l.cancel != nil {
			l.cancel(l.err)
		}
	}
	return n, err
}

// watch makes write errors cancel ctx's run; the returned stop undoes it.
func (l *lockedWriter) watch(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	l.cancel = cancel
	if l.err != nil {
		cancel(l.err)
	}
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		l.cancel = nil
		l.mu.Unlock()
		cancel(nil)
	}
}

// scenario is one fault scenario.
type scenario struct {
	name  string
	title string   // the headline
	plan  []string // what it does, for --dry-run
	run   func(ctx context.Context, e *env, rep *Report) error
	// contrast, if set, runs the same fault with the safeguard taken away
	// (by default: a client that takes a new key per retry).
	contrast func(ctx context.Context, e *env, rep *Report) error
	// contrastTitle and contrastPlan describe a contrast other than the
	// new-key one ("" for that).
	contrastTitle, contrastPlan string
}

// scenarios in the order --all runs them.
var scenarios = []scenario{
	dropResponse,
	crashAfterCommit,
	concurrent,
	crashBeforeCommit,
	leaseExpiry,
	duplicateRequest,
	downstreamScenario,
	mcpUpstreamScenario,
	unknownOutcomeScenario,
}

// Names lists the scenarios in the order All runs them.
func Names() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}

func lookup(name string) (scenario, error) {
	for _, s := range scenarios {
		if s.name == name {
			return s, nil
		}
	}
	return scenario{}, fmt.Errorf("fault: unknown scenario %q (known: %s)", name, strings.Join(Names(), ", "))
}

// DryRun prints the plan of each named scenario (all when names is empty)
// and runs nothing.
func DryRun(w io.Writer, names ...string) error {
	if len(names) == 0 {
		names = Names()
	}
	for i, name := range names {
		s, err := lookup(name)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "[fault] --%s: %s\n", s.name, s.title)
		for j, step := range s.plan {
			fmt.Fprintf(w, "  %d. %s\n", j+1, step)
		}
		if s.contrast != nil {
			fmt.Fprintf(w, "  then, unless --no-contrast: %s\n", s.contrastPlanLine())
		}
	}
	fmt.Fprintln(w, "\n(dry run: nothing was started)")
	return nil
}

// Run runs the named scenarios in order and returns their reports. An
// error means a scenario could not be carried out (the server did not
// start, the context was cancelled); broken invariants are not errors but
// FAIL verdicts in the reports.
func (r *Runner) Run(ctx context.Context, names ...string) ([]Report, error) {
	var reports []Report
	for _, name := range names {
		rep, err := r.RunScenario(ctx, name)
		reports = append(reports, rep)
		if err != nil {
			return reports, err
		}
	}
	if len(reports) > 1 {
		r.summary(reports)
	}
	return reports, nil
}

// RunScenario runs one scenario, then its contrast unless disabled.
func (r *Runner) RunScenario(ctx context.Context, name string) (Report, error) {
	s, err := lookup(name)
	if err != nil {
		return Report{}, err
	}
	ctx, done := r.watchOutput(ctx)
	defer done()
	rep, err := r.runOnce(ctx, s.name, s.title, s.run)
	if err != nil {
		return rep, err
	}
	if s.contrast != nil && !r.opts.NoContrast {
		title := s.contrastTitle
		if title == "" {
			title = "contrast: the same fault, but the client takes a new key per retry (--new-key-on-retry)"
		}
		c, err := r.runOnce(ctx, s.name+" (contrast)", title, s.contrast)
		rep.Contrast = &c
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// contrastPlanLine is the contrast's --dry-run line.
func (s scenario) contrastPlanLine() string {
	if s.contrastPlan != "" {
		return s.contrastPlan
	}
	return "the same fault with --new-key-on-retry on a fresh database, expected calls=2 effects=2"
}

// runOnce runs one body in a fresh environment and prints its verdict.
func (r *Runner) runOnce(ctx context.Context, name, title string, body func(context.Context, *env, *Report) error) (rep Report, err error) {
	start := time.Now()
	rep = Report{Scenario: name}
	fmt.Fprintf(r.out, "\n=== %s ===\n", name)
	e, err := r.newEnv(strings.Fields(name)[0])
	if err != nil {
		return rep, err
	}
	defer func() {
		e.close()
		rep.PIDs = e.pids()
	}()
	e.logf("%s", title)
	e.logf("workdir %s", e.dir)
	err = body(ctx, e, &rep)
	rep.Elapsed = time.Since(start)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && errors.Is(err, ctx.Err()) {
			err = cause // say why the run was cut short (Ctrl-C, output closed)
		}
		return rep, fmt.Errorf("fault %s: %w", name, err)
	}
	if rep.Verdict == "" {
		rep.Verdict = Pass
		if len(rep.Failures) > 0 {
			rep.Verdict = Fail
		}
	}
	r.verdictLine(rep)
	return rep, nil
}

// verdictLine prints the scenario's last line.
func (r *Runner) verdictLine(rep Report) {
	counts := fmt.Sprintf("calls=%d effects=%d", rep.Calls, rep.Effects)
	if rep.Scenario == downstreamName || strings.HasPrefix(rep.Scenario, downstreamName+" ") ||
		rep.Scenario == unknownName || strings.HasPrefix(rep.Scenario, unknownName+" ") {
		counts += fmt.Sprintf(" downstream charges=%d", rep.Charges)
	}
	if rep.Scenario == mcpUpstreamName || strings.HasPrefix(rep.Scenario, mcpUpstreamName+" ") {
		counts += fmt.Sprintf(" upstream receipts=%d", rep.Charges)
	}
	switch rep.Verdict {
	case Pass:
		fmt.Fprintf(r.out, "PASS %s: %s, call %s %s after %d claim(s)\n", rep.Scenario, counts, rep.CallID, rep.Status, rep.Attempt)
	case Fail:
		fmt.Fprintf(r.out, "FAIL: %s\n", strings.Join(rep.Failures, "; "))
		fmt.Fprintf(r.out, "FAIL %s: %s\n", rep.Scenario, counts)
	case Demo:
		demo := rep.demo
		if demo == "" {
			demo = "a retry with a new key is a new logical call, and charges again"
		}
		fmt.Fprintf(r.out, "DEMO %s: %s — expected demonstration of the bug: %s\n", rep.Scenario, counts, demo)
	case NotReproduced:
		fmt.Fprintf(r.out, "NOTE %s: %s — the contrast did not reproduce the bug (%s)\n", rep.Scenario, counts, strings.Join(rep.Failures, "; "))
	}
}

// summary prints one line per scenario after several ran.
func (r *Runner) summary(reports []Report) {
	fmt.Fprintf(r.out, "\n=== summary ===\n")
	for _, rep := range reports {
		line := fmt.Sprintf("%-4s %-20s calls=%d effects=%d", rep.Verdict, rep.Scenario, rep.Calls, rep.Effects)
		if rep.Scenario == downstreamName || rep.Scenario == unknownName {
			line += fmt.Sprintf(" charges=%d", rep.Charges)
		}
		if c := rep.Contrast; c != nil {
			line += fmt.Sprintf("   contrast %s calls=%d effects=%d", c.Verdict, c.Calls, c.Effects)
			if rep.Scenario == downstreamName || rep.Scenario == unknownName {
				line += fmt.Sprintf(" charges=%d", c.Charges)
			}
		}
		fmt.Fprintln(r.out, line)
	}
}
