package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/inspect"
	"github.com/idemctl/idemctl/internal/reconcile"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// reconcileOptions are the flags of idemctl reconcile.
type reconcileOptions struct {
	Tools  string
	Tool   string
	Since  string
	DB     string
	Base   string
	Token  string // bearer token; never printed
	Output string

	// now is the time a --since duration counts back from.
	now    time.Time
	since  time.Time
	format inspect.Format
	rc     *toolreg.Reconcile
}

// Validate checks the flags, reads the tools file and finds the tool's
// reconcile block.
func (o *reconcileOptions) Validate() error {
	if o.Tools == "" {
		return fmt.Errorf("--tools is required: the tools file whose tool has a reconcile block")
	}
	if o.Tool == "" {
		return fmt.Errorf("--tool is required")
	}
	since, err := parseWhen(o.Since, o.now)
	if err != nil || since == nil {
		if err == nil {
			err = fmt.Errorf("required")
		}
		return fmt.Errorf("--since: %w", err)
	}
	o.since = time.Unix(0, int64(*since*1e9)).UTC()
	if o.DB == "" {
		if err := client.CheckBase(o.Base); err != nil {
			return fmt.Errorf("--base: %w", err)
		}
	}
	if o.format, err = inspect.ParseFormat(o.Output); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	reg, err := toolreg.Load(o.Tools, nil)
	if err != nil {
		return fmt.Errorf("--tools: %w", err)
	}
	t, ok := reg.Lookup(o.Tool)
	if !ok {
		return fmt.Errorf("--tool %q: not in %s (tools: %s)", o.Tool, o.Tools, reg)
	}
	if t.Reconcile == nil {
		return fmt.Errorf("--tool %q: has no reconcile block in %s (docs/tools.md, \"Reconciliation\")", o.Tool, o.Tools)
	}
	if !t.Effect {
		return fmt.Errorf("--tool %q: has effect: false, so idemctl records no effects of it to compare", o.Tool)
	}
	o.rc = t.Reconcile
	return nil
}

func newReconcileCmd(streams *IOStreams) *cobra.Command {
	opts := &reconcileOptions{}
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Compare a downstream's records with the effects of one http tool; exit 1 when they differ",
		Long: `Read the downstream's list of records, as the tool's reconcile block in
--tools describes it (every page), and compare it with idemctl's effects and
calls of that tool since --since. It reports downstream records with no
effect here, effects here with no downstream record, keys that several
downstream records share (the downstream did not honour them), and calls
that ended outcome_unknown with how many records the downstream has for
each. Exit 0 when all agree, 1 when anything differs.

idemctl's side comes from the database (--db, read-only) or, without --db,
from the server (--base, GET /v1/tool-calls: with authentication, only the
token's own calls). See docs/cli.md, "reconcile".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.now = time.Now()
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runReconcile(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Tools, "tools", "", "tools file (the one the server runs with) holding the tool's reconcile block")
	f.StringVar(&opts.Tool, "tool", "", "the http tool to reconcile")
	f.StringVar(&opts.Since, "since", "24h", "start of the window: a duration ago (24h) or an RFC 3339 time")
	f.StringVar(&opts.DB, "db", "", "read idemctl's side from this database (SQLite path or postgres:// URL) instead of --base")
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.Output, "output", "table", "output format: table (one line per discrepancy, then the verdict) or json")
	return cmd
}

// runReconcile reads both sides, prints the report and exits
// exitcode.Failed when they differ.
func runReconcile(ctx context.Context, o *reconcileOptions, streams *IOStreams) error {
	from := o.since.Add(-reconcile.Grace)
	var local reconcile.Local
	var err error
	if o.DB != "" {
		local, err = localFromDB(ctx, o.DB, o.Tool, from)
	} else {
		local, err = localFromServer(ctx, o.Base, o.Token, o.Tool, from)
	}
	if err != nil {
		return err
	}
	records, err := reconcile.Fetch(ctx, &http.Client{Timeout: time.Minute}, o.rc, o.since)
	if err != nil {
		return fmt.Errorf("the downstream's list: %w", err)
	}
	rep := reconcile.Compare(o.Tool, o.since, records, local)
	if o.format == inspect.FormatJSON {
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(streams.Out)
	}
	if err != nil {
		return err
	}
	if !rep.Agree {
		return &ExitError{Code: exitcode.Failed}
	}
	return nil
}

// localFromDB reads the tool's side from the database, read-only.
func localFromDB(ctx context.Context, dsn, toolName string, from time.Time) (reconcile.Local, error) {
	st, err := backend.Open(ctx, dsn, store.Options{ReadOnly: true})
	if err != nil {
		return reconcile.Local{}, fmt.Errorf("--db %s: %w", backend.Redact(dsn), err)
	}
	defer st.Close()
	return reconcile.FromStore(ctx, st, toolName, from)
}

// localFromServer reads the tool's calls since from through the API; a
// succeeded call with an effect id stands for its effect row, stamped
// with the call's last update.
func localFromServer(ctx context.Context, base, token, toolName string, from time.Time) (reconcile.Local, error) {
	c, err := client.New(base, client.WithToken(token))
	if err != nil {
		return reconcile.Local{}, err
	}
	var local reconcile.Local
	for call, err := range c.List(ctx, client.ListOptions{Tool: toolName, Since: from}) {
		if err != nil {
			return reconcile.Local{}, answerError(err)
		}
		if call.Status == wire.StatusSucceeded && call.EffectID != nil {
			local.Effects = append(local.Effects, reconcile.Effect{EffectID: *call.EffectID, CallID: call.CallID, At: reconcile.UnixTime(call.UpdatedAt)})
		}
		local.Calls = append(local.Calls, reconcile.CallOf(call.CallID, call.Status, call.Error))
	}
	return local, nil
}
