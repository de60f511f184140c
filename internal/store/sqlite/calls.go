package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// audit appends one audit row inside tx.
func audit(ctx context.Context, tx querier, ts float64, callID, event, detail string) error {
	_, err := tx.ExecContext(ctx,
		`INSERT INTO audit (ts, call_id, event, detail) VALUES (?, ?, ?, ?)`, ts, callID, event, detail)
	return err
}

// CreateOrGet records a new call for n.IdemKey or returns the existing one
// (§12.5.2). See store.Store.
func (s *Store) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	if s.readOnly {
		return store.Call{}, 0, fmt.Errorf("sqlite create: %w", store.ErrReadOnly)
	}
	// Fast path without the write lock: a replay of a known key whose call
	// needs no reset only reads. The key→call binding and the fingerprint
	// never change once inserted, so answering Existing or ErrConflict
	// from a read snapshot is exact; a retryable failure (which would need
	// a reset) or an absent key falls through to the serialised path below.
	if c, err := getCall(ctx, s.r, true, n.IdemKey); err == nil {
		if c.Fingerprint != n.Fingerprint {
			return store.Call{}, 0, conflict(n.IdemKey)
		}
		if !(c.Status == store.StatusFailed && retryable(c.ErrorJSON)) {
			return c, store.Existing, nil
		}
	} else if !errors.Is(err, sql.ErrNoRows) {
		return store.Call{}, 0, mapErr(ctx, "create: lookup", err)
	}

	var (
		call store.Call
		out  store.Outcome
	)
	// One IMMEDIATE transaction: select by key, then insert or reset. No
	// other writer can slip in between the select and the insert, so two
	// requests with one key cannot both see it absent (§12.6.1); the UNIQUE
	// idem_key is the backstop.
	err := s.writeTx(ctx, "create", func(tx *sql.Tx) error {
		now := s.now()
		c, err := getCall(ctx, tx, true, n.IdemKey)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			args := string(n.ArgsJSON)
			if args == "" {
				args = "{}"
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO calls
				(call_id, idem_key, fingerprint, client_id, seq, tool, args_json, status, attempt, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)`,
				n.CallID, n.IdemKey, n.Fingerprint, n.ClientID, n.Seq, n.Tool, args, now, now); err != nil {
				return err
			}
			if err := audit(ctx, tx, now, n.CallID, store.EventCreated, n.Tool); err != nil {
				return err
			}
			out = store.Created
		case err != nil:
			return err
		case c.Fingerprint != n.Fingerprint:
			// Same key, different request: refuse, write nothing (409).
			return conflict(n.IdemKey)
		case c.Status == store.StatusFailed && retryable(c.ErrorJSON):
			// Only a same-key request resets a retryable failure; the
			// server never retries on its own (§12.9.3). attempt is kept:
			// it counts physical tries.
			res, err := tx.ExecContext(ctx, `UPDATE calls
				SET status = 'pending', error_json = NULL, result_json = NULL, lease_until = NULL, owner = NULL, updated_at = ?
				WHERE call_id = ? AND status = 'failed'`, now, c.CallID)
			if err := oneRow(res, err, "retry reset "+c.CallID); err != nil {
				return err
			}
			if err := audit(ctx, tx, now, c.CallID, store.EventRetryReset, "after "+errorSummary(c.ErrorJSON)); err != nil {
				return err
			}
			out = store.RetryReset
		default:
			call, out = c, store.Existing
			return nil
		}
		call, err = getCall(ctx, tx, false, ifEmpty(c.CallID, n.CallID))
		return err
	})
	if err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}

func conflict(key string) error {
	return fmt.Errorf("sqlite create: key %q: %w", key, store.ErrConflict)
}

func ifEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// retryable reports whether an error object says "retryable": true, the
// only thing that makes a failed call resettable. Anything else (false,
// missing, not a boolean, unparsable) is final.
func retryable(errJSON json.RawMessage) bool {
	var e struct {
		Retryable *bool `json:"retryable"`
	}
	if json.Unmarshal(errJSON, &e) != nil || e.Retryable == nil {
		return false
	}
	return *e.Retryable
}

// errorSummary renders an error object {"code","message"} for audit detail.
func errorSummary(errJSON json.RawMessage) string {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(errJSON, &e) != nil || (e.Code == "" && e.Message == "") {
		const max = 200
		if len(errJSON) > max {
			return string(errJSON[:max]) + "…"
		}
		return string(errJSON)
	}
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// oneRow checks that an UPDATE touched exactly one row.
func oneRow(res sql.Result, err error, what string) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%s: %d rows changed, want 1", what, n)
	}
	return nil
}

// claimable is the condition under which a call may be claimed: pending, or
// running under a lease that has expired. It is repeated verbatim in the
// conditional UPDATE so the claim re-checks it on the row it changes.
const claimable = `(status = 'pending' OR (status = 'running' AND lease_until <= ?))`

// ClaimNext claims up to limit runnable calls for owner, oldest first. See
// store.Store.
func (s *Store) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int) ([]store.Call, error) {
	if s.readOnly {
		return nil, fmt.Errorf("sqlite claim: %w", store.ErrReadOnly)
	}
	if lease < 0 {
		return nil, fmt.Errorf("sqlite claim: negative lease %v", lease)
	}
	if limit <= 0 {
		return []store.Call{}, nil
	}
	// Workers poll often; checking on a read connection first keeps an
	// idle poll from taking the write lock.
	var any int
	err := s.r.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM calls WHERE `+claimable+`)`, s.now()).Scan(&any)
	if err != nil {
		return nil, mapErr(ctx, "claim: check", err)
	}
	if any == 0 {
		return []store.Call{}, nil
	}

	claimed := []store.Call{}
	err = s.writeTx(ctx, "claim", func(tx *sql.Tx) error {
		claimed = claimed[:0]
		now := s.now()
		until := now + lease.Seconds()
		rows, err := tx.QueryContext(ctx, `SELECT call_id FROM calls WHERE `+claimable+`
			ORDER BY created_at, rowid LIMIT ?`, now, limit)
		if err != nil {
			return err
		}
		var ids []string
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
			// The conditional update is the claim: it wins only if the row
			// is still claimable. Under IMMEDIATE it always is, but the
			// check keeps the claim correct on its own (and is what the
			// PostgreSQL backend relies on).
			res, err := tx.ExecContext(ctx, `UPDATE calls
				SET status = 'running', attempt = attempt + 1, lease_until = ?, owner = ?, updated_at = ?
				WHERE call_id = ? AND `+claimable, until, owner, now, id, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue // someone else won it
			}
			if err := audit(ctx, tx, now, id, store.EventClaimed, owner); err != nil {
				return err
			}
			c, err := getCall(ctx, tx, false, id)
			if err != nil {
				return err
			}
			claimed = append(claimed, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// fencing is the WHERE clause of every completion: the call must still be
// running under exactly the (owner, attempt) the worker claimed. A worker
// whose lease expired and was taken over holds an old attempt number (or
// another owner name) and matches nothing, so its commit, and its effect,
// never land (SPEC §4.5).
const fencing = `call_id = ? AND status = 'running' AND owner = ? AND attempt = ?`

// Succeed marks the call succeeded and writes its effect in one
// transaction, fenced on (owner, attempt). See store.Store.
func (s *Store) Succeed(ctx context.Context, c store.Completion) (store.Call, error) {
	if s.readOnly {
		return store.Call{}, fmt.Errorf("sqlite succeed: %w", store.ErrReadOnly)
	}
	if e := c.Effect; e != nil {
		if e.EffectID == "" {
			return store.Call{}, fmt.Errorf("sqlite succeed %s: effect without an effect id", c.CallID)
		}
		if e.CallID != "" && e.CallID != c.CallID {
			return store.Call{}, fmt.Errorf("sqlite succeed %s: effect belongs to call %s", c.CallID, e.CallID)
		}
	}
	var call store.Call
	err := s.writeTx(ctx, "succeed", func(tx *sql.Tx) error {
		now := s.now()
		res, err := tx.ExecContext(ctx, `UPDATE calls
			SET status = 'succeeded', result_json = ?, error_json = NULL, lease_until = NULL, owner = NULL, updated_at = ?
			WHERE `+fencing, jsonArg(c.Result), now, c.CallID, c.Owner, c.Attempt)
		if err := fenced(ctx, tx, res, err, c); err != nil {
			return err
		}
		detail := "no effect"
		if e := c.Effect; e != nil {
			// ON CONFLICT(call_id) DO NOTHING: effects.call_id UNIQUE is
			// the last gate (§12.3.2). effect_id is derived from call_id,
			// so a second insert for one call is the same effect and is
			// dropped; a clash on effect_id with another call is an error
			// and rolls the whole completion back.
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
				SELECT ?, call_id, COALESCE(NULLIF(?, ''), tool), ?, ? FROM calls WHERE call_id = ?
				ON CONFLICT (call_id) DO NOTHING`,
				e.EffectID, e.Tool, e.Amount, now, c.CallID); err != nil {
				return err
			}
			// Point the call at the effect that exists, which is the one
			// just inserted unless an earlier one was kept.
			if err := tx.QueryRowContext(ctx, `UPDATE calls
				SET effect_id = (SELECT effect_id FROM effects WHERE call_id = ?)
				WHERE call_id = ? RETURNING effect_id`, c.CallID, c.CallID).Scan(&detail); err != nil {
				return err
			}
		}
		if err := audit(ctx, tx, now, c.CallID, store.EventSucceeded, detail); err != nil {
			return err
		}
		call, err = getCall(ctx, tx, false, c.CallID)
		return err
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
	errJSON := c.Error
	if len(errJSON) == 0 {
		errJSON = json.RawMessage(`{}`)
	}
	var call store.Call
	err := s.writeTx(ctx, "fail", func(tx *sql.Tx) error {
		now := s.now()
		res, err := tx.ExecContext(ctx, `UPDATE calls
			SET status = 'failed', error_json = ?, result_json = NULL, lease_until = NULL, owner = NULL, updated_at = ?
			WHERE `+fencing, string(errJSON), now, c.CallID, c.Owner, c.Attempt)
		if err := fenced(ctx, tx, res, err, c); err != nil {
			return err
		}
		if err := audit(ctx, tx, now, c.CallID, store.EventFailed, errorSummary(errJSON)); err != nil {
			return err
		}
		call, err = getCall(ctx, tx, false, c.CallID)
		return err
	})
	if err != nil {
		return store.Call{}, s.auditFenced(ctx, c, err)
	}
	return call, nil
}

// fenced inspects the result of a fencing UPDATE. No row changed means the
// completion is stale (or the call does not exist): it reads why, for the
// audit, and returns a *fencedError (or sql.ErrNoRows).
func fenced(ctx context.Context, tx *sql.Tx, res sql.Result, err error, c store.Completion) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	var (
		status string
		owner  sql.NullString
		att    int64
	)
	if err := tx.QueryRowContext(ctx, `SELECT status, owner, attempt FROM calls WHERE call_id = ?`, c.CallID).
		Scan(&status, &owner, &att); err != nil {
		return err // sql.ErrNoRows: no such call, nothing to fence
	}
	state := status
	if owner.Valid {
		state += fmt.Sprintf(" under owner %s attempt %d", owner.String, att)
	} else {
		state += fmt.Sprintf(" at attempt %d", att)
	}
	return &fencedError{detail: fmt.Sprintf("owner %s attempt %d refused: call is %s", c.Owner, c.Attempt, state)}
}

// auditFenced turns a completion's failure into its result. A fenced
// completion was rolled back whole; the refusal is then audited in a
// transaction of its own (so nothing of the stale attempt can ride along)
// and reported as store.ErrFenced. Other errors pass through.
func (s *Store) auditFenced(ctx context.Context, c store.Completion, err error) error {
	var fe *fencedError
	if !errors.As(err, &fe) {
		return err
	}
	fencedErr := fmt.Errorf("sqlite complete %s: %w: %s", c.CallID, store.ErrFenced, fe.detail)
	aerr := s.writeTx(ctx, "audit fenced", func(tx *sql.Tx) error {
		return audit(ctx, tx, s.now(), c.CallID, store.EventFenced, fe.detail)
	})
	if aerr != nil {
		return errors.Join(fencedErr, aerr)
	}
	return fencedErr
}

// RecoverExpired returns running calls whose lease has expired to pending.
// See store.Store.
func (s *Store) RecoverExpired(ctx context.Context) ([]string, error) {
	if s.readOnly {
		return nil, fmt.Errorf("sqlite recover: %w", store.ErrReadOnly)
	}
	// Runs every 200 ms (§12.7.1): look on a read connection first, take
	// the write lock only when there is something to recover.
	var any int
	err := s.r.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM calls WHERE status = 'running' AND lease_until <= ?)`, s.now()).Scan(&any)
	if err != nil {
		return nil, mapErr(ctx, "recover: check", err)
	}
	if any == 0 {
		return []string{}, nil
	}

	recovered := []string{}
	err = s.writeTx(ctx, "recover", func(tx *sql.Tx) error {
		recovered = recovered[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, `SELECT call_id, owner, attempt FROM calls
			WHERE status = 'running' AND lease_until <= ? ORDER BY lease_until, rowid`, now)
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
				SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?
				WHERE call_id = ? AND status = 'running' AND lease_until <= ?`, now, e.id, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue
			}
			detail := fmt.Sprintf("lease expired (owner %s, attempt %d)", e.owner, e.attempt)
			if err := audit(ctx, tx, now, e.id, store.EventRecover, detail); err != nil {
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
func (s *Store) Release(ctx context.Context, callID, owner string, attempt int64, reason string) error {
	if s.readOnly {
		return fmt.Errorf("sqlite release: %w", store.ErrReadOnly)
	}
	return s.writeTx(ctx, "release", func(tx *sql.Tx) error {
		now := s.now()
		// Fenced like a completion: if the call was completed, recovered
		// or taken over since the caller looked, leave it alone.
		res, err := tx.ExecContext(ctx, `UPDATE calls
			SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?
			WHERE `+fencing, now, callID, owner, attempt)
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
			return fmt.Errorf("sqlite release %s (owner %s, attempt %d): %w", callID, owner, attempt, store.ErrNotClaimable)
		}
		return audit(ctx, tx, now, callID, store.EventRecover, reason)
	})
}
