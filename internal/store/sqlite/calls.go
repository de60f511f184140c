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
func (s *Store) audit(ctx context.Context, tx *sql.Tx, ts float64, callID, event, detail string) error {
	_, err := tx.StmtContext(ctx, s.wq.insertAudit).ExecContext(ctx, ts, callID, event, detail)
	return err
}

// queryCall runs a statement that returns one call (a read, or a write with
// RETURNING) inside tx. sql.ErrNoRows means no row matched.
func queryCall(ctx context.Context, tx *sql.Tx, st *sql.Stmt, args ...any) (store.Call, error) {
	return scanCall(tx.StmtContext(ctx, st).QueryRowContext(ctx, args...))
}

// CreateOrGet records a new call for n.IdemKey or returns the existing one
// (docs/lifecycle.md, "Create or get"). See store.Store.
func (s *Store) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	if s.readOnly {
		return store.Call{}, 0, fmt.Errorf("sqlite create: %w", store.ErrReadOnly)
	}
	// Fast path without the write lock: a replay of a known key whose call
	// needs no reset only reads. The key→call binding and the fingerprint
	// never change once inserted, so answering Existing or ErrConflict
	// from a read snapshot is exact; a retryable failure (which would need
	// a reset) or an absent key falls through to the serialised path below.
	if err := s.closedErr("create"); err != nil {
		return store.Call{}, 0, err
	}
	if c, err := scanCall(s.rq.callByKey.QueryRowContext(ctx, n.Principal, n.IdemKey)); err == nil {
		if c.Fingerprint != n.Fingerprint {
			return store.Call{}, 0, conflict(c)
		}
		if !(c.Status == store.StatusFailed && store.Retryable(c.ErrorJSON)) {
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
	// requests with one key cannot both see it absent; the UNIQUE
	// idem_key is the backstop.
	err := s.writeTx(ctx, store.WriteCreate, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		c, err := queryCall(ctx, tx, s.wq.callByKey, n.Principal, n.IdemKey)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// Not a call's own key. An alias? The same transaction
			// decides, so a key is never both (store.Store.CreateOrGet).
			var aliasOf, aliasFP string
			err = tx.StmtContext(ctx, s.wq.aliasByKey).QueryRowContext(ctx, n.Principal, n.IdemKey).Scan(&aliasOf, &aliasFP)
			switch {
			case err == nil:
				if aliasFP != n.Fingerprint {
					return fmt.Errorf("sqlite create: %w", &store.ConflictError{CallID: aliasOf, Key: n.IdemKey})
				}
				call, err = queryCall(ctx, tx, s.wq.callByID, aliasOf)
				out = store.Existing
				return err
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			if n.DedupWindow > 0 && n.Intent != "" {
				c, err := queryCall(ctx, tx, s.wq.callByIntent, n.Principal, n.Intent, n.Tool, now-n.DedupWindow.Seconds())
				switch {
				case err == nil:
					if _, err := tx.StmtContext(ctx, s.wq.insertAlias).ExecContext(ctx,
						n.Principal, n.IdemKey, c.CallID, n.Fingerprint, now); err != nil {
						return err
					}
					call, out = c, store.Deduplicated
					return s.audit(ctx, tx, now, c.CallID, store.EventDeduplicated, n.IdemKey)
				case !errors.Is(err, sql.ErrNoRows):
					return err
				}
			}
			args := string(n.ArgsJSON)
			if args == "" {
				args = "{}"
			}
			var intent *string
			if n.Intent != "" {
				intent = &n.Intent
			}
			call, err = queryCall(ctx, tx, s.wq.insertCall,
				n.CallID, n.Principal, n.IdemKey, n.Fingerprint, n.ClientID, n.Seq, n.Tool, args, now, now, intent, store.ViaOf(n.Via))
			if err != nil {
				return err
			}
			out = store.Created
			return s.audit(ctx, tx, now, n.CallID, store.EventCreated, store.DetailCreated(n.Tool))
		case err != nil:
			return err
		case c.Fingerprint != n.Fingerprint:
			// Same key, different request: refuse, write nothing (409).
			return conflict(c)
		case c.Status == store.StatusFailed && store.Retryable(c.ErrorJSON):
			// Only a same-key request resets a retryable failure; the
			// server never retries on its own. attempt is kept:
			// it counts physical tries.
			call, err = queryCall(ctx, tx, s.wq.retryReset, now, c.CallID)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("retry reset %s: no row changed", c.CallID)
			} else if err != nil {
				return err
			}
			out = store.RetryReset
			return s.audit(ctx, tx, now, c.CallID, store.EventRetryReset, store.DetailRetryReset(c.ErrorJSON))
		default:
			call, out = c, store.Existing
			return nil
		}
	})
	if err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}

// conflict is CreateOrGet's ErrConflict, naming existing, the call that
// holds the key.
func conflict(existing store.Call) error {
	return fmt.Errorf("sqlite create: %w", &store.ConflictError{CallID: existing.CallID, Key: existing.IdemKey})
}

// notBeforePassed is true of a pending call that may be claimed now (first
// ?): no server-side retry is waiting, or its not-before time has passed.
const notBeforePassed = `(not_before IS NULL OR not_before <= ?)`

// toolNotFull is true of a call whose tool is not in the JSON array ? (the
// tools ClaimNext may take none of). json_each turns one text parameter
// into the list, so the statement stays prepared once whatever the list.
const toolNotFull = `tool NOT IN (SELECT value FROM json_each(?))`

// claimable is the condition under which a call may be claimed: pending
// with its not-before time passed, or running under a lease that has
// expired (both ? are now). It is the WHERE clause of the conditional
// UPDATE (sqlClaim), so the claim re-checks it on the row it changes.
const claimable = `((status = 'pending' AND ` + notBeforePassed + `) OR (status = 'running' AND lease_until <= ?))`

// candidate is a claimable call found by one of the pick queries.
type candidate struct {
	rowid     int64
	callID    string
	createdAt float64
	tool      string
}

// before orders candidates oldest first, rowid breaking ties, as one
// ORDER BY created_at, rowid over both kinds would.
func (a candidate) before(b candidate) bool {
	if a.createdAt != b.createdAt {
		return a.createdAt < b.createdAt
	}
	return a.rowid < b.rowid
}

// ClaimNext claims up to limit runnable calls for owner, oldest first. See
// store.Store.
func (s *Store) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	if s.readOnly {
		return nil, fmt.Errorf("sqlite claim: %w", store.ErrReadOnly)
	}
	full, left, err := quotaArgs(quotas)
	if err != nil {
		return nil, fmt.Errorf("sqlite claim: %w", err)
	}
	if lease < 0 {
		return nil, fmt.Errorf("sqlite claim: negative lease %v", lease)
	}
	if limit <= 0 {
		return []store.Call{}, nil
	}
	if err := s.closedErr("claim"); err != nil {
		return nil, err
	}
	// Workers poll often; checking on a read connection first keeps an
	// idle poll from taking the write lock.
	var any bool
	checkNow := s.now()
	if err := s.rq.hasClaimable.QueryRowContext(ctx, checkNow, full, checkNow, full).Scan(&any); err != nil {
		return nil, mapErr(ctx, "claim: check", err)
	}
	if !any {
		return []store.Call{}, nil
	}

	claimed := []store.Call{}
	err = s.writeTx(ctx, store.WriteClaim, func(ctx context.Context, tx *sql.Tx) error {
		claimed = claimed[:0]
		taken := map[string]int{} // calls of a capped tool claimed so far
		now := s.now()
		until := now + lease.Seconds()
		// Two index-ordered picks instead of one query with an OR, which
		// SQLite can only answer by collecting every claimable row and
		// sorting them (USE TEMP B-TREE FOR ORDER BY): with a queue of
		// 20 k calls, every claim sorted 20 k rows. Each pick returns at
		// most limit rows, so the oldest limit of their union are the
		// oldest limit claimable calls, exactly as the single query chose.
		pending, err := pick(ctx, tx.StmtContext(ctx, s.wq.pickPending), now, full, limit)
		if err != nil {
			return err
		}
		expired, err := pick(ctx, tx.StmtContext(ctx, s.wq.pickExpired), now, full, limit)
		if err != nil {
			return err
		}
		claim := tx.StmtContext(ctx, s.wq.claim)
		for _, cand := range oldest(pending, expired, limit) {
			if max, capped := left[cand.tool]; capped && taken[cand.tool] >= max {
				continue // the tool's quota is used up: leave the call pending
			}
			c, err := scanCall(claim.QueryRowContext(ctx, until, owner, now, cand.callID, now, now))
			if errors.Is(err, sql.ErrNoRows) {
				continue // no longer claimable: someone else won it
			} else if err != nil {
				return err
			}
			if err := s.audit(ctx, tx, now, c.CallID, store.EventClaimed, store.DetailClaimed(owner)); err != nil {
				return err
			}
			claimed = append(claimed, c)
			taken[c.Tool]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// quotaArgs splits ClaimNext's quotas into the JSON array of full tools
// (Max <= 0, toolNotFull's parameter) and the quota left of the others.
func quotaArgs(quotas []store.ToolQuota) (full string, left map[string]int, err error) {
	var names []string
	left = map[string]int{}
	for _, q := range quotas {
		if q.Max <= 0 {
			names = append(names, q.Tool)
		} else {
			left[q.Tool] = q.Max
		}
	}
	if len(names) == 0 {
		return "[]", left, nil
	}
	b, err := json.Marshal(names)
	return string(b), left, err
}

// pick runs a pick query and returns its candidates in order.
func pick(ctx context.Context, st *sql.Stmt, args ...any) ([]candidate, error) {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.rowid, &c.callID, &c.createdAt, &c.tool); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// oldest merges two candidate lists, each already oldest first, and keeps
// the first limit.
func oldest(a, b []candidate, limit int) []candidate {
	out := make([]candidate, 0, min(limit, len(a)+len(b)))
	for len(out) < limit && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || (len(a) > 0 && !b[0].before(a[0])) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

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
		var err error
		call, err = queryCall(ctx, tx, s.wq.succeed, jsonArg(c.Result), now, c.CallID, c.Owner, c.Attempt)
		if errors.Is(err, sql.ErrNoRows) {
			return whyFenced(ctx, tx, s.wq.callByID, c)
		} else if err != nil {
			return err
		}
		if e := c.Effect; e != nil {
			if _, err := tx.StmtContext(ctx, s.wq.insertEffect).ExecContext(ctx,
				e.EffectID, e.Tool, e.Amount, now, c.CallID); err != nil {
				return err
			}
			var linked string
			if err := tx.StmtContext(ctx, s.wq.linkEffect).QueryRowContext(ctx, c.CallID, c.CallID).
				Scan(&linked); err != nil {
				return err
			}
			call.EffectID = &linked
		}
		return s.audit(ctx, tx, now, c.CallID, store.EventSucceeded, store.DetailSucceeded(call.EffectID, c))
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
		var err error
		call, err = queryCall(ctx, tx, s.wq.fail, string(errJSON), now, c.CallID, c.Owner, c.Attempt)
		if errors.Is(err, sql.ErrNoRows) {
			return whyFenced(ctx, tx, s.wq.callByID, c)
		} else if err != nil {
			return err
		}
		return s.audit(ctx, tx, now, c.CallID, store.EventFailed, store.DetailFailed(c))
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
		var err error
		call, err = queryCall(ctx, tx, s.wq.scheduleRetry, now+delay.Seconds(), now, c.CallID, c.Owner, c.Attempt)
		if errors.Is(err, sql.ErrNoRows) {
			return whyFenced(ctx, tx, s.wq.callByID, c)
		} else if err != nil {
			return err
		}
		return s.audit(ctx, tx, now, c.CallID, store.EventRetryScheduled, store.DetailRetryScheduled(delay, c))
	})
	if err != nil {
		return store.Call{}, s.auditFenced(ctx, c, err)
	}
	return call, nil
}

// whyFenced is called when a fencing UPDATE matched no row: the completion
// is stale (or the call does not exist). It reads why, for the audit, and
// returns a *fencedError (or sql.ErrNoRows for an unknown call).
func whyFenced(ctx context.Context, tx *sql.Tx, callByID *sql.Stmt, c store.Completion) error {
	cur, err := queryCall(ctx, tx, callByID, c.CallID)
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
		return s.audit(ctx, tx, s.now(), c.CallID, store.EventFenced, fe.detail)
	})
	if aerr != nil {
		return errors.Join(fencedErr, aerr)
	}
	return fencedErr
}

// leaseLapsed is RecoverExpired's condition on a running call's lease: it
// has expired, or there is none. A running call always gets a deadline
// from its claim, so lease_until IS NULL means a damaged or hand-edited
// row; nothing would ever expire it, and pending is the safe state to
// return it to (the PostgreSQL backend decides the same; storetest checks
// both). ClaimNext does not take such a call directly: recovery first.
const leaseLapsed = `(lease_until IS NULL OR lease_until <= ?)`

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
		return nil, mapErr(ctx, "recover: check", err)
	}
	if !any {
		return []string{}, nil
	}

	recovered := []string{}
	err := s.writeTx(ctx, store.WriteRecover, func(ctx context.Context, tx *sql.Tx) error {
		recovered = recovered[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, `SELECT call_id, owner, attempt FROM calls
			WHERE status = 'running' AND `+leaseLapsed+` ORDER BY lease_until, rowid`, now)
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
				WHERE call_id = ? AND status = 'running' AND `+leaseLapsed, now, e.id, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				continue
			}
			if err := s.audit(ctx, tx, now, e.id, store.EventRecover, store.DetailLeaseExpired(store.Lease{CallID: e.id, Owner: e.owner, Attempt: e.attempt})); err != nil {
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
			return fmt.Errorf("sqlite release %s (owner %s, attempt %d): %w", callID, owner, attempt, store.ErrNotHeld)
		}
		return s.audit(ctx, tx, now, callID, store.EventRecover, reason)
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
