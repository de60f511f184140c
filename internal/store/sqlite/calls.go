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

// insertAudit appends one audit row inside tx, the transaction of the
// batch being committed (through the hot statement on its connection:
// hot.go).
func (s *Store) insertAudit(_ context.Context, _ *sql.Tx, ts float64, callID, event, detail string) error {
	return s.hot(func(h *hotStmts) error { return h.exec(h.insertAudit, ts, callID, event, detail) })
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
