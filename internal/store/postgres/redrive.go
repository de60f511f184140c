package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// Redrive returns a failed call to pending through the same statement as
// a same-key retry's reset (retryResetSQL), if it is still failed with
// exactly prevErr. See store.Store. The row is read FOR UPDATE, so the
// state checked is the state reset, as in the same-key reset.
func (s *Store) Redrive(ctx context.Context, callID, by string, prevErr json.RawMessage) (store.Call, bool, error) {
	if err := s.writable(); err != nil {
		return store.Call{}, false, err
	}
	ctx, cancel := s.step(ctx)
	defer cancel()
	var (
		call store.Call
		ok   bool
	)
	err := s.inTx(ctx, s.beforeCommit(store.WriteRedrive, func() bool { return ok }, func(tx pgx.Tx) error {
		c, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE call_id = $1 FOR UPDATE`, callID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres redrive %s: %w", callID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		call, ok = c, false
		if c.Status != store.StatusFailed || !bytes.Equal(c.ErrorJSON, prevErr) {
			return nil // reset or changed since it was selected
		}
		call, err = scanCall(tx.QueryRow(ctx, retryResetSQL, c.CallID))
		if err != nil {
			return err
		}
		ok = true
		return s.insertAudit(ctx, tx, call.UpdatedAt, c.CallID, store.EventRedriven, store.DetailRedriven(by, c.ErrorJSON))
	}))
	if err != nil {
		return store.Call{}, false, interpret(ctx, err)
	}
	return call, ok, nil
}
