package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
)

// callsOptions are the flags of idemctl calls.
type callsOptions struct {
	Base   string
	Token  string // bearer token; never printed
	Status string
	Tool   string
	Code   string
	Limit  int
	After  string
	All    bool
}

func newCallsCmd(streams *IOStreams) *cobra.Command {
	opts := &callsOptions{}
	cmd := &cobra.Command{
		Use:   "calls",
		Short: "List your calls on a server, newest first (GET /v1/tool-calls)",
		Long: `List the calls of the token's principal (all calls without auth), newest
first, one JSON object per line. One page of --limit calls, or every page
with --all; without --all, the cursor of the next page is printed on stderr
as "next: CURSOR" (pass it to --after).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := client.CheckBase(opts.Base); err != nil {
				return fmt.Errorf("--base: %w", err)
			}
			return runtimeError(runCalls(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.Status, "status", "", "only calls in this status: pending, running, succeeded or failed")
	f.StringVar(&opts.Tool, "tool", "", "only calls of this tool")
	f.StringVar(&opts.Code, "code", "", "only calls whose error has this code (e.g. outcome_unknown: calls held for idemctl resolve)")
	f.IntVar(&opts.Limit, "limit", 50, "calls per page (1 to 500)")
	f.StringVar(&opts.After, "after", "", "start after this cursor (the \"next\" of a previous page)")
	f.BoolVar(&opts.All, "all", false, "follow every page to the oldest call")
	return cmd
}

// runCalls prints one page of the principal's calls, or every page with
// --all.
func runCalls(ctx context.Context, opts *callsOptions, streams *IOStreams) error {
	c, err := client.New(opts.Base, client.WithToken(opts.Token))
	if err != nil {
		return err
	}
	lo := client.ListOptions{Status: client.Status(opts.Status), Tool: opts.Tool, Code: opts.Code, Limit: opts.Limit, After: opts.After}
	if opts.All {
		for call, err := range c.List(ctx, lo) {
			if err != nil {
				return answerError(err)
			}
			if err := cliWriteJSONLine(streams.Out, call); err != nil {
				return err
			}
		}
		return nil
	}
	page, err := c.ListPage(ctx, lo)
	if err != nil {
		return answerError(err)
	}
	for _, call := range page.Calls {
		if err := cliWriteJSONLine(streams.Out, call); err != nil {
			return err
		}
	}
	if page.Next == "" {
		return nil
	}
	_, err = fmt.Fprintf(streams.ErrOut, "next: %s\n", page.Next)
	return err
}
