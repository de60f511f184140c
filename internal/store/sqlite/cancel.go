package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// Cancel stops a call: pending → failed with errJSON, running →
// cancel_requested, final → unchanged. See store.Store. One IMMEDIATE
// transaction: no claim or completion can slip between the read of the
// status and the change.
func (s *Store) Cancel(ctx context.Context, callID string, errJSON json.RawMessage, notify *store.NewDelivery) (store.Call, store.CancelOutcome, error) {
	if s.readOnly {
		return store.Call{}, 0, fmt.Errorf("sqlite cancel: %w", store.ErrReadOnly)
	}
	if err := s.closedErr("cancel"); err != nil {
		return store.Call{}, 0, err
	}
	if len(errJSON) == 0 {
		errJSON = json.RawMessage(`{}`)
	}
	var (
		call store.Call
		out  store.CancelOutcome
	)
	err := s.writeTx(ctx, store.WriteCancel, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		c, err := queryCall(ctx, tx, s.wq.callByID, callID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite cancel %s: %w", callID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		switch {
		case c.Status == store.StatusPending:
			call, err = scanCall(tx.QueryRowContext(ctx, `UPDATE calls
				SET status = 'failed', error_json = ?, result_json = NULL, lease_until = NULL, owner = NULL, updated_at = ?
				WHERE call_id = ? AND status = 'pending'
				RETURNING `+callColumns, string(errJSON), now, callID))
			if err != nil {
				return err
			}
			out = store.Canceled
			if err := insertDelivery(ctx, tx, now, callID, notify); err != nil {
				return err
			}
			return s.insertAudit(ctx, tx, now, callID, store.EventCanceled, store.DetailCanceled(errJSON))
		case c.Status == store.StatusRunning:
			out, call = store.CancelRequested, c
			if c.CancelRequested {
				return nil // asked before: one audit row is enough
			}
			call, err = scanCall(tx.QueryRowContext(ctx, `UPDATE calls SET cancel_requested = 1
				WHERE call_id = ? AND status = 'running' RETURNING `+callColumns, callID))
			if err != nil {
				return err
			}
			return s.insertAudit(ctx, tx, now, callID, store.EventCancelRequested, store.DetailCancelRequested(store.LeaseOf(c)))
		default:
			out, call = store.AlreadyFinal, c
			return nil
		}
	})
	if err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}
