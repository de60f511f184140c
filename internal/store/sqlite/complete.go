package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// fencing is the WHERE clause of every completion: the call must still be
// running under exactly the (owner, attempt) the worker claimed. A worker
// whose lease expired and was taken over holds an old attempt number (or
// another owner name) and matches nothing, so its commit, and its effect,
// never land (docs/lifecycle.md, "Completion and fencing").
const fencing = `call_id = ? AND status = 'running' AND owner = ? AND attempt = ?`

// Succeed marks the call succeeded and writes its effect in one
// transaction, fenced on (owner, attempt). See store.Store.
func (s *Store) Succeed(ctx context.Context, c store.Completion) (store.Call, error) {
	if s.readOnly {
		return store.Call{}, fmt.Errorf("sqlite succeed: %w", store.ErrReadOnly)
	}
	if err := store.CheckEffect(c); err != nil {
		return store.Call{}, fmt.Errorf("sqlite %w", err)
	}
	var call store.Call
	err := s.writeTx(ctx, store.WriteSucceed, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		e := c.Effect
		return s.hot(func(h *hotStmts) error {
			if e != nil {
				if err := h.exec(h.insertEffect, e.EffectID, e.Tool, e.Amount, now, c.CallID, c.Owner, c.Attempt); err != nil {
					return err
				}
			}
			var err error
			if call, err = h.completeCall(h.succeed, c, jsonArg(c.Result), now, e != nil, c.CallID, c.Owner, c.Attempt); err != nil {
				return err
			}
			if err := h.delivery(now, c.CallID, c.Notify); err != nil {
				return err
			}
			return h.exec(h.insertAudit, now, c.CallID, store.EventSucceeded, store.DetailSucceeded(call.EffectID, c))
		})
	})
	if err != nil {
		return store.Call{}, s.auditFenced(ctx, c, err)
	}
	return call, nil
}

// Fail marks the call failed with c.Error, fenced like Succeed.
func (s *Store) Fail(ctx context.Context, c store.Completion) (store.Call, error) {
	if s.readOnly {
		return store.Call{}, fmt.Errorf("sqlite fail: %w", store.ErrReadOnly)
	}
	errJSON := store.FailureJSON(c)
	var call store.Call
	err := s.writeTx(ctx, store.WriteFail, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		keep, unknown := unknownArgs(c)
		return s.hot(func(h *hotStmts) error {
			var err error
			if call, err = h.completeCall(h.fail, c, string(errJSON), now, keep, unknown, c.CallID, c.Owner, c.Attempt); err != nil {
				return err
			}
			if err := h.auditUnknown(now, c); err != nil {
				return err
			}
			if err := h.delivery(now, c.CallID, c.Notify); err != nil {
				return err
			}
			return h.exec(h.insertAudit, now, c.CallID, store.EventFailed, store.DetailFailed(c))
		})
	})
	if err != nil {
		return store.Call{}, s.auditFenced(ctx, c, err)
	}
	return call, nil
}

// ScheduleRetry returns the call to pending with a not-before time, fenced
// like Fail. See store.Store.
func (s *Store) ScheduleRetry(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error) {
	if s.readOnly {
		return store.Call{}, fmt.Errorf("sqlite schedule retry: %w", store.ErrReadOnly)
	}
	if delay < 0 {
		return store.Call{}, fmt.Errorf("sqlite schedule retry: negative delay %v", delay)
	}
	var call store.Call
	err := s.writeTx(ctx, store.WriteRetry, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		keep, unknown := unknownArgs(c)
		return s.hot(func(h *hotStmts) error {
			var err error
			if call, err = h.completeCall(h.scheduleRetry, c, now+delay.Seconds(), string(store.FailureJSON(c)), now,
				keep, unknown, c.CallID, c.Owner, c.Attempt); err != nil {
				return err
			}
			if err := h.auditUnknown(now, c); err != nil {
				return err
			}
			return h.exec(h.insertAudit, now, c.CallID, store.EventRetryScheduled, store.DetailRetryScheduled(delay, c))
		})
	})
	if err != nil {
		return store.Call{}, s.auditFenced(ctx, c, err)
	}
	return call, nil
}

// auditUnknown writes the outcome_unknown event of a completion whose
// error is outcome_unknown (store.DetailOutcomeUnknown), and nothing for
// any other.
func (h *hotStmts) auditUnknown(now float64, c store.Completion) error {
	detail, ok := store.DetailOutcomeUnknown(c)
	if !ok {
		return nil
	}
	return h.exec(h.insertAudit, now, c.CallID, store.EventOutcomeUnknown, detail)
}

// insertDelivery writes the outbox row of a call the completion made
// final (insertDelivery run hot); nil writes nothing.
func (h *hotStmts) delivery(now float64, callID string, d *store.NewDelivery) error {
	if d == nil {
		return nil
	}
	return h.exec(h.insertDelivery, d.ID, callID, d.URL, now, now, now)
}

// completeCall runs a completion's statement, fenced on c's owner and
// attempt, and returns the call it stored; a statement that matched no row
// is a stale completion, and whyFenced says why.
func (h *hotStmts) completeCall(st driverStmt, c store.Completion, args ...any) (store.Call, error) {
	call, err := h.queryCall(st, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Call{}, h.whyFenced(c)
	}
	return call, err
}

// whyFenced is called when a fencing UPDATE matched no row: the completion
// is stale (or the call does not exist). It reads why, for the audit, and
// returns a *fencedError (or sql.ErrNoRows for an unknown call).
func (h *hotStmts) whyFenced(c store.Completion) error {
	cur, err := h.queryCall(h.callByID, c.CallID)
	if err != nil {
		return err // sql.ErrNoRows: no such call, nothing to fence
	}
	return &fencedError{detail: store.DetailFenced(c, cur)}
}

// auditFenced turns a completion's failure into its result. A fenced
// completion was rolled back whole; the refusal is then audited in a
// transaction of its own (so nothing of the stale attempt can ride along)
// and reported as store.ErrFenced. Other errors pass through.
//
// The audit runs under ctx without its cancellation: the refusal already
// happened, and a caller that gave up meanwhile must not make it vanish
// from the audit (the busy timeout still bounds the wait).
func (s *Store) auditFenced(ctx context.Context, c store.Completion, err error) error {
	var fe *fencedError
	if !errors.As(err, &fe) {
		return err
	}
	fencedErr := fmt.Errorf("sqlite complete %s: %w: %s", c.CallID, store.ErrFenced, fe.detail)
	aerr := s.sideTx(context.WithoutCancel(ctx), "audit fenced", func(ctx context.Context, tx *sql.Tx) error {
		return s.insertAudit(ctx, tx, s.now(), c.CallID, store.EventFenced, fe.detail)
	})
	if aerr != nil {
		return errors.Join(fencedErr, aerr)
	}
	return fencedErr
}
