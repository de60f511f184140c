package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/bearer"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/redrive"
	"github.com/idemctl/idemctl/internal/wire"
)

// redriveOptions are the flags of idemctl redrive.
type redriveOptions struct {
	Base   string
	Token  string // bearer token; never printed
	Tool   string
	Code   string
	Since  string
	Until  string
	Limit  int
	Force  bool
	DryRun bool

	// now is the time --since and --until durations count back from.
	now time.Time
	req wire.Redrive
}

// Validate checks the flags and builds the request body.
func (o *redriveOptions) Validate() error {
	if err := client.CheckBase(o.Base); err != nil {
		return fmt.Errorf("--base: %w", err)
	}
	if o.Limit < 0 || o.Limit > redrive.MaxLimit {
		return fmt.Errorf("--limit must be 1 to %d (0: %d), got %d", redrive.MaxLimit, redrive.DefaultLimit, o.Limit)
	}
	o.req = wire.Redrive{Tool: o.Tool, Code: o.Code, Limit: o.Limit, Force: o.Force, DryRun: o.DryRun}
	var err error
	if o.req.Since, err = parseWhen(o.Since, o.now); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if o.req.Until, err = parseWhen(o.Until, o.now); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	if o.req.Since != nil && o.req.Until != nil && *o.req.Until <= *o.req.Since {
		return fmt.Errorf("--until must be after --since")
	}
	return nil
}

// parseWhen reads --since and --until: an RFC 3339 time, or a duration
// meaning that long before now ("2h"). "" is no bound.
func parseWhen(s string, now time.Time) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		v := float64(now.Add(-d).UnixNano()) / 1e9
		return &v, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, fmt.Errorf("%q is neither an RFC 3339 time (2026-05-01T12:00:00Z) nor a duration ago (2h)", s)
	}
	v := float64(t.UnixNano()) / 1e9
	return &v, nil
}

func newRedriveCmd(streams *IOStreams) *cobra.Command {
	opts := &redriveOptions{}
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send your failed calls back to pending: by tool, error code and time, retryable ones unless --force",
		Long: `Send failed calls back to pending (POST /v1/redrive), each through the same
reset as a same-key retry: the fingerprint is unchanged, the attempts continue,
and the audit records "redriven" with your principal. Only retryable failures
are selected unless --force; a call whose outcome is unknown never is.
--dry-run lists the selection and changes nothing. Redriven calls wait their
turn like new ones. Prints the server's answer as one JSON line
({"dry_run", "calls", "more"}) and a count on stderr; "more" means run it again.
See docs/cli.md, "redrive".`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			opts.now = time.Now()
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runRedrive(c.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	addServerFlags(f, &opts.Base, &opts.Token)
	f.StringVar(&opts.Tool, "tool", "", "only calls of this tool")
	f.StringVar(&opts.Code, "code", "", "only calls whose error has this code (e.g. downstream_error)")
	f.StringVar(&opts.Since, "since", "", "only calls created at or after this time: RFC 3339, or a duration ago (2h)")
	f.StringVar(&opts.Until, "until", "", "only calls created before this time: RFC 3339, or a duration ago")
	f.IntVar(&opts.Limit, "limit", redrive.DefaultLimit, fmt.Sprintf("at most this many calls (at most %d)", redrive.MaxLimit))
	f.BoolVar(&opts.Force, "force", false, "definite failures (retryable false) too")
	f.BoolVar(&opts.DryRun, "dry-run", false, "list the calls that would be redriven; change nothing")
	return cmd
}

// runRedrive posts the request and prints the answer. An error answer of
// the server exits 1 with its code; an unreachable server is a runtime
// error.
func runRedrive(ctx context.Context, opts *redriveOptions, streams *IOStreams) error {
	body, err := json.Marshal(opts.req)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(opts.Base, "/")+wire.PathRedrive, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := bearer.Client(&http.Client{Timeout: time.Minute}, opts.Token)
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("redrive: reading the answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		var e wire.Error
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			return &ExitError{Code: exitcode.Failed, Err: fmt.Errorf("redrive: %d %s: %s", res.StatusCode, e.Error.Code, e.Error.Message)}
		}
		return fmt.Errorf("redrive: unexpected answer %s", res.Status)
	}
	var out wire.Redriven[json.RawMessage]
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("redrive: unexpected answer: %w", err)
	}
	if err := cliWriteJSONLine(streams.Out, out); err != nil {
		return err
	}
	verb := "redriven"
	if out.DryRun {
		verb = "would be redriven (dry run)"
	}
	more := ""
	if out.More {
		more = "; more may match: run it again"
	}
	_, err = fmt.Fprintf(streams.ErrOut, "%d call(s) %s%s\n", len(out.Calls), verb, more)
	return err
}
