package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/chaos"
)

// proxyOptions are the flags of idemctl proxy.
type proxyOptions struct {
	Listen   string
	Target   string
	Mode     string
	First    int64
	Every    int64
	Prob     float64
	Delay    time.Duration
	DropHold time.Duration

	selectorsSet []string // which of --first/--every/--prob were given
	chaos        chaos.Options
}

// Validate checks the flags (one selector at most) and builds the proxy's
// options.
func (o *proxyOptions) Validate() error {
	if o.Listen == "" {
		return errors.New("--listen is required")
	}
	target, err := url.Parse(o.Target)
	if err != nil {
		return fmt.Errorf("--target: %w", err)
	}
	mode, err := chaos.ParseMode(o.Mode)
	if err != nil {
		return fmt.Errorf("--mode: %w", err)
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
		return fmt.Errorf("give at most one of --first, --every, --prob (got --%s)", strings.Join(o.selectorsSet, ", --"))
	}
	o.chaos = chaos.Options{Target: target, Mode: mode, Select: sel, Delay: o.Delay, DropHold: o.DropHold}
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
                     client times out ("timed out", as in §12.11.3) or
                     --drop-hold passes, then closed without a byte
  delay-response     forward, then hold the reply for --delay
  duplicate-request  deliver the request twice at once (body buffered up to
                     1 MiB, larger gets 413), return the first reply

One log line per request on stderr: its number, method, path, key, action.
An unreachable target answers 503 unavailable with Retry-After.`,
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
			if err := opts.Validate(); err != nil {
				return err
			}
			return runProxy(cmd, opts, streams)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:8082", "address to listen on")
	f.StringVar(&opts.Target, "target", "http://127.0.0.1:8081", "server base URL to forward to")
	f.StringVar(&opts.Mode, "mode", string(chaos.ModePass), "pass, drop-response, delay-response or duplicate-request")
	f.Int64Var(&opts.First, "first", 0, "apply the mode to the first N requests only")
	f.Int64Var(&opts.Every, "every", 0, "apply the mode to every Nth request")
	f.Float64Var(&opts.Prob, "prob", 0, "apply the mode to each request with probability P")
	f.DurationVar(&opts.Delay, "delay", chaos.DefaultDelay, "delay-response: how long to hold the reply")
	f.DurationVar(&opts.DropHold, "drop-hold", chaos.DefaultDropHold, "drop-response: longest hold before hanging up")
	return cmd
}

func runProxy(cmd *cobra.Command, opts *proxyOptions, streams *IOStreams) error {
	o := opts.chaos
	o.Log = slog.New(slog.NewTextHandler(streams.ErrOut, nil))
	p, err := chaos.New(o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	o.Log.Info("proxy listening", "addr", ln.Addr().String(), "target", o.Target.String(),
		"mode", string(o.Mode), "select", o.Select.String())
	return p.Serve(cmd.Context(), ln)
}
