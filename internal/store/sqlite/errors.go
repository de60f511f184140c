package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemctl/idemctl/internal/store"
)

// interpret translates driver errors into the seam's sentinels (river's
// interpretError): callers branch on store.Err*, never on SQLite codes.
// Errors that already are sentinels, and nil, pass through unchanged. The
// driver error stays in the chain for the detail.
func interpret(ctx context.Context, op string, err error) error {
	if err == nil || store.IsSentinel(err) {
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
		case sqlite3.SQLITE_CONSTRAINT, // UNIQUE, NOT NULL, CHECK, FOREIGN KEY
			sqlite3.SQLITE_TOOBIG,   // a value or row past SQLite's limits
			sqlite3.SQLITE_MISMATCH: // a value of the wrong type
			// The same write is refused every time: a refusal for good,
			// named by its code, never by the message (which may quote
			// the value).
			return fmt.Errorf("sqlite %s: %w", op, &store.RefusedError{Code: codeName(se.Code()), Err: err})
		}
	}
	return fmt.Errorf("sqlite %s: %w", op, err)
}

// codeName names an SQLite result code for a RefusedError, e.g.
// "SQLITE_CONSTRAINT 2067" (the primary code's name from the driver's
// table, which describes each as "text (NAME)", and the extended code).
func codeName(code int) string {
	desc := sqlite.ErrorCodeString[code&0xff]
	if i, j := strings.LastIndexByte(desc, '('), strings.LastIndexByte(desc, ')'); i >= 0 && j > i {
		return desc[i+1:j] + " " + strconv.Itoa(code)
	}
	return "SQLITE " + strconv.Itoa(code)
}

// fencedError is how a completion's transaction reports that its fencing
// UPDATE matched no row. The caller rolls back, then audits the refusal in
// a transaction of its own.
type fencedError struct {
	detail string
}

func (e *fencedError) Error() string { return "fenced: " + e.detail }
