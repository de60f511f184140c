// Package inspect reads an idemctl database through the store seam and
// prints the evidence (docs/cli.md, "inspect"): calls, effects, the audit
// timeline of one call, duplicate effects, the attempt distribution and the
// calls/effects/by_status counts.
//
// Every function takes a store.Store (opened read-only by the command, so it
// is safe while a server writes), typed options and an io.Writer: tables for
// people, JSON for scripts. JSON field names are stable snake_case and lists
// are arrays even when empty, so `jq '.[]'` never meets a null.
package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"

	"github.com/idemctl/idemctl/internal/store"
)

// Format is how results are written.
type Format string

// The output formats.
const (
	// FormatTable writes tablewriter tables for people.
	FormatTable Format = "table"
	// FormatJSON writes indented JSON for scripts.
	FormatJSON Format = "json"
)

// ParseFormat accepts "table" and "json" (and "" as table).
func ParseFormat(s string) (Format, error) {
	switch Format(strings.ToLower(strings.TrimSpace(s))) {
	case "", FormatTable:
		return FormatTable, nil
	case FormatJSON:
		return FormatJSON, nil
	}
	return "", fmt.Errorf("unknown output format %q (accepted: table, json)", s)
}

// timeLayout prints absolute times in UTC with milliseconds: the audit
// timeline is about ordering within a second, and UTC keeps output the same
// on every machine.
const timeLayout = "2006-01-02 15:04:05.000Z"

// formatTS turns a store timestamp (Unix seconds) into timeLayout.
func formatTS(ts float64) string {
	if ts == 0 {
		return ""
	}
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC().Format(timeLayout)
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keys and details are printed as stored
	return enc.Encode(v)
}

// newTable returns a table with the given header writing to w.
func newTable(w io.Writer, header ...string) *tablewriter.Table {
	return tablewriter.NewTable(w, tablewriter.WithHeader(header))
}

// render appends rows and renders the table.
func render(t *tablewriter.Table, rows [][]string) error {
	if err := t.Bulk(rows); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	return nil
}

// deref returns *p or "" (or "-" for the table's empty cells).
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// orDash shows an empty cell as "-" so columns stay readable.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// noteTruncated writes "showing 50 of 66 calls; --limit N to see more (0 =
// all)" to w when a listing of shown rows hit limit and total (read from
// the store's counts) says there are more. A listing cut silently reads as
// the whole table. With w nil or no limit it does nothing. The count is a
// second query: with a server writing, it may be a little newer than the
// rows.
func noteTruncated(ctx context.Context, st store.Store, w io.Writer, shown, limit int, what string, total func(store.Stats) int64) error {
	if w == nil || limit <= 0 || shown < limit {
		return nil
	}
	s, err := st.Stats(ctx)
	if err != nil {
		return fmt.Errorf("counting %s: %w", what, err)
	}
	if n := total(s); n > int64(shown) {
		fmt.Fprintf(w, "showing %d of %d %s; --limit N to see more (0 = all)\n", shown, n, what)
	}
	return nil
}
