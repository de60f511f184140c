package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/inspect"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// inspectOptions are the flags every inspect subcommand shares.
type inspectOptions struct {
	DB     string
	Output string
	Limit  int
	Status string
	// CallID is audit's optional argument.
	CallID string
	// Key and Principal name tombstone's tombstone.
	Key, Principal string

	format inspect.Format
}

// Validate checks the shared flags and parses the output format.
func (o *inspectOptions) Validate() error {
	if o.DB == "" {
		return fmt.Errorf("--db is required")
	}
	f, err := inspect.ParseFormat(o.Output)
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	o.format = f
	if o.Limit < 0 {
		return fmt.Errorf("--limit must be ≥ 0 (0 = all), got %d", o.Limit)
	}
	if o.Status != "" && !store.Status(o.Status).Valid() {
		return fmt.Errorf("--status %q: accepted: pending, running, succeeded, failed", o.Status)
	}
	return nil
}

// open opens the database read-only: inspect never writes, and a read-only
// SQLite handle is safe next to a running server. The error names --db,
// password hidden.
func (o *inspectOptions) open(ctx context.Context) (store.Store, error) {
	st, err := backend.Open(ctx, o.DB, store.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", backend.Redact(o.DB), err)
	}
	return st, nil
}

// inspectBody is what one inspect subcommand does with the open store.
type inspectBody func(ctx context.Context, st store.Store, opts *inspectOptions, streams *IOStreams) error

// runInspect opens the store, runs body and closes the store. An error is
// prefixed with the subcommand ("inspect audit c_1: ..."), so the user sees
// which call failed; a call id that is not in the database exits
// exitcode.Failed, like poll's, other errors are runtime errors.
func runInspect(ctx context.Context, name string, opts *inspectOptions, streams *IOStreams, body inspectBody) error {
	st, err := opts.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := body(ctx, st, opts, streams); err != nil {
		var exitErr *ExitError
		if errors.As(err, &exitErr) {
			return err
		}
		what := "inspect " + name
		if opts.CallID != "" {
			what += " " + opts.CallID
		}
		if opts.Key != "" {
			what += " " + opts.Key
		}
		err = fmt.Errorf("%s (--db %s): %w", what, backend.Redact(opts.DB), err)
		if errors.Is(err, store.ErrNotFound) {
			return &ExitError{Code: exitcode.Failed, Err: err}
		}
		return err
	}
	return nil
}

func newInspectCmd(streams *IOStreams) *cobra.Command {
	opts := &inspectOptions{}
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Read the database: calls, effects, dupes, audit, attempts, stats",
		Long: `Read an idemctl database (read-only, safe while the server runs).

  calls              calls, newest first (--status, --limit)
  effects            side effects, newest first (--limit)
  dupes              calls with more than one effect; exits 1 if any
  audit [CALL_ID]    a call's timeline, or the newest audit rows of all calls
  attempts           the attempt distribution, with a hint when it has a tail
  stats              calls, effects and calls by status
  tombstone KEY      what retention kept of a purged call's key (--principal)

Tables by default; --output json for scripts. When --limit cuts a listing,
a line on stderr says so ("showing 50 of 66 calls"); stdout stays the rows
only. A SQLite --db that does not exist is an error (exit 4), never created.
See docs/cli.md, "inspect".`,
		// NoArgs plus a RunE makes a mistyped subcommand an error, not help.
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	cmd.PersistentFlags().StringVar(&opts.DB, "db", "idem.db", "database: SQLite path, sqlite://path, postgres:// URL or key=value DSN")
	cmd.PersistentFlags().StringVarP(&opts.Output, "output", "o", string(inspect.FormatTable), "output format: table or json")

	// sub builds a subcommand: validate, then run body on the open store.
	sub := func(use, short string, args cobra.PositionalArgs, body inspectBody) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  args,
			RunE: func(c *cobra.Command, args []string) error {
				if len(args) == 1 {
					opts.CallID = args[0]
				}
				if err := opts.Validate(); err != nil {
					return err
				}
				return runtimeError(runInspect(c.Context(), c.Name(), opts, streams, body))
			},
		}
	}

	calls := sub("calls", "List calls, newest first", cobra.NoArgs,
		func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
			_, err := inspect.Calls(ctx, st, inspect.CallsOptions{Output: o.format, Status: store.Status(o.Status), Limit: o.Limit, Notice: s.ErrOut}, s.Out)
			return err
		})
	calls.Flags().StringVar(&opts.Status, "status", "", "only calls in this state: pending, running, succeeded, failed")
	calls.Flags().IntVar(&opts.Limit, "limit", inspect.DefaultLimit, "at most this many rows (0 = all)")

	effects := sub("effects", "List side effects, newest first", cobra.NoArgs,
		func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
			_, err := inspect.Effects(ctx, st, inspect.EffectsOptions{Output: o.format, Limit: o.Limit, Notice: s.ErrOut}, s.Out)
			return err
		})
	effects.Flags().IntVar(&opts.Limit, "limit", inspect.DefaultLimit, "at most this many rows (0 = all)")

	dupes := sub("dupes", "Print calls with more than one effect (must be none); exit 1 if any", cobra.NoArgs,
		func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
			found, err := inspect.Dupes(ctx, st, inspect.DupesOptions{Output: o.format}, s.Out)
			if err != nil {
				return err
			}
			if len(found) > 0 {
				return &ExitError{Code: exitcode.Failed, Err: fmt.Errorf("%d call(s) with more than one effect", len(found))}
			}
			return nil
		})

	audit := sub("audit [CALL_ID]", "A call's timeline, or the newest audit rows of all calls", cobra.MaximumNArgs(1),
		func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
			_, err := inspect.Audit(ctx, st, inspect.AuditOptions{Output: o.format, CallID: o.CallID, Limit: o.Limit, Notice: s.ErrOut}, s.Out)
			return err
		})
	audit.Flags().IntVar(&opts.Limit, "limit", inspect.DefaultLimit, "without CALL_ID: the newest this many rows (0 = all)")

	attempts := sub("attempts", "The attempt distribution, with a hint when it has a tail", cobra.NoArgs,
		func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
			_, err := inspect.Attempts(ctx, st, inspect.AttemptsOptions{Output: o.format}, s.Out)
			return err
		})

	stats := sub("stats", "Calls, effects and calls by status", cobra.NoArgs,
		func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
			_, err := inspect.Stats(ctx, st, inspect.StatsOptions{Output: o.format}, s.Out)
			return err
		})

	tombstone := &cobra.Command{
		Use:   "tombstone KEY",
		Short: "What retention kept of a purged call's key: the call, its tool, when it went; exit 1 if none",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			opts.Key = args[0]
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runInspect(c.Context(), c.Name(), opts, streams,
				func(ctx context.Context, st store.Store, o *inspectOptions, s *IOStreams) error {
					_, err := inspect.Tombstone(ctx, st, inspect.TombstoneOptions{Output: o.format, Principal: o.Principal, Key: o.Key}, s.Out)
					return err
				}))
		},
	}
	tombstone.Flags().StringVar(&opts.Principal, "principal", store.DefaultPrincipal, "the key's principal (empty: a server without auth)")

	cmd.AddCommand(calls, effects, dupes, audit, attempts, stats, tombstone)
	return cmd
}
