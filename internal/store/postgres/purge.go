package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// purgeSQL deletes up to $2 final calls last updated more than $1 seconds
// ago by the database's clock, oldest first, and their audit rows, in one
// statement ($1 age in seconds, $2 limit, $3 whether to leave tombstones).
// The pick reads idx_calls_final_updated (its WHERE repeated word for
// word) and locks its rows FOR UPDATE SKIP LOCKED: a call another instance
// is resetting or purging right now is left for the next batch instead of
// waited for. The DELETE repeats the final-status condition, so a row is
// deleted only while final. Effects are not touched (see
// store.Store.Purge).
//
// With tombstones, each call's key is also locked with the per-key
// advisory lock CreateOrGet takes first (lockKeySQL), held to the commit:
// a create of that key waits for the purge to commit and then sees the
// tombstone. Without it, a create's INSERT ... ON CONFLICT that found the
// row being deleted would wait for the delete and then insert, its
// snapshot too old to see the tombstone: the key would be new again. The
// lock is only tried (a key a create holds now is left for the next
// batch), because a create holding it may wait for this purge's row lock.
// The tombstones of the call's own key and of its alias keys are read
// from the statement's snapshot, where the cascade has not yet deleted
// the aliases; a key's older tombstone is replaced.
const purgeSQL = `
WITH picked AS MATERIALIZED (
  SELECT c.call_id, c.principal, c.idem_key
  FROM calls c
  WHERE c.status IN ('succeeded', 'failed')
    AND c.updated_at < ` + dbNow + ` - $1
  ORDER BY c.updated_at
  LIMIT $2
  FOR UPDATE OF c SKIP LOCKED
), keyed AS MATERIALIZED (
  SELECT call_id FROM picked
  WHERE NOT $3 OR pg_try_advisory_xact_lock(hashtextextended(principal || chr(1) || idem_key, 0))
), gone AS (
  DELETE FROM calls c
  USING keyed
  WHERE c.call_id = keyed.call_id AND c.status IN ('succeeded', 'failed')
  RETURNING c.call_id, c.principal, c.idem_key, c.fingerprint, c.tool
), clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), buried AS (
  INSERT INTO tombstones (principal, idem_key, fingerprint, call_id, tool, purged_at)
  SELECT g.principal, g.idem_key, g.fingerprint, g.call_id, g.tool, clock.now FROM gone g, clock WHERE $3
  UNION ALL
  SELECT a.principal, a.idem_key, a.fingerprint, a.call_id, g.tool, clock.now
  FROM key_aliases a JOIN gone g ON g.call_id = a.call_id, clock WHERE $3
  ON CONFLICT (principal, idem_key) DO UPDATE SET
    fingerprint = excluded.fingerprint, call_id = excluded.call_id,
    tool = excluded.tool, purged_at = excluded.purged_at
), audit_gone AS (
  DELETE FROM audit a USING gone WHERE a.call_id = gone.call_id
)
SELECT count(*) FROM gone`

// Purge deletes up to limit final calls last updated more than olderThan
// ago, with their audit rows, leaving tombstones if asked; effects stay.
// See store.Store.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error) {
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
		return tx.QueryRow(ctx, purgeSQL, olderThan.Seconds(), limit, tombstones).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres purge: %w", err)
	}
	return n, nil
}
