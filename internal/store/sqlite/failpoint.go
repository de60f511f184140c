package sqlite

import (
	"context"
	"database/sql"
)

// withBeforeCommit runs the write op in tx, then, if it has a
// before-commit hook (store.Options.BeforeCommit) and changed at least one
// row, the hook.
//
// With group commit, "before commit" is per write: the hook runs when
// the write's own statements are done, inside its savepoint of the batch's
// transaction, before the batch commits. An error there undoes that write
// alone (its savepoint), as any failing write of a batch; a crash there
// kills the process with the batch's transaction open, so none of the
// batch is committed and none of its writers was answered.
func withBeforeCommit(ctx context.Context, op *writeOp, tx *sql.Tx) error {
	if op.before == nil { // production: no hook
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
		return nil // read only: the hook is not reached
	}
	return op.before()
}
