package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/store"
)

// Succeed marks the call succeeded and inserts its effect in one
// transaction, fenced on (owner, attempt).
func (s *Store) Succeed(ctx context.Context, c store.Completion) (store.Call, error) {
	return s.complete(ctx, c, store.StatusSucceeded)
}

// Fail marks the call failed with c.Error, fenced on (owner, attempt).
func (s *Store) Fail(ctx context.Context, c store.Completion) (store.Call, error) {
	return s.complete(ctx, c, store.StatusFailed)
}

// complete is Succeed and Fail: one conditional UPDATE whose WHERE clause
// is the fencing token. If another worker (or recovery) changed the row
// meanwhile, READ COMMITTED makes this UPDATE wait for that transaction and
// re-check the WHERE clause against its result, so a stale worker matches
// zero rows; then nothing is written (the effect is never inserted) and
// the refusal is audited on its own.
func (s *Store) complete(ctx context.Context, c store.Completion, status store.Status) (store.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return store.Call{}, err
	}
	var (
		result, errObj, effectID *string
		event                    string
	)
	if status == store.StatusSucceeded {
		if err := store.CheckEffect(c); err != nil {
			return store.Call{}, fmt.Errorf("postgres %w", err)
		}
		if e := c.Effect; e != nil {
			effectID = &e.EffectID
		}
		if len(c.Result) > 0 {
			r := string(c.Result)
			result = &r
		}
		event = store.EventSucceeded
	} else {
		e := string(store.FailureJSON(c))
		errObj = &e
		event = store.EventFailed
	}

	var call store.Call
	// completeSQL writes one audit row and no webhook delivery; an
	// outcome_unknown failure needs two audit rows, and a call with a
	// notify_url its delivery: those take the transaction below, so the
	// common completion keeps its one statement.
	unknownDetail, unknown := store.DetailOutcomeUnknown(c)
	if (!unknown || status != store.StatusFailed) && c.Notify == nil {
		fast, err := s.completeFast(ctx, c, status, result, errObj, effectID, event)
		switch {
		case errors.Is(err, store.ErrFenced):
			return store.Call{}, s.auditFenced(ctx, c)
		case !errors.Is(err, errSlowPath):
			return fast, interpret(ctx, err)
		}
	}
	keep, unknownVal := unknownArgs(c, status)
	err := s.inTx(ctx, s.beforeCommit(completeWrite(status), nil, func(tx pgx.Tx) error {
		var err error
		call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = $4, result_json = $5, error_json = $6, effect_id = $7,
    lease_until = NULL, owner = NULL, updated_at = clock.now, `+setUnknown(8, 9)+`
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
  -- The fencing token: still running, still ours, still this attempt.
  AND status = 'running' AND owner = $2 AND attempt = $3
RETURNING `+callColumnsOf("calls"),
			c.CallID, c.Owner, c.Attempt, string(status), result, errObj, effectID, keep, unknownVal))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrFenced
		}
		if err != nil {
			return err
		}
		if e := c.Effect; status == store.StatusSucceeded && e != nil {
			// ON CONFLICT (call_id) DO NOTHING: effects.call_id UNIQUE is
			// the last gate. effect_id is derived from call_id,
			// so a second insert for one call is the same effect and is
			// dropped; a clash on effect_id with another call is a unique
			// violation and rolls the whole completion back.
			var inserted string
			err := tx.QueryRow(ctx, `
INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
VALUES ($1, $2, coalesce(nullif($3, ''), $4), $5, $6)
ON CONFLICT (call_id) DO NOTHING
RETURNING effect_id`,
				e.EffectID, c.CallID, e.Tool, call.Tool, e.Amount, call.UpdatedAt).Scan(&inserted)
			if errors.Is(err, pgx.ErrNoRows) {
				// The call already had an effect (cannot happen while the
				// fencing holds: a call with an effect is succeeded, hence
				// not running). Point the call at the effect that exists.
				call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls SET effect_id = (SELECT effect_id FROM effects WHERE call_id = $1)
WHERE call_id = $1
RETURNING `+callColumns, c.CallID))
			}
			if err != nil {
				return err
			}
		}
		if err := insertDelivery(ctx, tx, call.UpdatedAt, call.CallID, c.Notify); err != nil {
			return err
		}
		detail := store.DetailSucceeded(call.EffectID, c)
		if status == store.StatusFailed {
			detail = store.DetailFailed(c)
			if unknown {
				if err := s.insertAudit(ctx, tx, call.UpdatedAt, call.CallID, store.EventOutcomeUnknown, unknownDetail); err != nil {
					return err
				}
			}
		}
		return s.insertAudit(ctx, tx, call.UpdatedAt, call.CallID, event, detail)
	}))
	if errors.Is(err, store.ErrFenced) {
		return store.Call{}, s.auditFenced(ctx, c)
	}
	if err != nil {
		return store.Call{}, err
	}
	return call, nil
}

// completeSQL is complete's common case in one statement ($1 call id, $2
// owner, $3 attempt, $4 status, $5 result, $6 error, $7 effect id, $8
// effect tool, $9 amount, $10 audit event, $11 audit detail, $12 and $13
// setUnknown's keep and value): the fenced
// UPDATE, the effect row (when $7 is set) and the audit row. The effect is
// a plain INSERT, without complete's ON CONFLICT: a call that already has
// an effect, or an effect id another call holds, fails the statement (and
// so writes nothing), and complete's transaction then decides, as before.
// No row: fenced, and nothing was written.
var completeSQL = `
WITH clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), done AS (
  UPDATE calls
  SET status = $4, result_json = $5, error_json = $6, effect_id = $7,
      lease_until = NULL, owner = NULL, updated_at = clock.now, ` + setUnknown(12, 13) + `
  FROM clock
  WHERE call_id = $1
    -- The fencing token: still running, still ours, still this attempt.
    AND status = 'running' AND owner = $2 AND attempt = $3
  RETURNING ` + callColumnsOf("calls") + `
), effect AS (
  INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
  SELECT $7, call_id, coalesce(nullif($8, ''), tool), $9, updated_at FROM done WHERE $7::text IS NOT NULL
), audited AS (
  INSERT INTO audit (ts, call_id, event, detail)
  SELECT updated_at, call_id, $10::text, $11::text FROM done
)
SELECT ` + callColumns + ` FROM done`

// completeFast runs completeSQL: one round trip where complete's
// transaction takes five (BEGIN, UPDATE, effect INSERT, audit INSERT,
// COMMIT). It returns store.ErrFenced when the fence refused the
// completion, errSlowPath when the statement failed on a constraint (then
// nothing was written and complete's transaction decides), and otherwise
// the completed call.
func (s *Store) completeFast(ctx context.Context, c store.Completion, status store.Status,
	result, errObj, effectID *string, event string) (store.Call, error) {
	var (
		tool   string
		amount *int64
	)
	if e := c.Effect; status == store.StatusSucceeded && e != nil {
		tool, amount = e.Tool, e.Amount
	} else {
		effectID = nil // no effect row, and effect_id stays NULL
	}
	var call store.Call
	op := s.completeOp(c, status, result, errObj, effectID, event, tool, amount, &call)
	if err := s.runOp(ctx, s.writes, completeWrite(status), op, func() bool { return true }); err != nil {
		return store.Call{}, err
	}
	return call, nil
}

// completeOp is completeFast's write, answering into call; effectID is
// nil for a completion without an effect row.
func (s *Store) completeOp(c store.Completion, status store.Status, result, errObj, effectID *string, event, tool string,
	amount *int64, call *store.Call) *groupOp {
	detail := store.DetailSucceeded(effectID, c)
	if status == store.StatusFailed {
		detail = store.DetailFailed(c)
	}
	return &groupOp{
		key: c.CallID,
		queue: func(b *pgx.Batch) {
			keep, unknown := unknownArgs(c, status)
			b.Queue(completeSQL, c.CallID, c.Owner, c.Attempt, string(status), result, errObj, effectID, tool, amount, event, detail,
				keep, unknown)
		},
		read: func(r *results) error {
			var err error
			*call, err = scanCall(r.QueryRow())
			var pgErr *pgconn.PgError
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return store.ErrFenced
			case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
				return errSlowPath
			}
			return err
		},
	}
}

// ScheduleRetry returns the call to pending with a not-before time of the
// database's now + delay, fenced on (owner, attempt) like complete, and
// audits retry_scheduled in the same transaction. See store.Store.
func (s *Store) ScheduleRetry(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return store.Call{}, err
	}
	if delay < 0 {
		return store.Call{}, fmt.Errorf("postgres schedule retry: negative delay %v", delay)
	}
	var call store.Call
	keep, unknownVal := unknownArgs(c, store.StatusFailed)
	err := s.inTx(ctx, s.beforeCommit(store.WriteRetry, nil, func(tx pgx.Tx) error {
		var err error
		call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = 'pending', not_before = clock.now + $4, result_json = NULL, error_json = $5,
    lease_until = NULL, owner = NULL, updated_at = clock.now, `+setUnknown(6, 7)+`
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
  -- The fencing token, as in complete.
  AND status = 'running' AND owner = $2 AND attempt = $3
RETURNING `+callColumnsOf("calls"),
			c.CallID, c.Owner, c.Attempt, delay.Seconds(), string(store.FailureJSON(c)), keep, unknownVal))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrFenced
		}
		if err != nil {
			return err
		}
		if detail, ok := store.DetailOutcomeUnknown(c); ok {
			if err := s.insertAudit(ctx, tx, call.UpdatedAt, call.CallID, store.EventOutcomeUnknown, detail); err != nil {
				return err
			}
		}
		return s.insertAudit(ctx, tx, call.UpdatedAt, call.CallID, store.EventRetryScheduled,
			store.DetailRetryScheduled(delay, c))
	}))
	if errors.Is(err, store.ErrFenced) {
		return store.Call{}, s.auditFenced(ctx, c)
	}
	if err != nil {
		return store.Call{}, err
	}
	return call, nil
}

// auditFenced records a refused completion in its own transaction (the
// completion's was rolled back) and returns ErrFenced, or ErrNotFound if
// there is no such call at all.
func (s *Store) auditFenced(ctx context.Context, c store.Completion) error {
	var detail string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE call_id = $1`, c.CallID))
		if err != nil {
			return err // ErrNoRows: no such call, nothing to fence
		}
		detail = store.DetailFenced(c, cur)
		_, err = tx.Exec(ctx, `INSERT INTO audit (ts, call_id, event, detail) SELECT `+dbNow+`, $1, $2, $3`,
			c.CallID, store.EventFenced, detail)
		return err
	})
	if err != nil {
		return err
	}
	return fmt.Errorf("postgres complete %s: %w: %s", c.CallID, store.ErrFenced, detail)
}
