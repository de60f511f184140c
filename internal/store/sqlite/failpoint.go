package sqlite

import (
	"context"
	"database/sql"

	"github.com/idemctl/idemctl/internal/failpoint"
)

// beforeCommitPoints names the before-commit failpoint of each write, by
// the name it gives writeTx (docs/failpoints.md). Writes not listed (the
// fenced audit row, purge) have none.
var beforeCommitPoints = map[string]failpoint.Name{
	"create":         failpoint.CreateBeforeCommit,
	"claim":          failpoint.ClaimBeforeCommit,
	"extend lease":   failpoint.LeaseBeforeCommit,
	"succeed":        failpoint.SucceedBeforeCommit,
	"fail":           failpoint.FailBeforeCommit,
	"schedule retry": failpoint.RetryBeforeCommit,
	"recover":        failpoint.RecoverBeforeCommit,
	"release":        failpoint.ReleaseBeforeCommit,
	"cancel":         failpoint.CancelBeforeCommit,
}

// withBeforeCommit runs the write op in tx, then, if failpoints are armed
// and the write changed at least one row, its before-commit failpoint.
//
// With group commit, "before commit" is per write: the point runs when
// the write's own statements are done, inside its savepoint of the batch's
// transaction, before the batch commits. An error there undoes that write
// alone (its savepoint), as any failing write of a batch; a crash there
// kills the process with the batch's transaction open, so none of the
// batch is committed and none of its writers was answered.
func withBeforeCommit(ctx context.Context, op *writeOp, tx *sql.Tx) error {
	if !failpoint.Enabled() { // production: one atomic load
		return op.fn(ctx, tx)
	}
	n, ok := beforeCommitPoints[op.name]
	if !ok {
		return op.fn(ctx, tx)
	}
	var before, after int64
	if err := tx.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&before); err != nil {
		return err
	}
	if err := op.fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&after); err != nil {
		return err
	}
	if after == before {
		return nil // read only: the point is not reached
	}
	return failpoint.Eval(n)
}
