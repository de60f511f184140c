package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

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
// SQLite handle is safe next to a running server.
func (o *inspectOptions) open(ctx context.Context) (store.Store, error) {
	st, err := backend.Open(ctx, o.DB, store.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", backend.Redact(o.DB), err)
	}
	return st, nil
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

Tables by default; --output json for scripts.`,
		// NoArgs plus a RunE makes a mistyped subcommand an error, not help.
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	cmd.PersistentFlags().StringVar(&opts.DB, "db", "idem.db", "database: SQLite path, sqlite://path, postgres:// URL or key=value DSN")
	cmd.PersistentFlags().StringVarP(&opts.Output, "output", "o", string(inspect.FormatTable), "output format: table or json")

	// run wraps a subcommand body with validation and opening/closing the store.
	run := func(body func(ctx context.Context, st store.Store) error) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			st, err := opts.open(c.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			return body(c.Context(), st)
		}
	}

	calls := &cobra.Command{
		Use:   "calls",
		Short: "List calls, newest first",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, st store.Store) error {
			_, err := inspect.Calls(ctx, st, inspect.CallsOptions{Output: opts.format, Status: store.Status(opts.Status), Limit: opts.Limit}, streams.Out)
			return err
		}),
	}
	calls.Flags().StringVar(&opts.Status, "status", "", "only calls in this state: pending, running, succeeded, failed")
	calls.Flags().IntVar(&opts.Limit, "limit", inspect.DefaultLimit, "at most this many rows (0 = all)")

	effects := &cobra.Command{
		Use:   "effects",
		Short: "List side effects, newest first",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, st store.Store) error {
			_, err := inspect.Effects(ctx, st, inspect.EffectsOptions{Output: opts.format, Limit: opts.Limit}, streams.Out)
			return err
		}),
	}
	effects.Flags().IntVar(&opts.Limit, "limit", inspect.DefaultLimit, "at most this many rows (0 = all)")

	dupes := &cobra.Command{
		Use:   "dupes",
		Short: "Print calls with more than one effect (must be none); exit 1 if any",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, st store.Store) error {
			found, err := inspect.Dupes(ctx, st, inspect.DupesOptions{Output: opts.format}, streams.Out)
			if err != nil {
				return err
			}
			if len(found) > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("%d call(s) with more than one effect", len(found))}
			}
			return nil
		}),
	}

	var callID string
	audit := &cobra.Command{
		Use:   "audit [CALL_ID]",
		Short: "A call's timeline, or the newest audit rows of all calls",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				callID = args[0]
			}
			return run(func(ctx context.Context, st store.Store) error {
				_, err := inspect.Audit(ctx, st, inspect.AuditOptions{Output: opts.format, CallID: callID, Limit: opts.Limit}, streams.Out)
				return err
			})(c, args)
		},
	}
	audit.Flags().IntVar(&opts.Limit, "limit", inspect.DefaultLimit, "without CALL_ID: the newest this many rows (0 = all)")

	attempts := &cobra.Command{
		Use:   "attempts",
		Short: "The attempt distribution (§12.12.5)",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, st store.Store) error {
			_, err := inspect.Attempts(ctx, st, inspect.AttemptsOptions{Output: opts.format}, streams.Out)
			return err
		}),
	}

	stats := &cobra.Command{
		Use:   "stats",
		Short: "Calls, effects and calls by status",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, st store.Store) error {
			_, err := inspect.Stats(ctx, st, inspect.StatsOptions{Output: opts.format}, streams.Out)
			return err
		}),
	}

	cmd.AddCommand(calls, effects, dupes, audit, attempts, stats)
	return cmd
}
