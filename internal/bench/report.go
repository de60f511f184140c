package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"

	"github.com/idemctl/idemctl/internal/inspect"
)

// Report is the outcome of a bench run. It marshals to JSON with stable
// snake_case names; lists are arrays and optional parts null, never absent.
type Report struct {
	// RunID is the random part of this run's keys (bench-<run_id>-<i>).
	RunID string `json:"run_id"`
	// Base is the URL the load went to.
	Base string `json:"base"`
	// Server is "in-process" (the bench started it) or "external".
	Server string `json:"server"`
	// Workers is the in-process server's worker count, 0 for external.
	Workers int `json:"workers"`
	// Tool is the tool called.
	Tool string `json:"tool"`
	// SameKey: every request used one key.
	SameKey bool `json:"same_key"`
	// Concurrency is the number of requests in flight.
	Concurrency int `json:"concurrency"`
	// DurationS is the requested --duration in seconds (0: ran -n requests).
	DurationS float64 `json:"duration_s"`

	// The service's load measurements.
	LoadStats
	// AckedKeys is the number of distinct keys that got a 2xx.
	AckedKeys int `json:"acked_keys"`

	// StatsBefore and StatsAfter are /stats before the load and after
	// draining; the deltas are what this run added.
	StatsBefore  Stats `json:"stats_before"`
	StatsAfter   Stats `json:"stats_after"`
	CallsDelta   int64 `json:"calls_delta"`
	EffectsDelta int64 `json:"effects_delta"`
	// Drained: no call was pending or running at the end; DrainS is how
	// long that took after the load.
	Drained bool    `json:"drained"`
	DrainS  float64 `json:"drain_s"`
	// FinishedDelta is the number of calls that reached a final state;
	// FinishedRPS divides it by wall_s + drain_s: the executor's pace, as
	// opposed to rps, the pace at which calls were accepted.
	FinishedDelta int64   `json:"finished_delta"`
	FinishedRPS   float64 `json:"finished_rps"`

	// Attempts is the attempt distribution of the run's database (only
	// when the bench started its own server), else null with a note.
	Attempts     *inspect.AttemptsReport `json:"attempts"`
	AttemptsNote string                  `json:"attempts_note"`

	// Ceiling is the bare handler's run (null without --ceiling).
	Ceiling *Ceiling `json:"ceiling"`

	// Checks are the invariants verified; OK is true when all hold.
	Checks []Check `json:"checks"`
	OK     bool    `json:"ok"`
}

// Ceiling is the same load against a bare handler that only reads the body
// and writes a small JSON reply: the most this machine, client and HTTP
// stack can do, so the service's throughput can be read against it.
type Ceiling struct {
	LoadStats
	// Fraction is the service's rps divided by the ceiling's.
	Fraction float64 `json:"fraction"`
}

// writeReport writes r in format to w.
func writeReport(w io.Writer, format string, r Report) error {
	if format == FormatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeText(w, r)
}

// writeText renders the report's summary lines, then the attempt
// table, the ceiling and one PASS/FAIL line per check.
func writeText(w io.Writer, r Report) error {
	var b strings.Builder
	keys := "distinct keys"
	if r.SameKey {
		keys = "same key"
	}
	server := "external server " + r.Base
	if r.Server == "in-process" {
		server = fmt.Sprintf("in-process server (%d workers, temp SQLite) at %s", r.Workers, r.Base)
	}
	fmt.Fprintf(&b, "bench %s: tool=%s, %s, c=%d, %s\n", r.RunID, r.Tool, keys, r.Concurrency, server)
	fmt.Fprintf(&b, "n=%d  wall=%.3fs  rps=%.1f\n", r.N, r.WallS, r.RPS)
	if r.Status0 == r.N {
		fmt.Fprintln(&b, "latency: none measured (no request got a response)")
	} else {
		fmt.Fprintf(&b, "%s\n", r.LatencyMS)
	}
	fmt.Fprintf(&b, "%s\n", statusLine(r.LoadStats))
	fmt.Fprintf(&b, "%s\n", classLine(r.LoadStats))
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  no response: %s\n", e)
	}
	for _, e := range r.Refusals {
		fmt.Fprintf(&b, "  unexpected answer: %s\n", e)
	}
	var drain string
	switch {
	case r.Drained:
		drain = fmt.Sprintf("drained %.2fs after the load", r.DrainS)
	case r.DrainS == 0:
		drain = "drain skipped, calls still pending or running"
	default:
		drain = fmt.Sprintf("NOT drained after %.2fs", r.DrainS)
	}
	fmt.Fprintf(&b, "calls=%d  effects=%d  (delta of /stats; %s; acknowledged keys: %d)\n",
		r.CallsDelta, r.EffectsDelta, drain, r.AckedKeys)
	if !r.SameKey { // one call: a pace would mean nothing
		fmt.Fprintf(&b, "finished=%d  in %.3fs (load + drain)  executed=%.1f calls/s\n",
			r.FinishedDelta, r.WallS+r.DrainS, r.FinishedRPS)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	b.Reset()

	if r.Attempts != nil {
		rows := make([][]string, 0, len(r.Attempts.Buckets))
		for _, a := range r.Attempts.Buckets {
			rows = append(rows, []string{strconv.FormatInt(a.Attempt, 10), strconv.FormatInt(a.Calls, 10), fmt.Sprintf("%.1f%%", a.SharePct)})
		}
		fmt.Fprintln(w, "attempts:")
		t := tablewriter.NewTable(w, tablewriter.WithHeader([]string{"attempt", "calls", "share"}))
		if err := t.Bulk(rows); err != nil {
			return err
		}
		if err := t.Render(); err != nil {
			return err
		}
		if r.Attempts.Hint != "" {
			fmt.Fprintln(&b, "hint: "+r.Attempts.Hint)
		}
	} else if r.AttemptsNote != "" {
		fmt.Fprintf(&b, "attempts: %s\n", r.AttemptsNote)
	}

	if c := r.Ceiling; c != nil {
		fmt.Fprintf(&b, "ceiling (bare handler, same client and load): n=%d  wall=%.3fs  rps=%.1f\n", c.N, c.WallS, c.RPS)
		fmt.Fprintf(&b, "  %s\n  %s\n", c.LatencyMS, statusLine(c.LoadStats))
		fmt.Fprintf(&b, "service rps = %.2f of the ceiling (%.1f / %.1f)\n", c.Fraction, r.RPS, c.RPS)
		if r.Server != "in-process" {
			// The bare handler always runs inside the bench; an external
			// service is another process, possibly another machine.
			fmt.Fprintln(&b, "  note: the ceiling ran in the bench's own process, the service did not")
		}
	}
	for _, c := range r.Checks {
		verdict := "PASS"
		if !c.OK {
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", verdict, c.Name, c.Detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// classLine sorts the answers into what the checks judge them by:
// "answers: 2xx=300  back-pressure(429/503)=0  unexpected=0  no response=0".
func classLine(s LoadStats) string {
	var ok, bp, other int
	for code, n := range s.Status {
		c, _ := strconv.Atoi(code)
		switch {
		case c >= 200 && c <= 299:
			ok += n
		case backpressureStatus(c):
			bp += n
		default:
			other += n
		}
	}
	return fmt.Sprintf("answers: 2xx=%d  back-pressure(429/503)=%d  unexpected=%d  no response=%d", ok, bp, other, s.Status0)
}

// statusLine renders "http_202=300  status0=0", statuses ascending.
func statusLine(s LoadStats) string {
	codes := make([]string, 0, len(s.Status))
	for code := range s.Status {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	parts := make([]string, 0, len(codes)+1)
	for _, code := range codes {
		parts = append(parts, fmt.Sprintf("http_%s=%d", code, s.Status[code]))
	}
	parts = append(parts, fmt.Sprintf("status0=%d", s.Status0))
	return strings.Join(parts, "  ")
}
