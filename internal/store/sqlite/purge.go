package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// sqlPurgePick is the oldest final calls last updated before ?, at most
// ? of them, read in order from the partial index idx_calls_final_updated
// (TestPurgeAndListPlans checks it). INDEXED BY because, without
// statistics, the planner may prefer another index and then sort every
// final call: a cost growing with the history, under the write lock (as
// for sqlPickPending).
const sqlPurgePick = `SELECT call_id FROM calls INDEXED BY idx_calls_final_updated
	WHERE status IN ('succeeded', 'failed') AND updated_at < ?
	ORDER BY updated_at LIMIT ?`

// Purge deletes up to limit final calls last updated more than olderThan
// ago, oldest first, with their audit rows, leaving their keys'
// tombstones if asked (sqlBury); effects stay. See store.Store.
//
// It is one write of the group commit, so it holds the write lock for one
// small batch only; the caller (the server's retention task) calls it
// again until a batch comes back short. The pick reads
// idx_calls_final_updated, whose WHERE the query repeats word for word
// so the planner may use it.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error) {
	if s.readOnly {
		return 0, fmt.Errorf("sqlite purge: %w", store.ErrReadOnly)
	}
	if olderThan < 0 {
		return 0, fmt.Errorf("sqlite purge: negative age %v", olderThan)
	}
	if limit <= 0 {
		return 0, nil
	}
	if err := s.closedErr("purge"); err != nil {
		return 0, err
	}
	var purged int
	err := s.writeTx(ctx, store.WritePurge, func(ctx context.Context, tx *sql.Tx) error {
		purged = 0
		cutoff := s.now() - olderThan.Seconds()
		rows, err := tx.QueryContext(ctx, sqlPurgePick, cutoff, limit)
		if err != nil {
			return err
		}
		var ids []any
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if tombstones {
				if _, err := tx.ExecContext(ctx, sqlBury, s.now(), id); err != nil {
					return err
				}
			}
			// The status is checked again by the delete itself, so a
			// call is only ever deleted while final.
			res, err := tx.ExecContext(ctx, `DELETE FROM calls
				WHERE call_id = ? AND status IN ('succeeded', 'failed')`, id)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM audit WHERE call_id = ?`, id); err != nil {
				return err
			}
			purged++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return purged, nil
}
