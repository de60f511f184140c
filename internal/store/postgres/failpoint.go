package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/store"
)

// beforeCommit wraps a transaction's function (inTx's fn) with the write's
// before-commit failpoint n (docs/failpoints.md): after fn's statements
// succeeded, inside the transaction, before COMMIT. changed reports whether
// fn changed a row (nil: it always does when it returns nil); a write that
// changed nothing does not reach the point. A crash there leaves the
// transaction open on a connection that dies with the process: PostgreSQL
// rolls it back. An error rolls it back here.
func beforeCommit(n failpoint.Name, changed func() bool, fn func(tx pgx.Tx) error) func(tx pgx.Tx) error {
	return func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if changed != nil && !changed() {
			return nil
		}
		return failpoint.Eval(n)
	}
}

// completePoint is the before-commit failpoint of a completion with status.
func completePoint(status store.Status) failpoint.Name {
	if status == store.StatusSucceeded {
		return failpoint.SucceedBeforeCommit
	}
	return failpoint.FailBeforeCommit
}

// querier is what a single-statement write needs: the pool, or a
// transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// writeStmt runs a write of one statement (the claim, a heartbeat). With
// no failpoint armed it runs on the pool, as one autocommit round trip;
// with failpoints armed it runs in an explicit transaction, so that its
// before-commit point n sits between the statement and the commit as for
// every other write. run issues the statement on q, reads its rows, and
// reports whether it changed any. Errors are not yet interpreted.
func (s *Store) writeStmt(ctx context.Context, n failpoint.Name, run func(q querier) (changed bool, err error)) error {
	if !failpoint.Enabled() {
		_, err := run(s.pool)
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		changed, err := run(tx)
		if err != nil || !changed {
			return err
		}
		return failpoint.Eval(n)
	})
}
