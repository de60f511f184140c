package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// RecordLookup audits a lookup's verdict for the attempt running under l.
// See store.Store. Fenced like a completion: a worker that lost the call
// writes nothing.
func (s *Store) RecordLookup(ctx context.Context, l store.Lease, event, detail string) error {
	if s.readOnly {
		return fmt.Errorf("sqlite record lookup: %w", store.ErrReadOnly)
	}
	if err := store.CheckLookupEvent(event); err != nil {
		return fmt.Errorf("sqlite record lookup: %w", err)
	}
	return s.writeTx(ctx, store.WriteLookup, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM calls WHERE `+fencing, l.CallID, l.Owner, l.Attempt).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			if err := tx.QueryRowContext(ctx, `SELECT 1 FROM calls WHERE call_id = ?`, l.CallID).Scan(&one); err != nil {
				return err // sql.ErrNoRows → store.ErrNotFound
			}
			return fmt.Errorf("sqlite record lookup %s: %w", l, store.ErrNotHeld)
		} else if err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, s.now(), l.CallID, event, detail)
	})
}

// Resolve settles a failed call if it is still failed with exactly
// r.PrevErr. See store.Store. One IMMEDIATE transaction, so the check and
// the change see one state.
func (s *Store) Resolve(ctx context.Context, r store.Resolution) (store.Call, bool, error) {
	if s.readOnly {
		return store.Call{}, false, fmt.Errorf("sqlite resolve: %w", store.ErrReadOnly)
	}
	if r.Succeeded {
		if err := store.CheckEffect(store.Completion{Lease: store.Lease{CallID: r.CallID}, Effect: r.Effect}); err != nil {
			return store.Call{}, false, fmt.Errorf("sqlite resolve: %w", err)
		}
	}
	if err := s.closedErr("resolve"); err != nil {
		return store.Call{}, false, err
	}
	var (
		call store.Call
		ok   bool
	)
	err := s.writeTx(ctx, store.WriteResolve, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		c, err := queryCall(ctx, tx, s.wq.callByID, r.CallID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite resolve %s: %w", r.CallID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		call, ok = c, false
		if c.Status != store.StatusFailed || !bytes.Equal(c.ErrorJSON, r.PrevErr) {
			return nil // changed since it was read
		}
		if r.Succeeded {
			if e := r.Effect; e != nil {
				// Not under a lease, so not the fenced sqlInsertEffect; an
				// effect an earlier attempt recorded is kept.
				if _, err := tx.ExecContext(ctx, `INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
					VALUES (?, ?, COALESCE(NULLIF(?, ''), ?), ?, ?) ON CONFLICT (call_id) DO NOTHING`,
					e.EffectID, r.CallID, e.Tool, c.Tool, e.Amount, now); err != nil {
					return err
				}
			}
			call, err = scanCall(tx.QueryRowContext(ctx, `UPDATE calls
				SET status = 'succeeded', result_json = ?, error_json = NULL, unknown_outcome = NULL, updated_at = ?,
				    effect_id = (SELECT e.effect_id FROM effects e WHERE e.call_id = calls.call_id)
				WHERE call_id = ? RETURNING `+callColumns, jsonArg(r.Result), now, r.CallID))
			if err != nil {
				return err
			}
		} else {
			call, err = scanCall(tx.QueryRowContext(ctx, `UPDATE calls
				SET error_json = ?, unknown_outcome = NULL, updated_at = ?
				WHERE call_id = ? RETURNING `+callColumns, string(store.FailureJSON(store.Completion{Error: r.Error})), now, r.CallID))
			if err != nil {
				return err
			}
		}
		ok = true
		if err := insertDelivery(ctx, tx, now, r.CallID, r.Notify); err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, now, r.CallID, store.EventResolved, store.DetailResolved(r))
	})
	if err != nil {
		return store.Call{}, false, err
	}
	return call, ok, nil
}
