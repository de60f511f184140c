package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
)

// cancelOptions are the flags of idemctl cancel.
type cancelOptions struct {
	Base  string
	Token string // bearer token; never printed
	Key   string
}

func newCancelCmd(streams *IOStreams) *cobra.Command {
	opts := &cancelOptions{}
	cmd := &cobra.Command{
		Use:   "cancel CALL_ID | --key KEY",
		Short: "Cancel a call: a pending one fails at once, a running one is stopped",
		Long: `Cancel a call (POST /v1/tool-calls/{id}/cancel) and print it as the server
answered, as one JSON line: failed with error code "canceled" if it was pending;
still running with the cancel requested if it was running (poll it to see how it
ends: canceled, or succeeded if the tool finished first). A call that had
already ended is printed too, and the command exits 1. A cancel never removes
an effect that committed.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (opts.Key != "") {
				return errors.New("give either CALL_ID or --key")
			}
			if err := client.CheckBase(opts.Base); err != nil {
				return fmt.Errorf("--base: %w", err)
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return runtimeError(runCancel(cmd.Context(), opts, id, streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.Key, "key", "", "cancel the call recorded under this idempotency key instead of CALL_ID")
	return cmd
}

// runCancel cancels the call with id (or, with id "", the call of
// opts.Key) and prints it. An answer of the server (not found, already
// final) exits 1; a server that cannot be reached is a runtime error.
func runCancel(ctx context.Context, opts *cancelOptions, id string, streams *IOStreams) error {
	c, err := client.New(opts.Base, client.WithToken(opts.Token))
	if err != nil {
		return err
	}
	if id == "" {
		call, err := c.GetByKey(ctx, opts.Key)
		if err != nil {
			return answerError(err)
		}
		id = call.CallID
	}
	call, err := c.Cancel(ctx, id)
	if call.CallID != "" {
		if perr := cliWriteJSONLine(streams.Out, call); perr != nil {
			return perr
		}
	}
	return answerError(err)
}

// answerError maps a client error to the exit status: an answer of the
// server (an *client.APIError: not found, already final, conflict) is a
// negative outcome (exit 1); anything else (unreachable, timeout) is left
// for runtimeError.
func answerError(err error) error {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return &ExitError{Code: exitcode.Failed, Err: err}
	}
	return err
}
