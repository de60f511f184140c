package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// resolvedByDB is who the audit names for a resolve through --db, which
// acts for no principal.
const resolvedByDB = "(--db)"

// resolveOptions are the flags of idemctl resolve.
type resolveOptions struct {
	Base      string
	Token     string // bearer token; never printed
	DB        string
	Succeeded bool
	Failed    bool
	Result    string
	Message   string

	useDB bool // --db was given
	req   wire.Resolve
}

// Validate checks the flags and builds the request.
func (o *resolveOptions) Validate() error {
	if o.Succeeded == o.Failed {
		return errors.New("give exactly one of --succeeded and --failed")
	}
	if o.useDB && o.DB == "" {
		return errors.New("--db must not be empty")
	}
	if !o.useDB {
		if err := client.CheckBase(o.Base); err != nil {
			return fmt.Errorf("--base: %w", err)
		}
	}
	if o.Succeeded {
		if o.Message != "" {
			return errors.New("--message goes with --failed (a succeeded call has a --result)")
		}
		o.req = wire.Resolve{Outcome: wire.StatusSucceeded}
		if o.Result != "" {
			var obj map[string]json.RawMessage
			if json.Unmarshal([]byte(o.Result), &obj) != nil || obj == nil {
				return errors.New("--result must be a JSON object, e.g. '{\"id\": \"ch_1\"}'")
			}
			o.req.Result = json.RawMessage(o.Result)
		}
		return nil
	}
	if o.Result != "" {
		return errors.New("--result goes with --succeeded (a failed call has a --message)")
	}
	o.req = wire.Resolve{Outcome: wire.StatusFailed, Message: o.Message}
	return nil
}

func newResolveCmd(streams *IOStreams) *cobra.Command {
	opts := &resolveOptions{}
	cmd := &cobra.Command{
		Use:   "resolve CALL_ID (--succeeded [--result JSON] | --failed [--message M])",
		Short: "Settle a call whose outcome is unknown (failed, code outcome_unknown) as succeeded or failed",
		Long: `Settle a call that failed with code outcome_unknown — a call held by a tool's
on_unknown: hold, or any other whose outcome idemctl could not learn — once you
know from the downstream what happened. --succeeded: the effect happened; the
call succeeds with --result (default {"resolved":true}) and its effect row.
--failed: it did not; the call stays failed with code resolved_failed and
--message, not retryable. Either way the same key then replays that outcome,
and the audit records "resolved" with who did it. Any other call is refused
(exit 1, code not_resolvable) and nothing changes.

Through the API (--base, POST /v1/tool-calls/{id}/resolve, as your token's
principal) or directly on the database (--db, which needs no server; the audit
names "(--db)"). Prints the call as one JSON line. See docs/cli.md, "resolve".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.useDB = cmd.Flags().Changed("db")
			if opts.useDB && cmd.Flags().Changed("base") {
				return errors.New("give --base or --db, not both (IDEMCTL_BASE, IDEMCTL_DB and the config file's base and db count as given)")
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			if opts.useDB {
				return runtimeError(runResolveDB(cmd.Context(), opts, args[0], streams))
			}
			return runtimeError(runResolve(cmd.Context(), opts, args[0], streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.DB, "db", "", "resolve directly on this database (SQLite path, postgres:// URL or DSN) instead of through --base")
	f.BoolVar(&opts.Succeeded, "succeeded", false, "the effect happened: the call succeeds")
	f.BoolVar(&opts.Failed, "failed", false, "the effect did not happen: the call stays failed, settled")
	f.StringVar(&opts.Result, "result", "", `with --succeeded: the call's result, a JSON object (default {"resolved":true})`)
	f.StringVar(&opts.Message, "message", "", "with --failed: the error's message")
	return cmd
}

// runResolve resolves through the API. An answer of the server (not
// found, not resolvable) exits 1; a server that cannot be reached is a
// runtime error.
func runResolve(ctx context.Context, opts *resolveOptions, id string, streams *IOStreams) error {
	c, err := client.New(opts.Base, client.WithToken(opts.Token))
	if err != nil {
		return err
	}
	call, err := c.Resolve(ctx, id, opts.req)
	if call.CallID != "" {
		if perr := cliWriteJSONLine(streams.Out, call); perr != nil {
			return perr
		}
	}
	return answerError(err)
}

// runResolveDB resolves on the database itself, through the same rule as
// the API (store.ResolveCall).
func runResolveDB(ctx context.Context, opts *resolveOptions, id string, streams *IOStreams) (err error) {
	st, err := backend.Open(ctx, opts.DB, store.Options{})
	if err != nil {
		return fmt.Errorf("--db %s: %w", backend.Redact(opts.DB), err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	c, err := st.GetAny(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return &ExitError{Code: exitcode.Failed, Err: fmt.Errorf("resolve: %s: no call with id %q", wire.CodeNotFound, id)}
	}
	if err != nil {
		return err
	}
	done, err := store.ResolveCall(ctx, st, c, resolvedByDB, opts.req, tool.EffectID(id))
	if done.CallID != "" {
		if perr := cliWriteJSONLine(streams.Out, callview.Of(done)); perr != nil {
			return perr
		}
	}
	if errors.Is(err, store.ErrNotResolvable) {
		return &ExitError{Code: exitcode.Failed, Err: fmt.Errorf("resolve: %s: %w", wire.CodeNotResolvable, err)}
	}
	return err
}
