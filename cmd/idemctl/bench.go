package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/bench"
	"github.com/idemctl/idemctl/internal/exitcode"
)

// benchOptions are the flags of `idemctl bench`.
type benchOptions struct {
	bench.Options
	args string
	// workersSet and leaseSet: --workers or --lease was given (on the
	// command line, in the environment or in the config file).
	workersSet, leaseSet bool
}

// Validate turns the raw flags into bench.Options and checks them.
func (o *benchOptions) Validate() error {
	if o.Base != "" && (o.workersSet || o.leaseSet) {
		// They configure the in-process server; an external service has its
		// own, and silently ignoring them would misreport the setup.
		return errors.New("--workers and --lease configure the in-process server and cannot be used with --base " +
			"(set them on the external server; check IDEMCTL_WORKERS, IDEMCTL_LEASE and the config file too)")
	}
	if o.args != "" {
		if !json.Valid([]byte(o.args)) {
			return fmt.Errorf("--args is not valid JSON: %s", o.args)
		}
		o.Options.Args = json.RawMessage(o.args)
	}
	return o.Options.Validate()
}

func newBenchCmd(streams *IOStreams) *cobra.Command {
	opts := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load the service and report throughput, latency and the idempotency invariants",
		Long: `Send -n requests (or run for --duration) at concurrency -c to POST /v1/tool-calls and
report n, wall, rps, p50/p95/p99/max, every HTTP status seen, status0 (no response),
the calls/effects delta of /stats once the service has drained, and the attempt
distribution.

Without --base it starts its own server in-process on a temporary SQLite database
(--workers, --lease; removed afterwards). With --base, --workers and --lease
are refused: the external service has its own. Keys are bench-<runid>-<i>, or one key with
--same-key. --ceiling also runs the same load against a bare HTTP handler and
prints the service's rps as a fraction of it.

Checked: same key → one call and at most one effect (exactly one for charge once
drained); distinct keys → one call per acknowledged key and, for charge and
send_email, one effect each once drained; at least one request acknowledged, and
no answer other than 2xx, 429 or 503 (a 4xx means the bench's requests were
wrong, a 5xx that the service broke: either way the numbers measure nothing).
Any violation prints a FAIL line and exits 1. The checks assume nothing else uses the service during the run.

Progress goes to stderr: a bar on a terminal, otherwise one line every 5s
(requests sent, req/s, queue depth = calls pending or running) during the
load and the drain. See docs/cli.md, "bench".`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			opts.workersSet = c.Flags().Changed("workers")
			opts.leaseSet = c.Flags().Changed("lease")
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runBench(c.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Base, "base", "", "service base URL (default: start an in-process server on a temp database)")
	f.StringVar(&opts.Token, "token", "", "bearer token for a --base server run with --auth-tokens (better: IDEMCTL_TOKEN)")
	f.IntVarP(&opts.N, "requests", "n", bench.DefaultN, "number of requests (ignored with --duration)")
	f.IntVarP(&opts.Concurrency, "concurrency", "c", bench.DefaultConcurrency, "requests in flight")
	f.BoolVar(&opts.SameKey, "same-key", false, "send every request with the same idempotency key")
	f.StringVar(&opts.Tool, "tool", bench.DefaultTool, "tool to call: charge, send_email, sleep, fail, or a tool of the server's --tools file (with --args); its effect is read from GET /v1/tools")
	f.StringVar(&opts.args, "args", "", `tool args as JSON (default per tool, e.g. {"amount":1})`)
	f.DurationVar(&opts.Duration, "duration", 0, fmt.Sprintf("run for this long instead of -n requests (at most %s)", bench.MaxDuration))
	f.DurationVar(&opts.Timeout, "request-timeout", bench.DefaultTimeout, "timeout of each request")
	addDeprecatedAlias(f, "request-timeout", "timeout")
	f.IntVar(&opts.Workers, "workers", bench.DefaultWorkers, "worker pool size of the in-process server (not with --base)")
	f.DurationVar(&opts.Lease, "lease", 0, "lease of the in-process server (default: the server's; not with --base)")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", bench.DefaultDrainTimeout, "after the load, wait for no call to be pending or running; give up when none finished for this long (0: don't wait)")
	f.BoolVar(&opts.Ceiling, "ceiling", false, "also measure a bare HTTP handler under the same load and print the service's share of it")
	f.StringVarP(&opts.Output, "output", "o", bench.FormatTable, "output format: table or json")
	return cmd
}

// runBench runs the load and maps a failed check to exitcode.Failed.
func runBench(ctx context.Context, opts *benchOptions, streams *IOStreams) error {
	o := opts.Options
	if streams.ErrTTY {
		o.Progress = streams.ErrOut // a bar for a person watching
	} else {
		o.ProgressLines = streams.ErrOut // a line now and then for a log
	}
	rep, err := bench.Run(ctx, o, streams.Out)
	if err != nil {
		return err
	}
	if !rep.OK {
		return &ExitError{Code: exitcode.Failed, Err: errors.New("bench: a check failed (see the FAIL lines)")}
	}
	return nil
}
