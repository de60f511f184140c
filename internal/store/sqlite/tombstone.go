package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// tombstoneColumns are scanTombstone's columns, in its order.
const tombstoneColumns = `principal, idem_key, fingerprint, call_id, tool, purged_at`

func scanTombstone(sc scanner) (store.Tombstone, error) {
	var t store.Tombstone
	err := sc.Scan(&t.Principal, &t.IdemKey, &t.Fingerprint, &t.CallID, &t.Tool, &t.PurgedAt)
	return t, err
}

// sqlBury writes the tombstones of one call about to be purged: its own
// key and each alias key, stamped ? (the purge's now), for the call ? if
// it is still final. It repeats the purge's status condition, so a call is
// buried exactly when the DELETE after it deletes it (both run under the
// write lock). A key's older tombstone (an earlier call under the key,
// purged before, whose tombstone had lapsed) is replaced.
const sqlBury = `INSERT INTO tombstones (principal, idem_key, fingerprint, call_id, tool, purged_at)
	SELECT principal, idem_key, fingerprint, call_id, tool, ?1 FROM calls
	WHERE call_id = ?2 AND status IN ('succeeded', 'failed')
	UNION ALL
	SELECT a.principal, a.idem_key, a.fingerprint, a.call_id, c.tool, ?1
	FROM key_aliases a JOIN calls c ON c.call_id = a.call_id
	WHERE a.call_id = ?2 AND c.status IN ('succeeded', 'failed')
	ON CONFLICT (principal, idem_key) DO UPDATE SET
	  fingerprint = excluded.fingerprint, call_id = excluded.call_id,
	  tool = excluded.tool, purged_at = excluded.purged_at`

// Tombstone returns principal's tombstone of key. See store.Store.
func (s *Store) Tombstone(ctx context.Context, principal, key string) (store.Tombstone, error) {
	if err := s.closedErr("tombstone"); err != nil {
		return store.Tombstone{}, err
	}
	t, err := scanTombstone(s.r.QueryRowContext(ctx,
		`SELECT `+tombstoneColumns+` FROM tombstones WHERE principal = ? AND idem_key = ?`, principal, key))
	return t, interpret(ctx, "tombstone", err)
}

// PurgeTombstones deletes up to limit tombstones purged more than
// olderThan ago, oldest first (idx_tombstones_purged), as one write of the
// group commit. See store.Store.
func (s *Store) PurgeTombstones(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if s.readOnly {
		return 0, fmt.Errorf("sqlite purge tombstones: %w", store.ErrReadOnly)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("sqlite purge tombstones: negative age %v", olderThan)
	}
	if limit <= 0 {
		return 0, nil
	}
	if err := s.closedErr("purge tombstones"); err != nil {
		return 0, err
	}
	var n int64
	err := s.writeTx(ctx, store.WritePurgeTombstones, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM tombstones WHERE rowid IN (
			SELECT rowid FROM tombstones WHERE purged_at < ? ORDER BY purged_at LIMIT ?)`,
			s.now()-olderThan.Seconds(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}
