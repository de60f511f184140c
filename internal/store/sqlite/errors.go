package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemctl/idemctl/internal/store"
)

// mapErr translates driver errors into the seam's sentinels (river's
// interpretError): callers branch on store.Err*, never on SQLite codes.
// Errors that already are sentinels, and nil, pass through unchanged. The
// driver error stays in the chain for the detail.
func mapErr(ctx context.Context, op string, err error) error {
	if err == nil || isSentinel(err) {
		return err
	}
	if ctx.Err() != nil {
		// An interrupted statement reports SQLITE_INTERRUPT or the
		// context's error; either way the cause is the caller's context.
		return fmt.Errorf("sqlite %s: %w", op, ctx.Err())
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite %s: %w", op, store.ErrNotFound)
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("sqlite %s: %w: %w", op, store.ErrUnavailable, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		// Extended result codes are on; the primary code is the low byte.
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, // lock still held after busy_timeout
			sqlite3.SQLITE_LOCKED,
			sqlite3.SQLITE_FULL,     // disk or quota full
			sqlite3.SQLITE_IOERR,    // fsync, read or write failed
			sqlite3.SQLITE_CANTOPEN, // file or directory gone or not permitted
			sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_PROTOCOL,
			sqlite3.SQLITE_READONLY: // the file cannot be written (permissions, ro mount)
			return fmt.Errorf("sqlite %s: %w: %w", op, store.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("sqlite %s: %w", op, err)
}

func isSentinel(err error) bool {
	for _, s := range []error{
		store.ErrNotFound, store.ErrConflict, store.ErrNotClaimable,
		store.ErrFenced, store.ErrUnavailable, store.ErrReadOnly,
	} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// fencedError is how a completion's transaction reports that its fencing
// UPDATE matched no row. The caller rolls back, then audits the refusal in
// a transaction of its own.
type fencedError struct {
	detail string
}

func (e *fencedError) Error() string { return "fenced: " + e.detail }
