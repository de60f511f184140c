package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/clientknob"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/wire"
)

// callOptions are the flags of idemctl call.
type callOptions struct {
	Base   string
	Token  string // bearer token; never printed
	Key    string
	Tool   string
	Amount int64
	Args   string
	// AttemptTimeout bounds one attempt (--attempt-timeout; --timeout is
	// its deprecated alias).
	AttemptTimeout time.Duration
	Retries        int
	NewKeyOnRetry  bool
	ClientID       string
	Seq            int64
	PollTimeout    time.Duration
	// NotifyURL is --notify-url: where the server delivers the final call
	// (a completion webhook); "" asks for none.
	NotifyURL string

	amountSet, seqSet bool
	args              map[string]any // built by Validate
}

// defaultChargeAmount is used when `--tool charge` comes with neither
// --amount nor --args, so `idemctl call --key K` works as a demo.
const defaultChargeAmount = 100

// Validate checks the flags and builds the args object.
func (o *callOptions) Validate() error {
	if err := client.CheckBase(o.Base); err != nil {
		return fmt.Errorf("--base: %w", err)
	}
	if o.Key == "" {
		return errors.New("--key is required: the client chooses the idempotency key, once, and reuses it on every retry")
	}
	// The client would refuse it before sending anything; say so as the
	// usage error it is, as poll --key does.
	if err := client.CheckKey(o.Key); err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	if o.Tool == "" {
		return errors.New("--tool must not be empty")
	}
	if o.AttemptTimeout <= 0 {
		return fmt.Errorf("--attempt-timeout must be positive, got %s", o.AttemptTimeout)
	}
	if o.Retries < 0 {
		return fmt.Errorf("--retries must be ≥ 0, got %d", o.Retries)
	}
	if o.PollTimeout < 0 {
		return fmt.Errorf("--poll-timeout must be ≥ 0, got %s", o.PollTimeout)
	}
	o.args = map[string]any{}
	if o.Args != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(o.Args)))
		dec.UseNumber() // keep 100 as 100, not 1e+02
		if err := dec.Decode(&o.args); err != nil {
			return fmt.Errorf("--args must be a JSON object: %v", err)
		}
		if o.args == nil { // the literal null decodes without error
			return errors.New("--args must be a JSON object, got null")
		}
		if _, err := dec.Token(); err != io.EOF {
			return errors.New("--args must be a single JSON object")
		}
	}
	if _, has := o.args["amount"]; has && o.amountSet {
		// Which one would win is a guess the user should not have to make.
		return errors.New("--amount and an \"amount\" in --args contradict each other: give one")
	}
	if o.amountSet {
		o.args["amount"] = o.Amount
	} else if o.Args == "" && o.Tool == "charge" {
		o.args["amount"] = defaultChargeAmount
	}
	return nil
}

func newCallCmd(streams *IOStreams) *cobra.Command {
	opts := &callOptions{}
	cmd := &cobra.Command{
		Use:   "call",
		Short: "Make one logical tool call with same-key retries, then wait for its end",
		Long: `Make one logical tool call: POST it under --key, retrying with the SAME key on
timeouts, connection errors, 429 and 503 (backoff min(2^n·100ms, 1s) + jitter,
Retry-After honoured); 400/409 end at once. Then poll until the call is final.

Prints one JSON line per attempt, then the final call as one JSON line.
Exit status 1 when the call failed, the retries ran out, or polling hit
--poll-timeout.

Attempts are numbered from 1 in the attempt lines, as in the call's own
"attempt" field.

--new-key-on-retry sends attempt n with key K-(n-1): a bug kept on purpose to
show that a retry with a new key is a new call and a second charge (see
docs/design.md, "What a retry with a new key does").

See docs/cli.md, "call".`,
		Example: `  idemctl call --key demo-1 --tool charge --amount 100
  idemctl call --key mail-1 --tool send_email --args '{"to":"a@example.com"}'
  idemctl call --key demo-bad --amount 100 --attempt-timeout 100ms --new-key-on-retry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.amountSet = cmd.Flags().Changed("amount")
			opts.seqSet = cmd.Flags().Changed("seq")
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runCall(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.Key, "key", "", "idempotency key (required); the same on every retry")
	f.StringVar(&opts.Tool, "tool", "charge", "tool: charge, send_email, sleep, fail")
	f.Int64Var(&opts.Amount, "amount", 0, "sets args.amount (charge; 100 when --tool charge has neither --amount nor --args)")
	f.StringVar(&opts.Args, "args", "", `the whole args object as JSON, e.g. '{"to":"a@example.com"}'`)
	f.DurationVar(&opts.AttemptTimeout, "attempt-timeout", client.DefaultAttemptTimeout, "timeout of one attempt (each retry gets its own)")
	addDeprecatedAlias(f, "attempt-timeout", "timeout")
	f.IntVar(&opts.Retries, "retries", client.DefaultRetries, "retries after the first attempt (0 = none)")
	f.BoolVar(&opts.NewKeyOnRetry, "new-key-on-retry", false, "use K-0, K-1, ... per attempt (demonstrates the duplicate-effect bug)")
	f.StringVar(&opts.ClientID, "client-id", "", "optional client label (not part of the fingerprint)")
	f.Int64Var(&opts.Seq, "seq", 0, "optional client sequence number (not part of the fingerprint)")
	f.StringVar(&opts.NotifyURL, "notify-url", "", "ask the server to POST the final call to this URL (a completion webhook the server allows with --webhook-allow; not part of the fingerprint)")
	f.DurationVar(&opts.PollTimeout, "poll-timeout", 10*time.Second, "how long to poll for a final state (0 = do not poll)")
	return cmd
}

// runCall makes the call, prints the attempt lines and the final call, and
// maps the outcome to an exit status.
func runCall(ctx context.Context, opts *callOptions, streams *IOStreams) error {
	waitTimeout := opts.PollTimeout
	if waitTimeout == 0 { // --poll-timeout 0: no poll, the wait is never used
		waitTimeout = client.DefaultWaitTimeout
	}
	var printErr error
	// No Prefer: wait: the POST answers at once and the poll that follows
	// is bounded by --poll-timeout (docs/cli.md, "call").
	c, err := client.New(opts.Base, client.WithToken(opts.Token), client.WithAttemptTimeout(opts.AttemptTimeout),
		client.WithRetries(opts.Retries), client.WithPreferWait(0), client.WithWaitTimeout(waitTimeout),
		client.WithOnAttempt(func(r client.AttemptRecord) {
			if err := cliWriteJSONLine(streams.Out, r); err != nil && printErr == nil {
				printErr = err
			}
		}))
	if err != nil {
		return err
	}
	callOpts := []client.CallOption{client.WithKey(opts.Key), client.WithClientID(opts.ClientID)}
	if opts.seqSet {
		callOpts = append(callOpts, client.WithSeq(opts.Seq))
	}
	if opts.NotifyURL != "" {
		callOpts = append(callOpts, client.WithNotifyURL(opts.NotifyURL))
	}
	if opts.NewKeyOnRetry {
		ctx = clientknob.WithNewKeyOnRetry(ctx)
	}
	res, err := c.Submit(ctx, opts.Tool, opts.args, callOpts...)
	if printErr != nil {
		return printErr
	}
	if err != nil {
		cliWriteErrorLine(streams.Out, err)
		return &ExitError{Code: exitcode.Failed, Err: err}
	}
	call := res.Call
	if !call.Final() && opts.PollTimeout > 0 {
		call, err = c.Wait(ctx, call.CallID)
		if err != nil && !errors.Is(err, client.ErrCallFailed) { // a failed call is printed below
			if call.CallID != "" {
				_ = cliWriteJSONLine(streams.Out, call) // the last state seen
			}
			cliWriteErrorLine(streams.Out, err)
			return &ExitError{Code: exitcode.Failed, Err: err}
		}
	}
	if err := cliWriteJSONLine(streams.Out, call); err != nil {
		return err
	}
	return cliCallExit(call)
}

// cliCallExit maps a call's end state to the exit status: failed is
// exitcode.Failed. A
// call left unfinished because polling was off (--poll-timeout 0) is 0: it
// was accepted and will finish without the client.
func cliCallExit(call client.Call) error {
	if call.Status == wire.StatusFailed {
		return &ExitError{Code: exitcode.Failed, Err: fmt.Errorf("call %s failed: %s", call.CallID, bytes.TrimSpace(call.Error))}
	}
	return nil
}
