package sqlite

import (
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// queryPlan returns the EXPLAIN QUERY PLAN lines of query, one per step.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var (
			id, parent, unused int
			detail             string
		)
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestClaimPlans checks how SQLite runs the claim's queries: the pending
// pick must read idx_calls_pending in order and stop at LIMIT, never sort
// the queue (the old single query's USE TEMP B-TREE FOR ORDER BY made every
// claim cost O(queue)); the expired pick, the claim's UPDATE of the calls
// picked and the pre-check must search an index, never scan the table.
func TestClaimPlans(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	// Some rows of every kind, so the plan is that of a used database.
	seed(t, s, 50)

	plan := strings.Join(queryPlan(t, s, sqlPickPending, 1.0, `["sleep"]`, 8), "\n")
	t.Logf("pending pick:\n%s", plan)
	if !strings.Contains(plan, "USING INDEX idx_calls_pending") || strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("pending pick plan:\n%s\nwant a read of idx_calls_pending in order, no TEMP B-TREE", plan)
	}
	// The claim's UPDATE and its audit rows find each picked call by its
	// rowid, whatever the queue: a search of an index of calls would walk
	// every pending call for each claim.
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"claim", sqlClaim, []any{2.0, "w", 1.0, `[1,2]`, 1.0, 1.0}},
		{"claimed audit rows", sqlInsertAudits, []any{1.0, "claimed", "w", `[1,2]`}},
	} {
		plan = strings.Join(queryPlan(t, s, q.sql, q.args...), "\n")
		t.Logf("%s:\n%s", q.name, plan)
		if !regexp.MustCompile(`SEARCH (calls|c) USING INTEGER PRIMARY KEY \(rowid=\?\)`).MatchString(plan) ||
			strings.Contains(plan, "idx_calls_") || strings.Contains(plan, "SCAN calls") || strings.Contains(plan, "SCAN c\n") {
			t.Errorf("%s plan:\n%s\nwant a search of calls by rowid, nothing else of calls", q.name, plan)
		}
	}
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"expired pick", sqlPickExpired, []any{1.0, `["sleep"]`, 8}},
		{"claim pre-check", sqlHasClaimable, []any{1.0, `["sleep"]`, 1.0, `["sleep"]`}},
		{"recover pre-check", sqlHasExpired, []any{1.0}},
	} {
		steps := queryPlan(t, s, q.sql, q.args...)
		t.Logf("%s:\n%s", q.name, strings.Join(steps, "\n"))
		for _, step := range steps {
			if scansEveryCall(step) {
				t.Errorf("%s plan has a full scan %q; want index searches", q.name, step)
			}
		}
	}
}

// scansEveryCall tells whether a plan step reads the whole table calls or
// a whole index of every call. A scan of idx_calls_pending or
// idx_calls_running reads only the queue or the running calls.
func scansEveryCall(step string) bool {
	return strings.HasPrefix(step, "SCAN calls") &&
		!strings.HasSuffix(step, " idx_calls_pending") && !strings.HasSuffix(step, " idx_calls_running")
}

// TestQueuePlan: the queue count (run by the scheduler several times a
// second) reads only the partial index of pending calls, never the table.
func TestQueuePlan(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	seed(t, s, 50)
	plan := strings.Join(queryPlan(t, s, sqlQueue), "\n")
	t.Logf("queue:\n%s", plan)
	if !strings.Contains(plan, "COVERING INDEX idx_calls_pending") {
		t.Errorf("queue plan:\n%s\nwant a covering read of idx_calls_pending", plan)
	}
}

// seed creates n calls and leaves a third pending, a third running and a
// third succeeded.
func seed(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("c_%016x", i)
		if _, _, err := s.CreateOrGet(t.Context(), store.NewCall{
			CallID: id, IdemKey: id, Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
		}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ClaimNext(t.Context(), "seed", time.Hour, 2*n/3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got[:len(got)/2] {
		if _, err := s.Succeed(t.Context(), store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: "seed", Attempt: c.Attempt}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOldestMerge checks the merge of the two picks: oldest first by
// created_at then rowid, at most limit, nothing lost or repeated.
func TestOldestMerge(t *testing.T) {
	t.Parallel()
	c := func(rowid int64, at float64) candidate {
		return candidate{rowid: rowid, callID: fmt.Sprint(rowid), createdAt: at}
	}
	for _, tc := range []struct {
		name  string
		a, b  []candidate
		limit int
		want  []int64
	}{
		{"both empty", nil, nil, 3, []int64{}},
		{"only pending", []candidate{c(1, 1), c(2, 2)}, nil, 3, []int64{1, 2}},
		{"only expired", nil, []candidate{c(1, 1), c(2, 2)}, 1, []int64{1}},
		{"interleaved", []candidate{c(1, 1), c(3, 3), c(5, 5)}, []candidate{c(2, 2), c(4, 4)}, 4, []int64{1, 2, 3, 4}},
		{"same time, rowid decides", []candidate{c(7, 1)}, []candidate{c(6, 1)}, 2, []int64{6, 7}},
		{"limit cuts", []candidate{c(1, 1), c(2, 2)}, []candidate{c(3, 3)}, 2, []int64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []int64{}
			for _, x := range oldest(tc.a, tc.b, tc.limit) {
				got = append(got, x.rowid)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("oldest = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMigratesVersion2: a database at schema version 2 (a global unique
// key, effects referencing calls) is refused by a read-only store and
// migrated by a read-write one: every call kept, belonging to the default
// principal, its effect kept, keys unique per principal from then on, and
// the claim still takes the oldest first.
func TestMigratesVersion2(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	old, err := openPool(path, url.Values{"_pragma": {"foreign_keys(1)"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if _, err := old.Exec(m); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("c_%016x", i)
		if _, err := old.Exec(`INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, created_at, updated_at)
			VALUES (?, ?, 'f', 'charge', '{}', 'pending', ?, ?)`, id, id, float64(i+1), float64(i+1)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := old.Exec(`INSERT INTO effects VALUES ('eff_4', 'c_0000000000000004', 'charge', 1, 1.0); PRAGMA user_version = 2`); err != nil {
		t.Fatal(err)
	}
	old.Close()

	if ro, err := Open(t.Context(), path, store.Options{ReadOnly: true}); err == nil {
		ro.Close()
		t.Fatal("read-only open of schema version 2 succeeded; its reads need calls.principal")
	}

	rw := openAt(t, path, store.Options{})
	var v, idx int
	if err := rw.r.QueryRowContext(t.Context(), `PRAGMA user_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version after migrating = %d (%v), want %d", v, err, schemaVersion)
	}
	if err := rw.r.QueryRowContext(t.Context(),
		`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('idx_calls_pending', 'idx_calls_final_updated')`).Scan(&idx); err != nil || idx != 2 {
		t.Fatalf("partial indexes after migrating: %d (%v), want 2", idx, err)
	}
	if c, err := rw.GetByKey(t.Context(), store.DefaultPrincipal, ids[4]); err != nil || c.Principal != store.DefaultPrincipal {
		t.Fatalf("old call under the default principal = %+v, %v", c, err)
	}
	if e, err := rw.ListEffects(t.Context(), 0); err != nil || len(e) != 1 {
		t.Fatalf("effects after migrating = %v, %v; want the one", e, err)
	}
	// The key constraint is per principal now.
	if _, out, err := rw.CreateOrGet(t.Context(), store.NewCall{
		CallID: "c_00000000000000ff", Principal: "p", IdemKey: ids[0], Fingerprint: "g", Tool: "charge", ArgsJSON: []byte(`{}`),
	}); err != nil || out != store.Created {
		t.Fatalf("another principal, an old key: %v, %v; want created", out, err)
	}
	got, err := rw.ClaimNext(t.Context(), "w", time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := ids[:3]; !reflect.DeepEqual(callIDs(got), want) {
		t.Fatalf("claimed %v after migrating, want the oldest three %v", callIDs(got), want)
	}
}

// BenchmarkClaimSucceedBacklog measures the executor's cycle (claim one
// call, succeed it with an effect) with a queue of backlog pending calls
// behind it: before idx_calls_pending, each claim sorted the whole queue.
func BenchmarkClaimSucceedBacklog(b *testing.B) {
	for _, backlog := range []int{100, 10000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			s, err := Open(b.Context(), tempPathB(b), store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			next := 0
			create := func() {
				id := fmt.Sprintf("c_%016x", next)
				next++
				if _, _, err := s.CreateOrGet(b.Context(), store.NewCall{
					CallID: id, IdemKey: id, Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{"amount":1}`),
				}); err != nil {
					b.Fatal(err)
				}
			}
			for range backlog {
				create()
			}
			amount := int64(1)
			b.ResetTimer()
			for b.Loop() {
				got, err := s.ClaimNext(b.Context(), "w", time.Minute, 1)
				if err != nil || len(got) != 1 {
					b.Fatalf("claim: %d calls, %v", len(got), err)
				}
				c := got[0]
				if _, err := s.Succeed(b.Context(), store.Completion{
					Lease: store.Lease{CallID: c.CallID, Owner: "w", Attempt: c.Attempt}, Result: []byte(`{"ok":true}`),
					Effect: &store.Effect{EffectID: "e" + c.CallID, Tool: "charge", Amount: &amount},
				}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				create() // keep the queue at backlog
				b.StartTimer()
			}
		})
	}
}

func tempPathB(b *testing.B) string {
	b.Helper()
	return b.TempDir() + "/bench.db"
}

func callIDs(cs []store.Call) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.CallID
	}
	return out
}
