package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// tombstoneColumns are scanTombstone's columns, in its order.
const tombstoneColumns = `principal, idem_key, fingerprint, call_id, tool, purged_at`

func scanTombstone(row pgx.Row) (store.Tombstone, error) {
	var t store.Tombstone
	err := row.Scan(&t.Principal, &t.IdemKey, &t.Fingerprint, &t.CallID, &t.Tool, &t.PurgedAt)
	return t, err
}

// liveTombstoneSQL is CreateOrGet's tombstone check ($1 principal, $2
// key, $3 the tombstones' retention in seconds): the key's tombstone if it
// was purged within the retention and the key is not a call's own key
// again (a call recorded under it after its tombstone lapsed wins).
const liveTombstoneSQL = `SELECT ` + tombstoneColumns + ` FROM tombstones
WHERE principal = $1 AND idem_key = $2 AND purged_at >= ` + dbNow + ` - $3
  AND NOT EXISTS (SELECT 1 FROM calls WHERE principal = $1 AND idem_key = $2)`

// Tombstone returns principal's tombstone of key. See store.Store.
func (s *Store) Tombstone(ctx context.Context, principal, key string) (store.Tombstone, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	t, err := scanTombstone(s.pool.QueryRow(ctx,
		`SELECT `+tombstoneColumns+` FROM tombstones WHERE principal = $1 AND idem_key = $2`, principal, key))
	return t, interpret(ctx, err)
}

// purgeTombstonesSQL deletes up to $2 tombstones purged more than $1
// seconds ago, oldest first (idx_tombstones_purged). SKIP LOCKED: a
// tombstone a concurrent purge is replacing is left for the next batch.
const purgeTombstonesSQL = `
WITH picked AS MATERIALIZED (
  SELECT principal, idem_key FROM tombstones
  WHERE purged_at < ` + dbNow + ` - $1
  ORDER BY purged_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM tombstones t USING picked
  WHERE t.principal = picked.principal AND t.idem_key = picked.idem_key
  RETURNING 1
)
SELECT count(*) FROM gone`

// PurgeTombstones deletes up to limit tombstones purged more than
// olderThan ago. See store.Store.
func (s *Store) PurgeTombstones(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	ctx, cancel := s.scan(ctx)
	defer cancel()
	if olderThan < 0 {
		return 0, fmt.Errorf("postgres purge tombstones: negative age %v", olderThan)
	}
	if limit <= 0 {
		return 0, nil
	}
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, purgeTombstonesSQL, olderThan.Seconds(), limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres purge tombstones: %w", err)
	}
	return n, nil
}
