package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/netutil"
)

// demoDownstreamOptions are the flags of idemctl demo-downstream.
type demoDownstreamOptions struct {
	Listen      string
	IgnoreKeys  bool
	LoseAnswers float64
	LoseSeed    uint64
	AllowRemote bool
}

// Validate checks the flags: a loopback --listen unless --allow-remote.
func (o *demoDownstreamOptions) Validate() error {
	if o.Listen == "" {
		return errors.New("--listen is required")
	}
	if !(o.LoseAnswers >= 0 && o.LoseAnswers <= 1) { // NaN fails both
		return fmt.Errorf("--lose-answers must be a probability from 0 to 1, got %v", o.LoseAnswers)
	}
	if !o.AllowRemote {
		if err := netutil.CheckLoopback(o.Listen); err != nil {
			return fmt.Errorf("--listen: the demo downstream is a demonstration with an in-memory ledger, "+
				"so it listens on loopback only unless --allow-remote is given: %w", err)
		}
	}
	return nil
}

func newDemoDownstreamCmd(streams *IOStreams) *cobra.Command {
	opts := &demoDownstreamOptions{}
	cmd := &cobra.Command{
		Use:   "demo-downstream",
		Short: "Run a demo downstream API with a ledger that honours Idempotency-Key (for http tools)",
		Long: `Run a small HTTP service that stands for a payment API behind an http tool.
Every POST, PUT, PATCH or DELETE (any path, JSON body) is a charge in an
in-memory ledger, read with GET /ledger. A GET on a path reads the charges
made on it: GET /charges?idempotency_key=K looks one up (200, or 404 when
none was made with K); GET /charges?since=T lists them (RFC 3339 or Unix
seconds), oldest first, in pages of {"data": [...], "next": URL} (no next
on the last page).

A request whose Idempotency-Key was seen before gets the first answer again
(header Idempotent-Replayed: true) and records nothing; the same key with a
different method, path or body is refused with 422 idempotency_key_reused.
--ignore-keys records every request instead: the contrast that shows what a
downstream without keys does when idemctl runs a call twice.
--lose-answers P makes the charge, then closes the connection without an
answer, with probability P (draws seeded by --lose-seed): the lost answer
that makes an outcome unknown.

Loopback only unless --allow-remote. See docs/tools.md, "The demo downstream".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runDemoDownstream(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:9000", "address to listen on (loopback only, unless --allow-remote; port 0 picks a free one)")
	f.BoolVar(&opts.IgnoreKeys, "ignore-keys", false, "record every request, ignoring Idempotency-Key (the contrast)")
	f.Float64Var(&opts.LoseAnswers, "lose-answers", 0, "probability (0 to 1) that a charge is made but its answer lost: the connection closes without one")
	f.Uint64Var(&opts.LoseSeed, "lose-seed", 1, "seed of the --lose-answers draws (the same seed loses the same answers)")
	f.BoolVar(&opts.AllowRemote, "allow-remote", false, "allow a --listen address that is not loopback")
	return cmd
}

// runDemoDownstream serves until ctx is cancelled.
func runDemoDownstream(ctx context.Context, o *demoDownstreamOptions, streams *IOStreams) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", o.Listen, err)
	}
	ds, err := downstream.NewWith(downstream.Options{IgnoreKeys: o.IgnoreKeys, LoseAnswers: o.LoseAnswers, Seed: o.LoseSeed})
	if err != nil {
		_ = ln.Close()
		return err
	}
	mode := "Idempotency-Key honoured"
	if o.IgnoreKeys {
		mode = "Idempotency-Key ignored"
	}
	if o.LoseAnswers > 0 {
		mode += fmt.Sprintf(", answers lost with probability %v", o.LoseAnswers)
	}
	// Scripts and tests read the real address (with port 0) from this line.
	fmt.Fprintf(streams.ErrOut, "idemctl demo-downstream on http://%s (%s; ledger: GET /ledger)\n", ln.Addr(), mode)
	srv := &http.Server{Handler: ds.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
