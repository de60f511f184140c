package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// leaseLapsed is RecoverExpired's condition on a running call's lease: it
// has expired, or there is none. A running call always gets a deadline
// from its claim, so lease_until IS NULL means a damaged or hand-edited
// row; nothing would ever expire it, and pending is the safe state to
// return it to (the PostgreSQL backend decides the same; storetest checks
// both). ClaimNext does not take such a call directly: recovery first.
const leaseLapsed = `(lease_until IS NULL OR lease_until <= ?)`

// sqlRecoverPick is RecoverExpired's list of the running calls to return
// to pending, read from idx_calls_running in lease order
// (TestRunningIndexPlans).
const sqlRecoverPick = `SELECT call_id, owner, attempt FROM calls
	WHERE status = 'running' AND ` + leaseLapsed + ` ORDER BY lease_until, rowid`

// RecoverExpired returns running calls whose lease has expired to pending.
// See store.Store.
func (s *Store) RecoverExpired(ctx context.Context) ([]string, error) {
	if s.readOnly {
		return nil, fmt.Errorf("sqlite recover: %w", store.ErrReadOnly)
	}
	if err := s.closedErr("recover"); err != nil {
		return nil, err
	}
	// Runs every 200 ms: look on a read connection first, take
	// the write lock only when there is something to recover.
	var any bool
	if err := s.rq.hasExpired.QueryRowContext(ctx, s.now()).Scan(&any); err != nil {
		return nil, interpret(ctx, "recover: check", err)
	}
	if !any {
		return []string{}, nil
	}

	recovered := []string{}
	err := s.writeTx(ctx, store.WriteRecover, func(ctx context.Context, tx *sql.Tx) error {
		recovered = recovered[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, sqlRecoverPick, now)
		if err != nil {
			return err
		}
		type expired struct {
			id, owner string
			attempt   int64
		}
		var todo []expired
		for rows.Next() {
			var (
				e     expired
				owner sql.NullString
			)
			if err := rows.Scan(&e.id, &owner, &e.attempt); err != nil {
				rows.Close()
				return err
			}
			e.owner = owner.String
			todo = append(todo, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, e := range todo {
			// Conditional on the lease still being expired: a live lease
			// is never touched.
			res, err := tx.ExecContext(ctx, `UPDATE calls
				SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?, unknown_outcome = ?
				WHERE call_id = ? AND status = 'running' AND `+leaseLapsed, now, wire.UnknownAbandoned, e.id, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue
			}
			l := store.Lease{CallID: e.id, Owner: e.owner, Attempt: e.attempt}
			why := store.DetailLeaseExpired(l)
			if err := s.insertAudit(ctx, tx, now, e.id, store.EventOutcomeUnknown, store.DetailAbandoned(l, why)); err != nil {
				return err
			}
			if err := s.insertAudit(ctx, tx, now, e.id, store.EventRecover, why); err != nil {
				return err
			}
			recovered = append(recovered, e.id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recovered, nil
}

// Release returns one running call to pending at once if owner still holds
// it at attempt (its process is known dead). See store.Store.
func (s *Store) Release(ctx context.Context, l store.Lease, reason string) error {
	callID, owner, attempt := l.CallID, l.Owner, l.Attempt
	if s.readOnly {
		return fmt.Errorf("sqlite release: %w", store.ErrReadOnly)
	}
	return s.writeTx(ctx, store.WriteRelease, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		// Fenced like a completion: if the call was completed, recovered
		// or taken over since the caller looked, leave it alone.
		res, err := tx.ExecContext(ctx, `UPDATE calls
			SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?, unknown_outcome = ?
			WHERE `+fencing, now, wire.UnknownAbandoned, callID, owner, attempt)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			var one int
			if err := tx.QueryRowContext(ctx, `SELECT 1 FROM calls WHERE call_id = ?`, callID).Scan(&one); err != nil {
				return err // sql.ErrNoRows → store.ErrNotFound
			}
			return fmt.Errorf("sqlite release %s (owner %s, attempt %d): %w", callID, owner, attempt, store.ErrNotHeld)
		}
		if err := s.insertAudit(ctx, tx, now, callID, store.EventOutcomeUnknown, store.DetailAbandoned(l, reason)); err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, now, callID, store.EventRecover, reason)
	})
}

// ExtendLease moves the lease of a call still held by owner at attempt to
// now + lease, without an audit row (a heartbeat). See store.Store.
func (s *Store) ExtendLease(ctx context.Context, l store.Lease, lease time.Duration) error {
	callID, owner, attempt := l.CallID, l.Owner, l.Attempt
	if s.readOnly {
		return fmt.Errorf("sqlite extend lease: %w", store.ErrReadOnly)
	}
	if lease <= 0 {
		return fmt.Errorf("sqlite extend lease: lease must be positive, got %v", lease)
	}
	// The cancel flag is reported after the commit: an error from the
	// transaction's function would roll the extension back.
	var cancel bool
	err := s.writeTx(ctx, store.WriteLease, func(ctx context.Context, tx *sql.Tx) error {
		err := tx.StmtContext(ctx, s.wq.extendLease).QueryRowContext(ctx,
			s.now()+lease.Seconds(), callID, owner, attempt).Scan(&cancel)
		if err == nil || !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var one int
		if err := tx.StmtContext(ctx, s.wq.callExists).QueryRowContext(ctx, callID).Scan(&one); err != nil {
			return err // sql.ErrNoRows → store.ErrNotFound
		}
		return fmt.Errorf("sqlite extend lease %s (owner %s, attempt %d): %w", callID, owner, attempt, store.ErrNotHeld)
	})
	if err == nil && cancel {
		return fmt.Errorf("sqlite extend lease %s: %w", callID, store.ErrCancelRequested)
	}
	return err
}
