package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
)

// pollOptions are the flags and argument of idemctl poll.
type pollOptions struct {
	Base   string
	Token  string // bearer token; never printed
	CallID string
	Key    string
	// Deadline is how long to wait for a final state (--deadline;
	// --timeout is its deprecated alias).
	Deadline time.Duration
}

// Validate checks that exactly one of CALL_ID and --key is given.
func (o *pollOptions) Validate() error {
	if err := client.CheckBase(o.Base); err != nil {
		return fmt.Errorf("--base: %w", err)
	}
	if (o.CallID == "") == (o.Key == "") {
		return errors.New("give exactly one of CALL_ID or --key")
	}
	if o.Deadline <= 0 {
		return fmt.Errorf("--deadline must be positive, got %s", o.Deadline)
	}
	// A key the server could never accept was never recorded: polling for
	// it could only run into the deadline.
	if o.Key != "" {
		if err := client.CheckKey(o.Key); err != nil {
			return fmt.Errorf("--key: %w", err)
		}
	}
	return nil
}

func newPollCmd(streams *IOStreams) *cobra.Command {
	opts := &pollOptions{}
	cmd := &cobra.Command{
		Use:   "poll CALL_ID | --key K",
		Short: "Wait for a call to reach a final state, by id or by idempotency key",
		Long: `Poll a call until it is succeeded or failed, with backoff (50ms doubling to
1s, Retry-After honoured), never past --deadline. Prints the final call as one
JSON line.

--key looks the call up by its idempotency key: for a client whose first
POST timed out before it ever saw a call_id. If the key is still
unknown at the deadline the server may never have received the request:
POST again with the same key, never a new one.

Exit status 1 when the call failed, was not found, or the deadline passed.
See docs/cli.md, "poll", and docs/api.md, "Waiting for the result".`,
		Example: `  idemctl poll c_0123456789abcdef
  idemctl poll --key demo-1 --deadline 10s`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.CallID = args[0]
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runPoll(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.Key, "key", "", "look the call up by idempotency key instead of CALL_ID")
	f.DurationVar(&opts.Deadline, "deadline", defaultPollDeadline, "how long to wait, in all, for the call to become final")
	addDeprecatedAlias(f, "deadline", "timeout")
	return cmd
}

// defaultPollDeadline is poll's --deadline: short, for a person waiting
// at a terminal (the client's own default is for programs).
const defaultPollDeadline = 5 * time.Second

// runPoll waits for the call, prints it and maps its end to the exit status.
func runPoll(ctx context.Context, opts *pollOptions, streams *IOStreams) error {
	c, err := client.New(opts.Base, client.WithToken(opts.Token), client.WithWaitTimeout(opts.Deadline))
	if err != nil {
		return err
	}
	var call client.Call
	if opts.Key != "" {
		call, err = c.WaitByKey(ctx, opts.Key)
	} else {
		call, err = c.Wait(ctx, opts.CallID)
	}
	if err != nil && !errors.Is(err, client.ErrCallFailed) { // a failed call is printed below
		if call.CallID != "" {
			_ = cliWriteJSONLine(streams.Out, call) // the last state seen
		}
		cliWriteErrorLine(streams.Out, err)
		return &ExitError{Code: exitcode.Failed, Err: err}
	}
	if err := cliWriteJSONLine(streams.Out, call); err != nil {
		return err
	}
	return cliCallExit(call)
}
