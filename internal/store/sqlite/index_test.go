package sqlite

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// planOf is the EXPLAIN QUERY PLAN of query, one step a line, with a line
// break after the last so "SCAN calls\n" matches only a bare table scan.
func planOf(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	return strings.Join(queryPlan(t, s, query, args...), "\n") + "\n"
}

// TestRunningIndexPlans: with no index of every call's status, each
// statement that looks for running calls reads idx_calls_running, and each
// that looks for pending calls idx_calls_pending: none walks
// idx_calls_created or the table, whose size is the history.
func TestRunningIndexPlans(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	seed(t, s, 50)
	for _, q := range []struct {
		name, sql, index string
		args             []any
	}{
		{"expired pick", sqlPickExpired, "idx_calls_running", []any{1.0, `[]`, 8}},
		{"recover pre-check", sqlHasExpired, "idx_calls_running", []any{1.0}},
		{"recover pick", sqlRecoverPick, "idx_calls_running", []any{1.0}},
	} {
		plan := planOf(t, s, q.sql, q.args...)
		t.Logf("%s:\n%s", q.name, plan)
		if !strings.Contains(plan, "INDEX "+q.index) || strings.Contains(plan, "idx_calls_created") || strings.Contains(plan, "SCAN calls\n") {
			t.Errorf("%s plan:\n%swant a read of %s, no other index of calls, no table scan", q.name, plan, q.index)
		}
	}
}

// TestListByStatusPlans: the lists of running and of pending calls (the
// dead-owner pass lists the running ones every scheduler interval; the
// console a gated tool's waiting ones) read their partial index and sort
// only its rows, and the pending count per principal reads
// idx_calls_pending. Unforced, the running list and the pending count
// walked an index of every call (hence their INDEXED BY).
func TestListByStatusPlans(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	seed(t, s, 50)
	waiting, waitingArgs := keysetQuery(store.ListFilter{Tool: "charge", Status: store.StatusPending, Limit: 1})
	for _, q := range []struct {
		name, sql, index string
		args             []any
	}{
		{"running list", sqlListByStatus(store.StatusRunning), "idx_calls_running", []any{-1}},
		{"a tool's pending calls (keyset)", waiting, "idx_calls_pending", waitingArgs},
		{"pending list", sqlListByStatus(store.StatusPending), "idx_calls_pending", []any{10}},
		{"pending by principal", sqlPendingByPrincipal, "idx_calls_pending", []any{1}},
	} {
		plan := planOf(t, s, q.sql, q.args...)
		t.Logf("%s:\n%s", q.name, plan)
		if !strings.Contains(plan, "INDEX "+q.index) || strings.Contains(plan, "idx_calls_created") ||
			strings.Contains(plan, "sqlite_autoindex_calls") || strings.Contains(plan, "SCAN calls\n") {
			t.Errorf("%s plan:\n%swant a read of %s only", q.name, plan, q.index)
		}
	}
	// And they list what they say.
	for _, st := range []store.Status{store.StatusRunning, store.StatusPending, store.StatusSucceeded} {
		got, err := s.ListCalls(t.Context(), store.ListFilter{Status: st})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatalf("no %s calls listed; seed leaves some", st)
		}
		for i, c := range got {
			if c.Status != st {
				t.Fatalf("%s list holds a %s call", st, c.Status)
			}
			if i > 0 && c.CreatedAt > got[i-1].CreatedAt {
				t.Fatalf("%s list not newest first at %d", st, i)
			}
		}
	}
	if n, err := s.PendingByPrincipal(t.Context(), 1); err != nil || n[store.DefaultPrincipal] == 0 {
		t.Fatalf("PendingByPrincipal = %v, %v; want the seeded pending calls", n, err)
	}
}

// TestStatsPlan: /stats counts calls by status from the three partial
// indexes, the final calls (most of them) in one covering read of
// idx_calls_final_updated with no sort, never the table: there is no index
// of every call's status to scan instead.
func TestStatsPlan(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	seed(t, s, 50)
	plan := planOf(t, s, sqlStatsByStatus)
	t.Logf("stats:\n%s", plan)
	for _, idx := range []string{"INDEX idx_calls_pending\n", "INDEX idx_calls_running\n", "COVERING INDEX idx_calls_final_updated\n"} {
		if !strings.Contains(plan, idx) {
			t.Errorf("stats plan:\n%swant a read of %s", plan, idx)
		}
	}
	if strings.Contains(plan, "SCAN calls\n") || strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("stats plan:\n%sscans the table or sorts", plan)
	}
}

// TestRatesPlan: the console's rates search idx_calls_created and
// idx_calls_final_updated from the window's start, the second a covering
// read (the index holds status), neither a scan of every call.
func TestRatesPlan(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	seed(t, s, 50)
	plan := planOf(t, s, sqlRates, 1.0, 1.0)
	t.Logf("rates:\n%s", plan)
	for _, step := range []string{"SEARCH calls USING COVERING INDEX idx_calls_created (created_at>?)",
		"SEARCH calls USING COVERING INDEX idx_calls_final_updated (updated_at>?)"} {
		if !strings.Contains(plan, step+"\n") {
			t.Errorf("rates plan:\n%swant %s", plan, step)
		}
	}
}

// TestMigratesVersion12: a database at schema version 12 (idx_calls_status
// over every call) is refused by a read-only store, whose reads name the
// new indexes, and migrated by a read-write one: the indexes of calls
// become those of TestCallsIndexes, every call is counted under its status,
// and an expired running call of before the migration is still found and
// recovered.
func TestMigratesVersion12(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	old, err := openPool(path, url.Values{"_pragma": {"foreign_keys(1)"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range migrations[:12] {
		if _, err := old.Exec(m); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
	}
	// pending, running under an expired lease, succeeded, failed.
	for i, st := range []string{"pending", "running", "succeeded", "failed"} {
		id := fmt.Sprintf("c_%016x", i)
		var lease, owner any
		if st == "running" {
			lease, owner = 1.0, "gone"
		}
		if _, err := old.Exec(`INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, attempt,
			lease_until, owner, created_at, updated_at) VALUES (?, ?, 'f', 'charge', '{}', ?, 1, ?, ?, ?, ?)`,
			id, id, st, lease, owner, float64(i+1), float64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.Exec(`PRAGMA user_version = 12`); err != nil {
		t.Fatal(err)
	}
	old.Close()

	if ro, err := Open(t.Context(), path, store.Options{ReadOnly: true}); err == nil {
		ro.Close()
		t.Fatal("read-only open of schema version 12 succeeded; its reads name idx_calls_running")
	} else if !strings.Contains(err.Error(), "open it read-write once to migrate") {
		t.Fatalf("read-only open of schema version 12: %v; want the advice to migrate it first", err)
	}
	rw := openAt(t, path, store.Options{})
	var v int
	if err := rw.r.QueryRowContext(t.Context(), `PRAGMA user_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version after migrating = %d (%v), want %d", v, err, schemaVersion)
	}
	if got := indexesOfCalls(t, rw); !slices.Equal(got, callsIndexes) {
		t.Fatalf("indexes of calls after migrating:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(callsIndexes, "\n"))
	}
	st, err := rw.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range store.Statuses {
		if st.ByStatus[s] != 1 {
			t.Fatalf("stats after migrating = %+v, want one call of each status", st)
		}
	}
	if got, err := rw.RecoverExpired(t.Context()); err != nil || len(got) != 1 || got[0] != "c_0000000000000001" {
		t.Fatalf("recovered after migrating = %v, %v; want the expired running call", got, err)
	}
	if ro, err := Open(t.Context(), path, store.Options{ReadOnly: true}); err != nil {
		t.Fatalf("read-only open after migrating: %v", err)
	} else {
		ro.Close()
	}
}
