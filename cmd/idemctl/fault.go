package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/chaos/fault"
	"github.com/idemctl/idemctl/internal/exitcode"
)

// faultOptions are the flags of idemctl fault.
type faultOptions struct {
	DryRun      bool
	All         bool
	Selected    map[string]*bool // one flag per scenario, by name
	NoContrast  bool
	Keep        bool
	Binary      string
	Timeout     time.Duration
	Concurrency int

	names []string // the scenarios to run, in fault.Names order
}

// Validate resolves the scenario flags into names.
func (o *faultOptions) Validate() error {
	o.names = nil
	for _, name := range fault.Names() {
		if o.All || *o.Selected[name] {
			o.names = append(o.names, name)
		}
	}
	if len(o.names) == 0 && !o.DryRun {
		return fmt.Errorf("choose a scenario (--%s) or --all; --dry-run shows the plans",
			strings.Join(fault.Names(), ", --"))
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--attempt-timeout must be positive, got %s", o.Timeout)
	}
	if o.Concurrency < 1 {
		return fmt.Errorf("--concurrency must be at least 1, got %d", o.Concurrency)
	}
	return nil
}

func newFaultCmd(streams *IOStreams) *cobra.Command {
	opts := &faultOptions{Selected: map[string]*bool{}}
	cmd := &cobra.Command{
		Use:   "fault",
		Short: "Run self-contained fault scenarios and print the evidence and a verdict",
		Long: `Run fault scenarios: each makes its own temporary database, starts
the server (this same binary, "serve") on a free loopback port, the chaos proxy
where needed, drives the client through the fault, and prints the evidence
chain: the client's attempt lines, the calls, effects, audit and dupes read
back from the database, /stats, and a verdict line, PASS or FAIL naming the
invariant that broke. Everything is cleaned up afterwards, also on Ctrl-C.

  --drop-response        the proxy drops the first reply; same-key retry
  --crash                the server dies right after commit; restart; retry
  --concurrent           many clients send the same key at once
  --crash-before-commit  the server dies after the tool, before commit
  --lease-expiry         a worker paused past its lease; another server commits, the stale commit is fenced
  --duplicate-request    the proxy delivers the request twice
  --downstream           an http tool charges the demo downstream, the server
                         dies before commit; restart; the downstream charges once
  --mcp-upstream         an mcp tool's upstream (the demo MCP server) loses its
                         answer after the effect; idemctl calls again under the
                         same key; the upstream sends one receipt

Where it applies, a contrast follows — the expected demonstration of the
bug, neither a pass nor a failure: drop-response with --new-key-on-retry
ends with two calls and two charges; downstream against a downstream that
ignores Idempotency-Key ends with one call but two charges in its ledger;
mcp-upstream against an MCP server that ignores keys, with two receipts.

Exit status 1 when any scenario broke an invariant, 2 for a usage error. See
docs/cli.md, "fault".`,
		Example: `  idemctl fault --dry-run
  idemctl fault --drop-response
  idemctl fault --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return &ExitError{Code: exitcode.Usage, Err: err}
			}
			return runtimeError(runFault(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.DryRun, "dry-run", false, "print the plan of the chosen scenarios (all if none) and run nothing")
	for _, name := range fault.Names() {
		opts.Selected[name] = f.Bool(name, false, "run the "+name+" scenario")
	}
	f.BoolVar(&opts.All, "all", false, "run every scenario")
	f.BoolVar(&opts.NoContrast, "no-contrast", false, "skip the contrast runs (new key per retry; a downstream ignoring keys)")
	f.BoolVar(&opts.Keep, "keep", false, "keep each scenario's temp directory (database, server logs) for idemctl inspect")
	f.StringVar(&opts.Binary, "binary", "", "idemctl binary to start as the server (default: this executable)")
	f.DurationVar(&opts.Timeout, "attempt-timeout", time.Second, "the client's timeout for one attempt")
	addDeprecatedAlias(f, "attempt-timeout", "timeout")
	f.IntVar(&opts.Concurrency, "concurrency", 20, "clients of the concurrent scenario")
	return cmd
}

// runFault prints the plans (--dry-run) or runs the chosen scenarios; a
// broken invariant is exit status exitcode.Failed.
func runFault(ctx context.Context, opts *faultOptions, streams *IOStreams) error {
	if opts.DryRun {
		return fault.DryRun(streams.Out, opts.names...)
	}
	r, err := fault.New(fault.Options{
		Binary:        opts.Binary,
		Out:           streams.Out,
		ClientTimeout: opts.Timeout,
		Concurrency:   opts.Concurrency,
		NoContrast:    opts.NoContrast,
		KeepDir:       opts.Keep,
	})
	if err != nil {
		return err
	}
	// A closed stdout (`idemctl fault --all | head`) must not kill the
	// process outright with SIGPIPE and orphan its servers: with the
	// signal ignored the write fails, and the runner stops and cleans up.
	signal.Ignore(syscall.SIGPIPE)
	defer signal.Reset(syscall.SIGPIPE)
	reports, err := r.Run(ctx, opts.names...)
	if err != nil {
		return err
	}
	var failed []string
	for _, rep := range reports {
		if rep.Failed() {
			failed = append(failed, rep.Scenario)
		}
	}
	if len(failed) > 0 {
		return &ExitError{Code: exitcode.Failed, Err: errors.New("invariant broken in: " + strings.Join(failed, ", "))}
	}
	return nil
}
