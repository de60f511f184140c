package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

// explain returns the plan of query (EXPLAIN (FORMAT JSON), not run).
func explain(t *testing.T, s *Store, query string, args ...any) (planNode, string) {
	t.Helper()
	var raw string
	if err := s.pool.QueryRow(t.Context(), `EXPLAIN (FORMAT JSON) `+query, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	return plans[0].Plan, raw
}

// TestRunningIndexPlans: with no index of every call's status, the claim's
// pick of expired leases and the recovery's read the running calls from
// idx_calls_running, never the table or an index of every call.
func TestRunningIndexPlans(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	seedHistory(t, s, 5000, 500)
	startOldestPending(t, s, 50, 1) // their leases long expired
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"claim", claimSQL, []any{"w", 8, 30.0, "w", []string{}, []string{}, []int32{}, store.TakenOverFormat}},
		{"recover", recoverSQL, nil},
	} {
		plan, raw := explain(t, s, q.sql, q.args...)
		expired, ok := plan.find(func(n planNode) bool { return n.SubplanName == "CTE expired" })
		if !ok {
			t.Fatalf("%s: no CTE expired in the plan:\n%s", q.name, raw)
		}
		if _, ok := expired.find(func(n planNode) bool { return n.IndexName == "idx_calls_running" }); !ok {
			t.Errorf("%s: the expired pick does not read idx_calls_running:\n%s", q.name, raw)
		}
		if n, ok := expired.find(func(n planNode) bool {
			return strings.Contains(n.NodeType, "Seq Scan") || n.IndexName == "idx_calls_created" || n.IndexName == "calls_pkey"
		}); ok {
			t.Errorf("%s: the expired pick reads every call (%s %s):\n%s", q.name, n.NodeType, n.IndexName, raw)
		}
	}
	if got, err := s.RecoverExpired(t.Context()); err != nil || len(got) != 50 {
		t.Fatalf("recovered %d calls, %v; want the 50 expired", len(got), err)
	}
}

// TestFinalIndexPlans: the retention purge picks the oldest final calls
// from idx_calls_final_updated in order (no sort of every final call), and
// the rates count the finished calls of the window from it.
func TestFinalIndexPlans(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	seedHistory(t, s, 5000, 500)
	plan, raw := explain(t, s, purgeSQL, 3600.0, 500, true)
	picked, ok := plan.find(func(n planNode) bool { return n.SubplanName == "CTE picked" })
	if !ok {
		t.Fatalf("purge: no CTE picked in the plan:\n%s", raw)
	}
	if _, ok := picked.find(func(n planNode) bool { return n.IndexName == "idx_calls_final_updated" }); !ok {
		t.Errorf("purge: the pick does not read idx_calls_final_updated:\n%s", raw)
	}
	if n, ok := picked.find(func(n planNode) bool {
		return strings.Contains(n.NodeType, "Sort") || strings.Contains(n.NodeType, "Seq Scan")
	}); ok {
		t.Errorf("purge: the pick has a %s:\n%s", n.NodeType, raw)
	}
	plan, raw = explain(t, s, ratesSQL, 2000.4) // the window: the newest 100 calls
	for _, idx := range []string{"idx_calls_created", "idx_calls_final_updated"} {
		if _, ok := plan.find(func(n planNode) bool { return n.IndexName == idx }); !ok {
			t.Errorf("rates: no read of %s:\n%s", idx, raw)
		}
	}
	if n, ok := plan.find(func(n planNode) bool { return strings.Contains(n.NodeType, "Seq Scan") }); ok {
		t.Errorf("rates: a %s:\n%s", n.NodeType, raw)
	}
}

// TestKeysetStatusGenericPlan: a keyset listing of one status with no
// principal (a gated tool's waiting calls, on the console; redrive) runs,
// once pgx has prepared it and PostgreSQL chose a generic plan, from the
// partial index of that status: with the status a parameter, no partial
// index could serve it and the plan walked every call.
func TestKeysetStatusGenericPlan(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	seedHistory(t, s, 5000, 500)
	startOldestPending(t, s, 50, 1e12)
	conn, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), `RESET plan_cache_mode`) //nolint:errcheck // cleanup
	for _, tc := range []struct {
		status store.Status
		index  string
	}{{store.StatusPending, "idx_calls_pending"}, {store.StatusRunning, "idx_calls_running"}} {
		query, args := keysetSQL(store.ListFilter{Tool: "charge", Status: tc.status, Limit: 1})
		name := "keyset_" + string(tc.status)
		if _, err := conn.Exec(t.Context(), `PREPARE `+name+` AS `+query); err != nil {
			t.Fatal(err)
		}
		// EXECUTE takes its arguments as literals.
		var lits []string
		for _, a := range args {
			switch v := a.(type) {
			case string:
				lits = append(lits, "'"+strings.ReplaceAll(v, "'", "''")+"'")
			case *int:
				lits = append(lits, strconv.Itoa(*v))
			default:
				t.Fatalf("argument %#v: no literal for it", a)
			}
		}
		var raw string
		if err := conn.QueryRow(t.Context(), `EXPLAIN (FORMAT JSON) EXECUTE `+name+`(`+strings.Join(lits, ", ")+`)`).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var plans []struct {
			Plan planNode `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
			t.Fatalf("EXPLAIN output %s: %v", raw, err)
		}
		if _, ok := plans[0].Plan.find(func(n planNode) bool { return n.IndexName == tc.index }); !ok {
			t.Errorf("generic plan of the keyset listing of %s calls does not read %s:\n%s", tc.status, tc.index, raw)
		}
		got, err := s.ListCalls(t.Context(), store.ListFilter{Tool: "charge", Status: tc.status, Limit: 1})
		if err != nil || len(got) != 1 || got[0].Status != tc.status {
			t.Fatalf("keyset listing of %s calls = %v, %v", tc.status, got, err)
		}
	}
}

// TestMigratesFromVersion12: a database at schema version 12
// (idx_calls_status over every call) is read by a read-only store (no read
// names an index) and migrated by a read-write one: the indexes of calls
// become those of TestCallsIndexes, every call is counted under its status,
// and an expired running call of before the migration is recovered.
func TestMigratesFromVersion12(t *testing.T) {
	u := pgtest.Schema(t)
	pgtest.Exec(t, u, `CREATE TABLE schema_version (version integer NOT NULL, applied_at double precision NOT NULL)`)
	for i, m := range migrations[:12] {
		pgtest.Exec(t, u, m)
		pgtest.Exec(t, u, `INSERT INTO schema_version VALUES ($1, 0)`, i+1)
	}
	pgtest.Exec(t, u, `
INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, attempt, lease_until, owner, created_at, updated_at)
VALUES ('c_0000000000000000', 'k0', 'f', 'charge', '{}', 'pending', 0, NULL, NULL, 1, 1),
       ('c_0000000000000001', 'k1', 'f', 'charge', '{}', 'running', 1, 1, 'gone', 2, 2),
       ('c_0000000000000002', 'k2', 'f', 'charge', '{}', 'succeeded', 1, NULL, NULL, 3, 3),
       ('c_0000000000000003', 'k3', 'f', 'charge', '{}', 'failed', 1, NULL, NULL, 4, 4)`)

	ro := open(t, u, store.Options{ReadOnly: true})
	if st, err := ro.Stats(t.Context()); err != nil || st.Calls != 4 {
		t.Fatalf("read-only Stats at version 12 = %+v, %v; want 4 calls", st, err)
	}
	rw := open(t, u, store.Options{})
	if v := scalar[int](t, rw, `SELECT max(version) FROM schema_version`); v != schemaVersion {
		t.Fatalf("schema version after migrating = %d, want %d", v, schemaVersion)
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
}

// startOldestPending makes the n oldest pending calls of seedHistory's
// history running, their leases ending at leaseUntil, and refreshes the
// planner's statistics.
func startOldestPending(t *testing.T, s *Store, n int, leaseUntil float64) {
	t.Helper()
	if _, err := s.pool.Exec(t.Context(), `
UPDATE calls SET status = 'running', owner = 'w', lease_until = $2
WHERE call_id IN (SELECT call_id FROM calls WHERE status = 'pending' ORDER BY created_at LIMIT $1)`, n, leaseUntil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(t.Context(), `ANALYZE calls`); err != nil {
		t.Fatal(err)
	}
}
