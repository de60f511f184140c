package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// SetMaxPageCount sets SQLite's max_page_count on the write connection and
// returns the limit now in force (SQLite never sets it below the pages the
// file already has). Writes that need more pages then fail with
// SQLITE_FULL, store.ErrUnavailable: a full disk, on any file system. For
// tests (the disk-full test of the server) and nothing else; a server
// never calls it.
func (s *Store) SetMaxPageCount(ctx context.Context, n int64) (int64, error) {
	var got int64
	err := s.sideTx(ctx, "max page count", func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", n)).Scan(&got)
	})
	return got, err
}
