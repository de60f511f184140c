package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/demomcp"
	"github.com/idemctl/idemctl/internal/netutil"
)

// demoMCPOptions are the flags of idemctl demo-mcp.
type demoMCPOptions struct {
	Listen      string
	IgnoreKeys  bool
	AllowRemote bool
}

// Validate checks the flags: a loopback --listen unless --allow-remote.
func (o *demoMCPOptions) Validate() error {
	if o.Listen == "" {
		return errors.New("--listen is required")
	}
	if !o.AllowRemote {
		if err := netutil.CheckLoopback(o.Listen); err != nil {
			return fmt.Errorf("--listen: the demo MCP server is a demonstration with an in-memory ledger, "+
				"so it listens on loopback only unless --allow-remote is given: %w", err)
		}
	}
	return nil
}

func newDemoMCPCmd(streams *IOStreams) *cobra.Command {
	opts := &demoMCPOptions{}
	cmd := &cobra.Command{
		Use:   "demo-mcp",
		Short: "Run a demo MCP server whose send_receipt tool honours idempotency keys (for kind: mcp entries)",
		Long: `Run a small MCP server (streamable HTTP at /mcp) that stands for a
side-effecting tool server behind a kind: mcp entry of the tools file. Its
tool send_receipt records a receipt in an in-memory ledger, read with
GET /ledger, once per idempotency key: the key idemctl sends in
params._meta["io.idemctl/idempotency-key"] (or the Idempotency-Key header).
A repeated key answers with the first receipt. --ignore-keys records every
call instead: the contrast that shows what an MCP server without keys does
when a call runs twice. Its other tools: refuse (answers isError) and sleep.

Loopback only unless --allow-remote. See docs/tools.md, "The demo MCP server".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runDemoMCP(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:9100", "address to listen on (loopback only, unless --allow-remote; port 0 picks a free one)")
	f.BoolVar(&opts.IgnoreKeys, "ignore-keys", false, "record every call, ignoring idempotency keys (the contrast)")
	f.BoolVar(&opts.AllowRemote, "allow-remote", false, "allow a --listen address that is not loopback")
	return cmd
}

// runDemoMCP serves until ctx is cancelled.
func runDemoMCP(ctx context.Context, o *demoMCPOptions, streams *IOStreams) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", o.Listen, err)
	}
	mode := "idempotency keys honoured"
	if o.IgnoreKeys {
		mode = "idempotency keys ignored"
	}
	// Scripts and tests read the real address (with port 0) from this line.
	fmt.Fprintf(streams.ErrOut, "idemctl demo-mcp on http://%s/mcp (%s; ledger: GET /ledger)\n", ln.Addr(), mode)
	srv := &http.Server{Handler: demomcp.New(o.IgnoreKeys).Handler(), ReadHeaderTimeout: 10 * time.Second}
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
