package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType    string     `json:"Node Type"`
	SubplanName string     `json:"Subplan Name"`
	IndexName   string     `json:"Index Name"`
	Plans       []planNode `json:"Plans"`
}

// find returns the first node (depth first) for which match is true.
func (n planNode) find(match func(planNode) bool) (planNode, bool) {
	if match(n) {
		return n, true
	}
	for _, c := range n.Plans {
		if f, ok := c.find(match); ok {
			return f, true
		}
	}
	return planNode{}, false
}

// seedHistory adds finished and pending calls straight into the table, as
// a server that has run a while leaves it, and refreshes the statistics.
func seedHistory(t *testing.T, s *Store, finished, pending int) {
	t.Helper()
	for _, q := range []struct {
		sql string
		n   int
	}{
		{`INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, attempt, created_at, updated_at)
		  SELECT 'c_s' || g, 'ks' || g, 'f', 'charge', '{}', 'succeeded', 1, 1000 + g * 0.001, 1000 + g * 0.001
		  FROM generate_series(1, $1::int) g`, finished},
		{`INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, attempt, created_at, updated_at)
		  SELECT 'c_p' || g, 'kp' || g, 'f', 'charge', '{}', 'pending', 0, 2000 + g * 0.001, 2000 + g * 0.001
		  FROM generate_series(1, $1::int) g`, pending},
	} {
		if _, err := s.pool.Exec(t.Context(), q.sql, q.n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(t.Context(), `ANALYZE calls`); err != nil {
		t.Fatal(err)
	}
}

// TestClaimPendingPlan checks how PostgreSQL runs the claim on a table with
// a history: the pending pick reads idx_calls_pending in order and sorts
// nothing (the old single pick walked idx_calls_created past every finished
// call), and the claim still takes the oldest pending calls.
func TestClaimPendingPlan(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	seedHistory(t, s, 5000, 500)

	var raw string
	if err := s.pool.QueryRow(t.Context(), `EXPLAIN (FORMAT JSON) `+claimSQL, "w", 8, 30.0, "w", []string{}, []string{}, []int32{}, store.TakenOverFormat).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	pending, ok := plans[0].Plan.find(func(n planNode) bool { return n.SubplanName == "CTE pending" })
	if !ok {
		t.Fatalf("no CTE pending in the plan:\n%s", raw)
	}
	if _, ok := pending.find(func(n planNode) bool { return n.IndexName == "idx_calls_pending" }); !ok {
		t.Errorf("the pending pick does not read idx_calls_pending:\n%s", raw)
	}
	if sort, ok := pending.find(func(n planNode) bool { return strings.Contains(n.NodeType, "Sort") }); ok {
		t.Errorf("the pending pick sorts (%s):\n%s", sort.NodeType, raw)
	}

	got, err := s.ClaimNext(t.Context(), "w", time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range got {
		ids = append(ids, c.CallID)
	}
	if want := "c_p1 c_p2 c_p3"; strings.Join(ids, " ") != want {
		t.Fatalf("claimed %v, want the oldest pending %s", ids, want)
	}
}

// TestMigratesFromVersion2: a database at schema version 2 (a global
// unique key, effects referencing calls) is refused by a read-only store
// and migrated by a read-write one: calls kept under the default
// principal, effects kept, keys unique per principal from then on.
func TestMigratesFromVersion2(t *testing.T) {
	u := pgtest.Schema(t)
	pgtest.Exec(t, u, `CREATE TABLE schema_version (version integer NOT NULL, applied_at double precision NOT NULL)`)
	for _, m := range migrations[:2] {
		pgtest.Exec(t, u, m)
	}
	pgtest.Exec(t, u, `INSERT INTO schema_version VALUES (1, 0), (2, 0);
INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, created_at, updated_at)
  VALUES ('c_0000000000000001', 'k1', 'f', 'charge', '{}', 'pending', 1, 1),
         ('c_0000000000000002', 'k2', 'f', 'charge', '{}', 'succeeded', 2, 2);
INSERT INTO effects VALUES ('eff_2', 'c_0000000000000002', 'charge', 1, 2)`)

	if ro, err := Open(t.Context(), u, store.Options{ReadOnly: true}); err == nil {
		ro.Close()
		t.Fatal("read-only open of schema version 2 succeeded; its reads need calls.principal")
	}
	rw := open(t, u, store.Options{})
	if v := scalar[int](t, rw, `SELECT max(version) FROM schema_version`); v != schemaVersion {
		t.Fatalf("schema version after reopen = %d, want %d", v, schemaVersion)
	}
	if c, err := rw.GetByKey(t.Context(), store.DefaultPrincipal, "k1"); err != nil || c.CallID != "c_0000000000000001" {
		t.Fatalf("old call under the default principal = %+v, %v", c, err)
	}
	n := newCall(t, "k1")
	n.Principal = "p"
	if _, out, err := rw.CreateOrGet(t.Context(), n); err != nil || out != store.Created {
		t.Fatalf("another principal, an old key: %v, %v; want created", out, err)
	}
	if got, err := rw.ClaimNext(t.Context(), "w", time.Minute, 1); err != nil || len(got) != 1 || got[0].CallID != "c_0000000000000001" {
		t.Fatalf("claim after migrating = %v, %v; want c_0000000000000001", got, err)
	}
	// The effect outlives its call now.
	if _, err := rw.pool.Exec(t.Context(), `DELETE FROM calls WHERE call_id = 'c_0000000000000002'`); err != nil {
		t.Fatalf("deleting a call with an effect after migrating: %v", err)
	}
	if e, err := rw.ListEffects(t.Context(), 0); err != nil || len(e) != 1 {
		t.Fatalf("effects = %v, %v; want the one", e, err)
	}
}

// TestListCallsGenericPlan: the scheduler lists the running calls after
// every completion through a prepared statement, which PostgreSQL soon runs
// with a generic plan. That plan, forced here, must find the running calls
// through idx_calls_running, not walk every call newest first.
func TestListCallsGenericPlan(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	seedHistory(t, s, 5000, 500)
	conn, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	query, ok := listCallsSQL(store.StatusRunning)
	if !ok {
		t.Fatal("no statement for running")
	}
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE list_running AS ` + query} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer conn.Exec(context.Background(), `DEALLOCATE list_running; RESET plan_cache_mode`) //nolint:errcheck // cleanup
	var raw string
	if err := conn.QueryRow(t.Context(), `EXPLAIN (FORMAT JSON) EXECUTE list_running(NULL)`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	if _, ok := plans[0].Plan.find(func(n planNode) bool { return n.IndexName == "idx_calls_running" }); !ok {
		t.Fatalf("generic plan of the running list does not use idx_calls_running:\n%s", raw)
	}
	if _, ok := listCallsSQL("bogus"); ok {
		t.Fatal("a statement for an unknown status")
	}
	if got, err := s.ListCalls(t.Context(), store.ListFilter{Status: "bogus"}); err != nil || len(got) != 0 {
		t.Fatalf("ListCalls(bogus) = %d calls, %v; want none", len(got), err)
	}
}
