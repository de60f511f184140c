package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// Redrive returns a failed call to pending through the same statement as
// a same-key retry's reset (sqlRetryReset), if it is still failed with
// exactly prevErr. See store.Store. One IMMEDIATE transaction, so the
// check and the reset see one state.
func (s *Store) Redrive(ctx context.Context, callID, by string, prevErr json.RawMessage) (store.Call, bool, error) {
	if s.readOnly {
		return store.Call{}, false, fmt.Errorf("sqlite redrive: %w", store.ErrReadOnly)
	}
	if err := s.closedErr("redrive"); err != nil {
		return store.Call{}, false, err
	}
	var (
		call store.Call
		ok   bool
	)
	err := s.writeTx(ctx, store.WriteRedrive, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		c, err := queryCall(ctx, tx, s.wq.callByID, callID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite redrive %s: %w", callID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		call, ok = c, false
		if c.Status != store.StatusFailed || !bytes.Equal(c.ErrorJSON, prevErr) {
			return nil // reset or changed since it was selected
		}
		call, err = queryCall(ctx, tx, s.wq.retryReset, now, c.CallID)
		if err != nil {
			return err
		}
		ok = true
		return s.insertAudit(ctx, tx, now, c.CallID, store.EventRedriven, store.DetailRedriven(by, c.ErrorJSON))
	})
	if err != nil {
		return store.Call{}, false, err
	}
	return call, ok, nil
}
