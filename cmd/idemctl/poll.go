package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/client"
)

// pollOptions are the flags and argument of idemctl poll.
type pollOptions struct {
	Base    string
	Token   string // bearer token; never printed
	CallID  string
	Key     string
	Timeout time.Duration
}

// Validate checks that exactly one of CALL_ID and --key is given.
func (o *pollOptions) Validate() error {
	if err := client.CheckBase(o.Base); err != nil {
		return fmt.Errorf("--base: %w", err)
	}
	if (o.CallID == "") == (o.Key == "") {
		return errors.New("give exactly one of CALL_ID or --key")
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	return nil
}

func newPollCmd(streams *IOStreams) *cobra.Command {
	opts := &pollOptions{}
	cmd := &cobra.Command{
		Use:   "poll CALL_ID | --key K",
		Short: "Wait for a call to reach a final state, by id or by idempotency key",
		Long: `Poll a call until it is succeeded or failed, with backoff (50ms doubling to
1s, Retry-After honoured), never past --timeout. Prints the final call as one
JSON line.

--key looks the call up by its idempotency key: for a client whose first
POST timed out before it ever saw a call_id. If the key is still
unknown at the deadline the server may never have received the request:
POST again with the same key, never a new one.

Exit status 1 when the call failed, was not found, or the deadline passed.`,
		Example: `  idemctl poll c_0123456789abcdef
  idemctl poll --key demo-1 --timeout 10s`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.CallID = args[0]
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			return runPoll(cmd, opts, streams)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Base, "base", "http://127.0.0.1:8081", "server base URL")
	f.StringVar(&opts.Token, "token", "", "bearer token for a server run with --auth-tokens (better: IDEMCTL_TOKEN, which no process listing shows)")
	f.StringVar(&opts.Key, "key", "", "look the call up by idempotency key instead of CALL_ID")
	f.DurationVar(&opts.Timeout, "timeout", client.DefaultPollTimeout, "deadline for the call to become final")
	return cmd
}

func runPoll(cmd *cobra.Command, opts *pollOptions, streams *IOStreams) error {
	c := &client.Client{Base: opts.Base, HTTP: client.WithToken(nil, opts.Token)}
	var (
		call client.Call
		err  error
	)
	if opts.Key != "" {
		call, err = c.PollByKey(cmd.Context(), opts.Key, opts.Timeout)
	} else {
		call, err = c.Poll(cmd.Context(), opts.CallID, opts.Timeout)
	}
	if err != nil {
		if call.CallID != "" {
			_ = cliWriteJSONLine(streams.Out, call) // the last state seen
		}
		cliWriteErrorLine(streams.Out, err)
		return &ExitError{Code: 1, Err: err}
	}
	if err := cliWriteJSONLine(streams.Out, call); err != nil {
		return err
	}
	return cliCallExit(call)
}
