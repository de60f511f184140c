package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// RecordLookup audits a lookup's verdict for the attempt running under l.
// See store.Store. The row is read FOR SHARE under the fencing token, so a
// completion or recovery of another attempt cannot slip between the check
// and the audit row.
func (s *Store) RecordLookup(ctx context.Context, l store.Lease, event, detail string) error {
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return err
	}
	if err := store.CheckLookupEvent(event); err != nil {
		return fmt.Errorf("postgres record lookup: %w", err)
	}
	return s.inTx(ctx, s.beforeCommit(store.WriteLookup, nil, func(tx pgx.Tx) error {
		var ts float64
		err := tx.QueryRow(ctx, `SELECT `+dbNow+` FROM calls
WHERE call_id = $1 AND status = 'running' AND owner = $2 AND attempt = $3 FOR SHARE`, l.CallID, l.Owner, l.Attempt).Scan(&ts)
		if errors.Is(err, pgx.ErrNoRows) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM calls WHERE call_id = $1)`, l.CallID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("postgres record lookup %s: %w", l.CallID, store.ErrNotFound)
			}
			return fmt.Errorf("postgres record lookup %s: %w", l, store.ErrNotHeld)
		} else if err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, ts, l.CallID, event, detail)
	}))
}

// Resolve settles a failed call if it is still failed with exactly
// r.PrevErr. See store.Store. The row is read FOR UPDATE, so the state
// checked is the state changed.
func (s *Store) Resolve(ctx context.Context, r store.Resolution) (store.Call, bool, error) {
	if err := s.writable(); err != nil {
		return store.Call{}, false, err
	}
	if r.Succeeded {
		if err := store.CheckEffect(store.Completion{Lease: store.Lease{CallID: r.CallID}, Effect: r.Effect}); err != nil {
			return store.Call{}, false, fmt.Errorf("postgres resolve: %w", err)
		}
	}
	ctx, cancel := s.step(ctx)
	defer cancel()
	var (
		call store.Call
		ok   bool
	)
	err := s.inTx(ctx, s.beforeCommit(store.WriteResolve, func() bool { return ok }, func(tx pgx.Tx) error {
		c, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE call_id = $1 FOR UPDATE`, r.CallID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres resolve %s: %w", r.CallID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		call, ok = c, false
		if c.Status != store.StatusFailed || !bytes.Equal(c.ErrorJSON, r.PrevErr) {
			return nil // changed since it was read
		}
		if r.Succeeded {
			var result *string
			if len(r.Result) > 0 {
				v := string(r.Result)
				result = &v
			}
			call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = 'succeeded', result_json = $2, error_json = NULL, unknown_outcome = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
RETURNING `+callColumnsOf("calls"), r.CallID, result))
			if err != nil {
				return err
			}
			if e := r.Effect; e != nil {
				// ON CONFLICT (call_id) DO NOTHING, as in complete: one
				// effect per call, the last gate.
				if _, err := tx.Exec(ctx, `
INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
VALUES ($1, $2, coalesce(nullif($3, ''), $4), $5, $6)
ON CONFLICT (call_id) DO NOTHING`, e.EffectID, r.CallID, e.Tool, call.Tool, e.Amount, call.UpdatedAt); err != nil {
					return err
				}
				call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls SET effect_id = (SELECT effect_id FROM effects WHERE call_id = $1)
WHERE call_id = $1
RETURNING `+callColumns, r.CallID))
				if err != nil {
					return err
				}
			}
		} else {
			call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET error_json = $2, unknown_outcome = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
RETURNING `+callColumnsOf("calls"), r.CallID, string(store.FailureJSON(store.Completion{Error: r.Error}))))
			if err != nil {
				return err
			}
		}
		ok = true
		if err := insertDelivery(ctx, tx, call.UpdatedAt, r.CallID, r.Notify); err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, call.UpdatedAt, r.CallID, store.EventResolved, store.DetailResolved(r))
	}))
	if err != nil {
		return store.Call{}, false, interpret(ctx, err)
	}
	return call, ok, nil
}
