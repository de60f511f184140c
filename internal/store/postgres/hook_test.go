package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

// tracer records the text of every statement a pool sends, singly or in a
// pipelined batch.
type tracer struct {
	mu    sync.Mutex
	stmts []string
}

func (tr *tracer) add(sql string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.stmts = append(tr.stmts, strings.TrimSpace(sql))
}

// take returns the statements recorded since the last take.
func (tr *tracer) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := tr.stmts
	tr.stmts = nil
	return out
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.add(d.SQL)
	return ctx
}
func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (tr *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (tr *tracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	tr.add(d.SQL)
}
func (tr *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// isTxControl reports whether sql is a transaction's own statement.
func isTxControl(sql string) bool {
	s := strings.ToLower(sql)
	return strings.HasPrefix(s, "begin") || s == "commit" || s == "rollback"
}

// TestHookRunsTheProductionStatements: with a before-commit hook set (the
// crash-point matrix's before-commit cells), the one-round-trip writes —
// the group-committed create and completions, the claim, the heartbeat —
// send exactly the statements they send without one, only inside an
// explicit transaction with the hook before its COMMIT. So the matrix
// exercises the statements users run, not another code path.
func TestHookRunsTheProductionStatements(t *testing.T) {
	type run struct {
		tr    *tracer
		s     *Store
		hooks []store.Write
	}
	newRun := func(hooked bool) *run {
		r := &run{tr: &tracer{}}
		var opts store.Options
		if hooked {
			var mu sync.Mutex
			opts.BeforeCommit = func(w store.Write) error {
				mu.Lock()
				defer mu.Unlock()
				r.hooks = append(r.hooks, w)
				return nil
			}
		}
		s, err := openWith(t.Context(), pgtest.Schema(t), opts, func(c *pgxpool.Config) { c.ConnConfig.Tracer = r.tr })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		r.s = s
		r.tr.take() // the migration's
		return r
	}
	plain, hooked := newRun(false), newRun(true)

	// Each step is one write; the same steps run on both stores.
	ctx := t.Context()
	steps := []struct {
		write store.Write
		do    func(s *Store) error
	}{
		{store.WriteCreate, func(s *Store) error {
			n := newCall(t, "k1")
			n.CallID = "c_0000000000000001" // the same arguments on both stores
			_, _, err := s.CreateOrGet(ctx, n)
			return err
		}},
		{store.WriteCreate, func(s *Store) error {
			n := newCall(t, "k2")
			n.CallID = "c_0000000000000002"
			_, _, err := s.CreateOrGet(ctx, n)
			return err
		}},
		{store.WriteClaim, func(s *Store) error {
			got, err := s.ClaimNext(ctx, "w", time.Minute, 2)
			if err == nil && len(got) != 2 {
				return errors.New("claimed fewer than two")
			}
			return err
		}},
		{store.WriteLease, func(s *Store) error {
			return s.ExtendLease(ctx, store.Lease{CallID: "c_0000000000000001", Owner: "w", Attempt: 1}, time.Minute)
		}},
		{store.WriteSucceed, func(s *Store) error {
			c, err := s.GetAny(ctx, "c_0000000000000001")
			if err != nil {
				return err
			}
			_, err = s.Succeed(ctx, success(c))
			return err
		}},
		{store.WriteFail, func(s *Store) error {
			_, err := s.Fail(ctx, store.Completion{Lease: store.Lease{CallID: "c_0000000000000002", Owner: "w", Attempt: 1},
				Error: []byte(`{"code":"x","message":"y","retryable":false}`)})
			return err
		}},
	}
	for i, st := range steps {
		var got [2][]string
		for j, r := range []*run{plain, hooked} {
			if err := st.do(r.s); err != nil {
				t.Fatalf("step %d (%v), hooked %v: %v", i, st.write, j == 1, err)
			}
			got[j] = r.tr.take()
		}
		// The read of the completed call is not the write's.
		if st.write == store.WriteSucceed {
			got[0], got[1] = got[0][1:], got[1][1:]
		}
		if !slices.ContainsFunc(got[1], isTxControl) {
			t.Errorf("step %d (%v) with a hook ran no explicit transaction: %q", i, st.write, got[1])
		}
		got[1] = slices.DeleteFunc(got[1], isTxControl)
		if !slices.Equal(got[0], got[1]) {
			t.Errorf("step %d (%v): statements without a hook\n%q\nwith a hook (transaction control left out)\n%q", i, st.write, got[0], got[1])
		}
	}
	want := []store.Write{store.WriteCreate, store.WriteCreate, store.WriteClaim, store.WriteLease, store.WriteSucceed, store.WriteFail}
	if !slices.Equal(hooked.hooks, want) {
		t.Errorf("the hook ran for %v, want %v", hooked.hooks, want)
	}
}
