package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/inspect"
	"github.com/idemctl/idemctl/internal/store"
)

// evidenceRows are the database rows evidence printed.
type evidenceRows struct {
	calls  []store.Call
	events []store.AuditEvent
}

// expect is what a scenario's database must hold at the end.
type expect struct {
	calls   int64
	effects int64
}

// evidence prints what the database and the server say happened — the
// calls, effects, audit and dupes, then /stats — fills the
// report's numbers, and checks the invariants every scenario shares against
// exp. answers are the call ids the clients were given (in 2xx replies).
// It returns the rows it read, and an error only when the evidence could not
// be read.
func (e *env) evidence(ctx context.Context, base string, rep *Report, exp expect, answers []string) (evidenceRows, error) {
	st, err := e.openDB(ctx)
	if err != nil {
		return evidenceRows{}, err
	}
	defer st.Close()
	table := inspect.FormatTable

	fmt.Fprintf(e.out, "--- calls (database, read-only) ---\n")
	calls, err := inspect.Calls(ctx, st, inspect.CallsOptions{Output: table}, e.out)
	if err != nil {
		return evidenceRows{}, err
	}
	fmt.Fprintf(e.out, "--- effects ---\n")
	if _, err := inspect.Effects(ctx, st, inspect.EffectsOptions{Output: table}, e.out); err != nil {
		return evidenceRows{}, err
	}
	fmt.Fprintf(e.out, "--- audit ---\n")
	events, err := inspect.Audit(ctx, st, inspect.AuditOptions{Output: table}, e.out)
	if err != nil {
		return evidenceRows{}, err
	}
	fmt.Fprintf(e.out, "--- dupes (effects sharing a call_id; must be empty) ---\n")
	dupes, err := inspect.Dupes(ctx, st, inspect.DupesOptions{Output: table}, e.out)
	if err != nil {
		return evidenceRows{}, err
	}
	stats, err := st.Stats(ctx)
	if err != nil {
		return evidenceRows{}, fmt.Errorf("reading stats: %w", err)
	}

	fmt.Fprintf(e.out, "--- /stats ---\n")
	httpStats, statsErr := statsOver(ctx, base)
	if statsErr != nil {
		fmt.Fprintf(e.out, "(GET /stats failed: %v)\n", statsErr)
	} else {
		fmt.Fprintf(e.out, "%s\n", compact(httpStats.Raw))
	}

	rep.Calls, rep.Effects = stats.Calls, stats.Effects
	rep.ByStatus = map[string]int64{}
	for s, n := range stats.ByStatus {
		if n > 0 {
			rep.ByStatus[string(s)] = n
		}
	}
	for _, ev := range events {
		switch ev.Event {
		case store.EventFenced:
			rep.Fenced++
		case store.EventRecover:
			rep.Recovered++
		}
	}
	if len(calls) > 0 {
		oldest := calls[len(calls)-1] // newest first: the last is the first call made
		rep.CallID, rep.Status, rep.Attempt = oldest.CallID, string(oldest.Status), oldest.Attempt
	}

	// docs/lifecycle.md, "Invariants", invariant by invariant.
	if stats.Calls != exp.calls {
		rep.fail("invariant 1 (one idempotency key is one logical call): calls=%d, want %d", stats.Calls, exp.calls)
	}
	if ids := distinct(answers); len(ids) > 1 && exp.calls == 1 {
		rep.fail("invariant 1: the client's answers named %d different calls %v", len(ids), ids)
	} else if len(ids) == 1 && rep.CallID != "" && ids[0] != rep.CallID && exp.calls == 1 {
		rep.fail("invariant 1: the client was answered with call %s, the database holds %s", ids[0], rep.CallID)
	}
	switch {
	case stats.Effects > exp.effects:
		rep.fail("invariant 2 (at most one effect per call): effects=%d, want %d — a duplicate side effect", stats.Effects, exp.effects)
	case stats.Effects < exp.effects:
		rep.fail("the succeeded call's effect is missing: effects=%d, want %d", stats.Effects, exp.effects)
	}
	if len(dupes) > 0 {
		rep.fail("invariant 2 (effects.call_id UNIQUE): %d call(s) with more than one effect", len(dupes))
	}
	if open := stats.ByStatus[store.StatusPending] + stats.ByStatus[store.StatusRunning]; open > 0 {
		rep.fail("invariant 4 (every accepted call reaches a final state): %d call(s) still pending or running", open)
	}
	if statsErr == nil && (httpStats.Calls != stats.Calls || httpStats.Effects != stats.Effects) {
		rep.fail("/stats says calls=%d effects=%d, the database calls=%d effects=%d",
			httpStats.Calls, httpStats.Effects, stats.Calls, stats.Effects)
	}
	return evidenceRows{calls: calls, events: events}, nil
}

// fail records a broken invariant.
func (r *Report) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// distinct returns the distinct non-empty strings of ids, sorted.
func distinct(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// answeredIDs collects the call ids of a client's 2xx attempts.
func answeredIDs(res client.Submission) []string {
	var ids []string
	for _, a := range res.Attempts {
		if a.HTTP/100 == 2 {
			ids = append(ids, a.CallID)
		}
	}
	return ids
}

// jsonLine renders v as one compact JSON line (without the newline).
func jsonLine(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return compact(b), nil
}

// compact squeezes JSON onto one line; non-JSON is returned as is.
func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(bytes.TrimSpace(b))
	}
	return buf.String()
}

// statsOver reads GET /stats of the server at base.
func statsOver(ctx context.Context, base string) (client.Stats, error) {
	c, err := client.New(base)
	if err != nil {
		return client.Stats{}, err
	}
	return c.Stats(ctx)
}
