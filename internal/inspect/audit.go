package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/idemctl/idemctl/internal/store"
)

// AuditOptions select and format `inspect audit`.
type AuditOptions struct {
	Output Format
	// CallID shows that call's whole timeline; "" shows the newest Limit
	// rows of all calls.
	CallID string
	// Limit caps the rows when CallID is "" (0 = all). A timeline is
	// always complete.
	Limit int
	// Notice, as in CallsOptions. The audit has no count, so the notice
	// says there are more without saying how many.
	Notice io.Writer
}

// AuditJSON is one audit row in `inspect audit --output json`. OffsetS is the
// time since the first row printed (the call's first event for a timeline).
type AuditJSON struct {
	ID      int64   `json:"id"`
	TS      float64 `json:"ts"`
	Time    string  `json:"time"`
	OffsetS float64 `json:"offset_s"`
	CallID  string  `json:"call_id"`
	Event   string  `json:"event"`
	Detail  string  `json:"detail"`
}

// Audit prints audit rows in order. With a call id it is the call's timeline
// (docs/lifecycle.md, "Audit events": created → claimed → succeeded, or
// created naming a claim at creation → succeeded, with
// recover, fenced or retry_reset in between when they happened): each
// event with its time relative to the first one and its absolute time. It
// returns the rows printed; an unknown call id is an error wrapping
// store.ErrNotFound that names the call.
func Audit(ctx context.Context, st store.Store, opts AuditOptions, w io.Writer) ([]store.AuditEvent, error) {
	limit := opts.Limit
	var call *store.Call
	if opts.CallID != "" {
		limit = 0 // a timeline with its beginning cut off would mislead
		c, err := st.GetAny(ctx, opts.CallID)
		switch {
		case err == nil:
			call = &c
		case !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("reading call %s: %w", opts.CallID, err)
		}
	}
	probe := limit
	if probe > 0 {
		probe++ // one row more than shown tells whether the limit cut anything
	}
	events, err := st.Audit(ctx, opts.CallID, probe)
	if err != nil {
		return nil, fmt.Errorf("reading audit: %w", err)
	}
	if limit > 0 && len(events) > limit {
		events = events[len(events)-limit:] // oldest first: keep the newest limit
		if opts.Notice != nil {
			fmt.Fprintf(opts.Notice, "showing the newest %d audit rows, there are more; --limit N to see more (0 = all)\n", limit)
		}
	}
	if opts.CallID != "" && call == nil && len(events) == 0 {
		return nil, fmt.Errorf("no call %s in this database (no call row, no audit rows): %w", opts.CallID, store.ErrNotFound)
	}
	var first float64
	if len(events) > 0 {
		first = events[0].TS
	}
	if opts.Output == FormatJSON {
		out := make([]AuditJSON, 0, len(events))
		for _, e := range events {
			out = append(out, AuditJSON{
				ID: e.ID, TS: e.TS, Time: formatTS(e.TS), OffsetS: e.TS - first,
				CallID: e.CallID, Event: e.Event, Detail: e.Detail,
			})
		}
		return events, writeJSON(w, out)
	}

	if opts.CallID != "" {
		if call != nil {
			// One line of context above the timeline: where the call ended up.
			fmt.Fprintf(w, "call %s  key %s  tool %s  status %s  attempt %d  effect %s\n",
				call.CallID, call.IdemKey, call.Tool, call.Status, call.Attempt, orDash(deref(call.EffectID)))
		}
		rows := make([][]string, 0, len(events))
		for _, e := range events {
			rows = append(rows, []string{relative(e.TS - first), formatTS(e.TS), e.Event, e.Detail})
		}
		return events, render(newTable(w, "elapsed", "time", "event", "detail"), rows)
	}
	rows := make([][]string, 0, len(events))
	for _, e := range events {
		rows = append(rows, []string{strconv.FormatInt(e.ID, 10), formatTS(e.TS), relative(e.TS - first), e.CallID, e.Event, e.Detail})
	}
	return events, render(newTable(w, "id", "time", "elapsed", "call_id", "event", "detail"), rows)
}

// relative formats an offset in seconds as "+0.000s".
func relative(d float64) string {
	return fmt.Sprintf("+%.3fs", d)
}
