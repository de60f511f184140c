package inspect

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/idemctl/idemctl/internal/store"
)

// DefaultHintThreshold is the share of calls needing more than one attempt
// above which `inspect attempts` prints a hint (docs/operations.md, "Metrics":
// watch the share of attempt > 1).
const DefaultHintThreshold = 0.05

// AttemptsOptions format `inspect attempts`.
type AttemptsOptions struct {
	Output Format
	// HintThreshold is the share (0–1) of calls that ran and needed more
	// than one attempt above which a hint is printed; 0 means
	// DefaultHintThreshold.
	HintThreshold float64
}

// AttemptsReport is the attempt distribution and what it says.
type AttemptsReport struct {
	// Total is the number of calls.
	Total int64 `json:"total"`
	// Buckets is the distribution, attempt ascending. Attempt 0 is a call
	// that was never claimed (pending).
	Buckets []AttemptRow `json:"buckets"`
	// Ran is the number of calls claimed at least once (attempt ≥ 1).
	Ran int64 `json:"ran"`
	// MultiAttempt is the number of calls with attempt > 1.
	MultiAttempt int64 `json:"multi_attempt"`
	// MultiAttemptPct is MultiAttempt as a percentage of Ran.
	MultiAttemptPct float64 `json:"multi_attempt_pct"`
	// Hint explains a high MultiAttemptPct (printed after the table as
	// "hint: ..."); "" when it is low.
	Hint string `json:"hint"`
}

// AttemptRow is one bucket of the distribution.
type AttemptRow struct {
	Attempt  int64   `json:"attempt"`
	Calls    int64   `json:"calls"`
	SharePct float64 `json:"share_pct"`
}

// Attempts computes the attempt distribution (`SELECT attempt,
// count(*) FROM calls GROUP BY attempt`) and prints it with a hint when many
// calls needed more than one attempt. Normally attempts sit at 1; a heavy
// tail means leases shorter than execution, too few workers, slow tools or
// a crash loop (docs/lifecycle.md, "Leases", "Recovery").
func Attempts(ctx context.Context, st store.Store, opts AttemptsOptions, w io.Writer) (AttemptsReport, error) {
	buckets, err := st.Attempts(ctx)
	if err != nil {
		return AttemptsReport{}, fmt.Errorf("reading attempt distribution: %w", err)
	}
	rep := Distribution(buckets, opts.HintThreshold)
	if opts.Output == FormatJSON {
		return rep, writeJSON(w, rep)
	}
	rows := make([][]string, 0, len(rep.Buckets))
	for _, b := range rep.Buckets {
		rows = append(rows, []string{strconv.FormatInt(b.Attempt, 10), strconv.FormatInt(b.Calls, 10), fmt.Sprintf("%.1f%%", b.SharePct)})
	}
	if err := render(newTable(w, "attempt", "calls", "share"), rows); err != nil {
		return rep, err
	}
	if _, err := fmt.Fprintf(w, "%d calls; %d ran, %d (%.1f%%) needed more than one attempt\n",
		rep.Total, rep.Ran, rep.MultiAttempt, rep.MultiAttemptPct); err != nil {
		return rep, err
	}
	if rep.Hint != "" {
		if _, err := fmt.Fprintln(w, "hint: "+rep.Hint); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Distribution turns store buckets into an AttemptsReport with shares and,
// when more than threshold (0 = DefaultHintThreshold) of the calls that ran
// needed more than one attempt, a hint. bench uses it too.
func Distribution(buckets []store.AttemptBucket, threshold float64) AttemptsReport {
	if threshold <= 0 {
		threshold = DefaultHintThreshold
	}
	rep := AttemptsReport{Buckets: make([]AttemptRow, 0, len(buckets))}
	for _, b := range buckets {
		rep.Total += b.Calls
		if b.Attempt >= 1 {
			rep.Ran += b.Calls
		}
		if b.Attempt > 1 {
			rep.MultiAttempt += b.Calls
		}
	}
	for _, b := range buckets {
		rep.Buckets = append(rep.Buckets, AttemptRow{Attempt: b.Attempt, Calls: b.Calls, SharePct: pct(b.Calls, rep.Total)})
	}
	rep.MultiAttemptPct = pct(rep.MultiAttempt, rep.Ran)
	if rep.Ran > 0 && float64(rep.MultiAttempt) > threshold*float64(rep.Ran) {
		rep.Hint = fmt.Sprintf("%.1f%% of the calls that ran needed more than one attempt (over %.0f%%). "+
			"Usual causes: the lease is shorter than the tool's run time, so running calls are "+
			"taken as expired; too few workers, so calls queue past their lease; tools slower than expected; "+
			"a process crashing and restarting. Same-key retries of retryable failures (retry_reset) also add "+
			"attempts. Look for recover and fenced events with `idemctl inspect audit`.",
			rep.MultiAttemptPct, threshold*100)
	}
	return rep
}

// pct is part/whole as a percentage, 0 when whole is 0.
func pct(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}
