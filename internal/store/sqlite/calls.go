package sqlite

import (
	"context"
	"database/sql"

	"github.com/idemctl/idemctl/internal/store"
)

// The calls table's writes are split by concern, with the same file names
// in both backends (store/sqlite, store/postgres) and the same names for
// their helpers (interpret, callColumns, insertAudit): create.go
// (CreateOrGet), claim.go (ClaimNext), complete.go (Succeed, Fail,
// ScheduleRetry, the fenced audit row), lease.go (ExtendLease, Release,
// RecoverExpired), cancel.go, purge.go, and commit.go (the group commit).
// This file holds what they share: the rows of calls and audit.

// insertAudit appends one audit row inside tx.
func (s *Store) insertAudit(ctx context.Context, tx *sql.Tx, ts float64, callID, event, detail string) error {
	_, err := tx.StmtContext(ctx, s.wq.insertAudit).ExecContext(ctx, ts, callID, event, detail)
	return err
}

// queryCall runs a statement that returns one call (a read, or a write with
// RETURNING) inside tx. sql.ErrNoRows means no row matched.
func queryCall(ctx context.Context, tx *sql.Tx, st *sql.Stmt, args ...any) (store.Call, error) {
	return scanCall(tx.StmtContext(ctx, st).QueryRowContext(ctx, args...))
}

// nullIfEmpty stores an optional text column: NULL for "".
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
