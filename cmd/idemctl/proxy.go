package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/netutil"
)

// proxyOptions are the flags of idemctl proxy.
type proxyOptions struct {
	Listen      string
	AllowRemote bool
	Target      string
	Mode        string
	First       int64
	Every       int64
	Prob        float64
	Delay       time.Duration
	DropHold    time.Duration
	LogFormat   string
	LogLevel    string

	selectorsSet []string // which of --first/--every/--prob were given
	delaySet     bool     // --delay was given
	dropHoldSet  bool     // --drop-hold was given
	level        slog.Level
	chaos        chaos.Options
}

// Validate checks the flags (one selector at most, --delay and --drop-hold
// only with the mode they tune, a loopback --listen unless --allow-remote)
// and builds the proxy's options.
func (o *proxyOptions) Validate() error {
	var errs []error
	if o.Listen == "" {
		errs = append(errs, errors.New("--listen is required"))
	} else if !o.AllowRemote {
		if err := netutil.CheckLoopback(o.Listen); err != nil {
			errs = append(errs, fmt.Errorf("--listen: the proxy is a test tool and forwards the chaos hooks of a --chaos server, "+
				"so it listens on loopback only unless --allow-remote is given: %w", err))
		}
	}
	target, err := url.Parse(o.Target)
	if err != nil {
		errs = append(errs, fmt.Errorf("--target: %w", err))
	}
	mode, err := chaos.ParseMode(o.Mode)
	if err != nil {
		errs = append(errs, fmt.Errorf("--mode: %w", err))
	}
	if err == nil && o.delaySet && mode != chaos.ModeDelayResponse {
		errs = append(errs, fmt.Errorf("--delay applies to --mode %s only, not %s", chaos.ModeDelayResponse, mode))
	}
	if err == nil && o.dropHoldSet && mode != chaos.ModeDropResponse {
		errs = append(errs, fmt.Errorf("--drop-hold applies to --mode %s only, not %s", chaos.ModeDropResponse, mode))
	}
	sel := chaos.All()
	switch len(o.selectorsSet) {
	case 0:
	case 1:
		switch o.selectorsSet[0] {
		case "first":
			sel = chaos.First(o.First)
		case "every":
			sel = chaos.Every(o.Every)
		case "prob":
			sel = chaos.Prob(o.Prob)
		}
	default:
		errs = append(errs, fmt.Errorf("give at most one of --first, --every, --prob (got --%s)", strings.Join(o.selectorsSet, ", --")))
	}
	level, logErrs := checkLogFlags(o.LogFormat, o.LogLevel)
	o.level = level
	errs = append(errs, logErrs...)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	o.chaos = chaos.Options{Target: target, Mode: mode, Select: sel, Delay: o.Delay, DropHold: o.DropHold,
		AllowRemote: o.AllowRemote}
	return o.chaos.Validate()
}

func newProxyCmd(streams *IOStreams) *cobra.Command {
	opts := &proxyOptions{}
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run a fault-injecting HTTP proxy in front of the server",
		Long: `Forward requests from --listen to --target, applying --mode to the requests
picked by --first N (requests 1..N), --every N (N, 2N, ...) or --prob P; by
default every request. The others pass.

  pass               forward and stream the reply back
  drop-response      forward, read the whole reply (the server acted), then give
                     the client nothing: the connection is held open until the
                     client times out ("timed out") or --drop-hold passes, then
                     closed without a byte
  delay-response     forward, then hold the reply for --delay
  duplicate-request  deliver the request twice at once (body buffered up to
                     1 MiB, larger gets 413), return the first reply

--delay is refused with any mode but delay-response, --drop-hold with any but
drop-response.

The proxy is a test tool: it listens on loopback addresses only, unless
--allow-remote is given. In front of a --chaos server it forwards the chaos
hooks (_crash_after_commit, ...), which the server accepts only because it
listens on loopback itself.

Logs go to stderr (--log-format, --log-level as for serve). At info: one line
per request (its number, method, path, key, action), plus "proxy dropped
reply" and "proxy duplicate delivered" lines for the faults. An unreachable
target answers 503 unavailable with Retry-After. See docs/cli.md, "proxy".`,
		Example: `  idemctl proxy --mode drop-response --first 1
  idemctl proxy --listen 127.0.0.1:8082 --mode duplicate-request --every 2
  idemctl call --base http://127.0.0.1:8082 --key drop-1 --amount 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"first", "every", "prob"} {
				if cmd.Flags().Changed(name) {
					opts.selectorsSet = append(opts.selectorsSet, name)
				}
			}
			opts.delaySet = cmd.Flags().Changed("delay")
			opts.dropHoldSet = cmd.Flags().Changed("drop-hold")
			if err := opts.Validate(); err != nil {
				return &ExitError{Code: exitcode.Usage, Err: err}
			}
			return runtimeError(runProxy(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:8082", "address to listen on (loopback only, unless --allow-remote)")
	f.BoolVar(&opts.AllowRemote, "allow-remote", false, "allow a --listen address that is not loopback")
	f.StringVar(&opts.Target, "target", "http://127.0.0.1:8081", "server base URL to forward to")
	f.StringVar(&opts.Mode, "mode", string(chaos.ModePass), "pass, drop-response, delay-response or duplicate-request")
	f.Int64Var(&opts.First, "first", 0, "apply the mode to the first N requests only")
	f.Int64Var(&opts.Every, "every", 0, "apply the mode to every Nth request")
	f.Float64Var(&opts.Prob, "prob", 0, "apply the mode to each request with probability P")
	f.DurationVar(&opts.Delay, "delay", chaos.DefaultDelay, "delay-response only: how long to hold the reply")
	f.DurationVar(&opts.DropHold, "drop-hold", chaos.DefaultDropHold, "drop-response only: longest hold before hanging up")
	addLogFlags(f, &opts.LogFormat, &opts.LogLevel)
	return cmd
}

// runProxy listens on --listen and serves until ctx is cancelled.
func runProxy(ctx context.Context, opts *proxyOptions, streams *IOStreams) error {
	o := opts.chaos
	o.Log = newLogger(streams.ErrOut, opts.LogFormat, opts.level)
	p, err := chaos.New(o)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", opts.Listen, err)
	}
	o.Log.Info("proxy listening", "addr", ln.Addr().String(), "target", o.Target.String(),
		"mode", string(o.Mode), "select", o.Select.String())
	return p.Serve(ctx, ln)
}
