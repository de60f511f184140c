package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// Cancel stops a call: pending → failed with errJSON, running →
// cancel_requested, final → unchanged. See store.Store. The row is read
// FOR UPDATE, so a claim, completion or recovery of it waits for this
// transaction (or this one for it), and the status decided on is the
// status changed.
func (s *Store) Cancel(ctx context.Context, callID string, errJSON json.RawMessage, notify *store.NewDelivery) (store.Call, store.CancelOutcome, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return store.Call{}, 0, err
	}
	if len(errJSON) == 0 {
		errJSON = json.RawMessage(`{}`)
	}
	var (
		call store.Call
		out  store.CancelOutcome
	)
	err := s.inTx(ctx, s.beforeCommit(store.WriteCancel, func() bool { return out != store.AlreadyFinal }, func(tx pgx.Tx) error {
		c, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE call_id = $1 FOR UPDATE`, callID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres cancel %s: %w", callID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		switch c.Status {
		case store.StatusPending:
			call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = 'failed', error_json = $2, result_json = NULL, lease_until = NULL, owner = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1 AND status = 'pending'
RETURNING `+callColumnsOf("calls"), callID, string(errJSON)))
			if err != nil {
				return err
			}
			out = store.Canceled
			if err := insertDelivery(ctx, tx, call.UpdatedAt, callID, notify); err != nil {
				return err
			}
			return s.insertAudit(ctx, tx, call.UpdatedAt, callID, store.EventCanceled, store.DetailCanceled(errJSON))
		case store.StatusRunning:
			out, call = store.CancelRequested, c
			if c.CancelRequested {
				return nil // asked before: one audit row is enough
			}
			call, err = scanCall(tx.QueryRow(ctx, `UPDATE calls SET cancel_requested = true
WHERE call_id = $1 AND status = 'running' RETURNING `+callColumns, callID))
			if err != nil {
				return err
			}
			var now float64
			if err := tx.QueryRow(ctx, `SELECT `+dbNow).Scan(&now); err != nil {
				return err
			}
			return s.insertAudit(ctx, tx, now, callID, store.EventCancelRequested, store.DetailCancelRequested(store.LeaseOf(c)))
		default:
			out, call = store.AlreadyFinal, c
			return nil
		}
	}))
	if err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}
