package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// purgeSQL deletes up to $2 final calls last updated more than $1 seconds
// ago by the database's clock, oldest first, and their audit rows, in one
// statement ($1 age in seconds, $2 limit). The pick reads
// idx_calls_final_updated (its WHERE repeated word for word) and locks
// its rows FOR UPDATE SKIP LOCKED: a call another instance is resetting
// or purging right now is left for the next batch instead of waited for.
// The DELETE repeats the final-status condition, so a row is deleted only
// while final. Effects are not touched (see store.Store.Purge).
const purgeSQL = `
WITH picked AS MATERIALIZED (
  SELECT c.call_id
  FROM calls c
  WHERE c.status IN ('succeeded', 'failed')
    AND c.updated_at < ` + dbNow + ` - $1
  ORDER BY c.updated_at
  LIMIT $2
  FOR UPDATE OF c SKIP LOCKED
), gone AS (
  DELETE FROM calls c
  USING picked
  WHERE c.call_id = picked.call_id AND c.status IN ('succeeded', 'failed')
  RETURNING c.call_id
), audit_gone AS (
  DELETE FROM audit a USING gone WHERE a.call_id = gone.call_id
)
SELECT count(*) FROM gone`

// Purge deletes up to limit final calls last updated more than olderThan
// ago, with their audit rows; effects stay. See store.Store.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return 0, err
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("postgres purge: negative age %v", olderThan)
	}
	if limit <= 0 {
		return 0, nil
	}
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, purgeSQL, olderThan.Seconds(), limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres purge: %w", err)
	}
	return n, nil
}
