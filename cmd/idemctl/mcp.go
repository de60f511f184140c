package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/mcpdoor/remote"
)

// mcpOptions are the flags of idemctl mcp.
type mcpOptions struct {
	Base  string
	Token string // bearer token; never printed
	Wait  time.Duration
}

// Validate checks the flags.
func (o *mcpOptions) Validate() error {
	if err := client.CheckBase(o.Base); err != nil {
		return fmt.Errorf("--base: %w", err)
	}
	if o.Wait <= 0 {
		return fmt.Errorf("--wait must be positive, got %s", o.Wait)
	}
	return nil
}

func newMCPCmd(streams *IOStreams) *cobra.Command {
	opts := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Run an MCP server on stdio that forwards tool calls to an idemctl server",
		Long: `Run a Model Context Protocol server on stdin/stdout, for agents that launch
a command. Its tools are the --base server's tools (GET /v1/tools) plus
idemctl_get_call and idemctl_list_calls; every tools/call is a POST
/v1/tool-calls under the call's idempotency key (params._meta
"io.idemctl/idempotency-key", or the idempotency_key argument), held up to
--wait for the result. A tool with effects is refused without a key.

The same door is served by idemctl serve at /mcp (streamable HTTP).
See docs/mcp.md and docs/cli.md, "mcp".`,
		Example: `  idemctl mcp --base http://127.0.0.1:8081
  IDEMCTL_TOKEN=... idemctl mcp --base https://idem.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runMCP(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.DurationVar(&opts.Wait, "wait", mcpdoor.DefaultWait, "how long a tools/call waits for the call to be final before answering \"still running\"")
	return cmd
}

// runMCP serves MCP on the streams until the client closes stdin or ctx
// ends.
func runMCP(ctx context.Context, opts *mcpOptions, streams *IOStreams) error {
	c, err := client.New(opts.Base, client.WithToken(opts.Token))
	if err != nil {
		return err
	}
	srv, err := mcpdoor.New(ctx, remote.Caller{Client: c}, mcpdoor.Options{Wait: opts.Wait, Version: buildVersion()})
	if err != nil {
		return err
	}
	err = srv.Run(ctx, &mcp.IOTransport{Reader: nopReadCloser{streams.In}, Writer: nopWriteCloser{streams.Out}})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil // SIGINT/SIGTERM, or the client closed stdin: a normal end
	}
	return err
}

// nopReadCloser and nopWriteCloser let the SDK "close" the command's
// streams without closing the process's stdin and stdout.
type nopReadCloser struct{ io.Reader }

func (nopReadCloser) Close() error { return nil }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
