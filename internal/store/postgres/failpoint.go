package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/store"
)

// The before-commit hook (store.Options.BeforeCommit): the before-commit
// failpoints (docs/failpoints.md) run after a write's statements succeeded,
// inside its transaction, before COMMIT. A crash there leaves the
// transaction open on a connection that dies with the process: PostgreSQL
// rolls it back. An error rolls it back here.
//
// The writes that take one round trip without an explicit transaction
// (the group-committed create and completion, the claim, the heartbeat)
// have no step between their statements and the commit. While a hook is
// set they send the very same statements inside an explicit transaction
// (BEGIN, the statements, the hook, COMMIT), so the crash-point matrix
// exercises the statements production runs, not another code path; the
// statement tracer test (hook_test.go) holds them to that.

// beforeCommit wraps a transaction's function (inTx's fn) with the hook of
// write w. changed reports whether fn changed a row (nil: it always does
// when it returns nil); a write that changed nothing does not reach the
// hook.
func (s *Store) beforeCommit(w store.Write, changed func() bool, fn func(tx pgx.Tx) error) func(tx pgx.Tx) error {
	if s.before == nil {
		return fn
	}
	return func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if changed != nil && !changed() {
			return nil
		}
		return s.before(w)
	}
}

// completeWrite is the write of a completion with status.
func completeWrite(status store.Status) store.Write {
	if status == store.StatusSucceeded {
		return store.WriteSucceed
	}
	return store.WriteFail
}

// querier is what a single-statement write needs: the pool, or a
// transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// writeStmt runs a write of one statement (the claim, a heartbeat). With
// no hook it runs on the pool, as one autocommit round trip; with one it
// runs in an explicit transaction, so that the hook of w sits between the
// statement and the commit as for every other write. run issues the
// statement on q, reads its rows, and reports whether it changed any.
// Errors are not yet interpreted.
func (s *Store) writeStmt(ctx context.Context, w store.Write, run func(q querier) (changed bool, err error)) error {
	if s.before == nil {
		_, err := run(s.pool)
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		changed, err := run(tx)
		if err != nil || !changed {
			return err
		}
		return s.before(w)
	})
}

// runOp runs a group-committed write: through its group, or, while a hook
// is set, alone in an explicit transaction that sends the same pipelined
// statements (sendBatch) and then runs the hook of w if changed() reports
// that the write changed a row. Errors are not yet interpreted.
func (s *Store) runOp(ctx context.Context, g *group, w store.Write, op *groupOp, changed func() bool) error {
	if s.before == nil {
		return g.run(ctx, op)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		errs, failed := sendBatch(ctx, tx, []*groupOp{op})
		if errs[0] != nil {
			return errs[0]
		}
		if failed != nil {
			return failed
		}
		if !changed() {
			return nil
		}
		return s.before(w)
	})
}
