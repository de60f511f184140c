package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/idemctl/idemctl/internal/bench"
)

// benchOptions are the flags of `idemctl bench`.
type benchOptions struct {
	bench.Options
	args string
}

// Validate turns the raw flags into bench.Options and checks them.
func (o *benchOptions) Validate() error {
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
distribution (§12.12).

Without --base it starts its own server in-process on a temporary SQLite database
(--workers, removed afterwards). Keys are bench-<runid>-<i>, or one key with
--same-key. --ceiling also runs the same load against a bare HTTP handler and
prints the service's rps as a fraction of it.

Checked: same key → one call and at most one effect (exactly one for charge once
drained); distinct keys → one call per acknowledged key and, for charge and
send_email, one effect each once drained; at least one request acknowledged, and
no answer other than 2xx, 429 or 503 (a 4xx means the bench's requests were
wrong, a 5xx that the service broke: either way the numbers measure nothing).
Any violation prints a FAIL line and exits 1. The checks assume nothing else uses the service during the run.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			o := opts.Options
			// A progress bar only for a person watching: never in a pipe or a file.
			if f, ok := streams.ErrOut.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				o.Progress = streams.ErrOut
			}
			rep, err := bench.Run(c.Context(), o, streams.Out)
			if err != nil {
				return err
			}
			if !rep.OK {
				return &ExitError{Code: 1, Err: errors.New("bench: a check failed (see the FAIL lines)")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Base, "base", "", "service base URL (default: start an in-process server on a temp database)")
	f.StringVar(&opts.Token, "token", "", "bearer token for a --base server run with --auth-tokens (better: IDEMCTL_TOKEN)")
	f.IntVarP(&opts.N, "requests", "n", bench.DefaultN, "number of requests (ignored with --duration)")
	f.IntVarP(&opts.Concurrency, "concurrency", "c", bench.DefaultConcurrency, "requests in flight")
	f.BoolVar(&opts.SameKey, "same-key", false, "send every request with the same idempotency key")
	f.StringVar(&opts.Tool, "tool", bench.DefaultTool, "tool to call: charge, send_email, sleep, fail")
	f.StringVar(&opts.args, "args", "", `tool args as JSON (default per tool, e.g. {"amount":1})`)
	f.DurationVar(&opts.Duration, "duration", 0, fmt.Sprintf("run for this long instead of -n requests (at most %s)", bench.MaxDuration))
	f.DurationVar(&opts.Timeout, "timeout", bench.DefaultTimeout, "per-request timeout")
	f.IntVar(&opts.Workers, "workers", bench.DefaultWorkers, "worker pool size of the in-process server")
	f.DurationVar(&opts.Lease, "lease", 0, "lease of the in-process server (default: the server's)")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", bench.DefaultDrainTimeout, "after the load, wait for no call to be pending or running; give up when none finished for this long (0: don't wait)")
	f.BoolVar(&opts.Ceiling, "ceiling", false, "also measure a bare HTTP handler under the same load and print the service's share of it")
	f.StringVarP(&opts.Output, "output", "o", bench.FormatTable, "output format: table or json")
	return cmd
}
