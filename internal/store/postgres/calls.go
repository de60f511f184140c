package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/store"
)

// dbNow is "now" as Unix seconds on the database server's clock.
//
// clock_timestamp() rather than now(): now() is frozen at the start of the
// transaction, so in a transaction that first waited on a row lock it lies
// in the past, and a lease computed from it would be shorter than asked and
// an expiry test would lag. clock_timestamp() is the server's wall clock at
// the moment of evaluation. Because it is volatile, each statement below
// evaluates it once, in a one-row "clock" subquery or CTE, and every row
// and column of that statement (lease_until, updated_at, the audit ts)
// uses that single value.
//
// Either way the clock is the database's, shared by every instance; no
// instance ever sends its own time, so skew between machines cannot move a
// lease.
const dbNow = `extract(epoch FROM clock_timestamp())::double precision`

// callColumns lists the calls columns in the order scanCall reads them.
const callColumns = `call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json, status,
  result_json, error_json, attempt, lease_until, owner, effect_id, created_at, updated_at, cancel_requested,
  not_before, via`

// callColumnsOf is callColumns qualified by a table alias, for statements
// that join calls with other relations.
func callColumnsOf(alias string) string {
	return alias + `.call_id, ` + alias + `.principal, ` + alias + `.idem_key, ` + alias + `.fingerprint, ` + alias + `.client_id, ` +
		alias + `.seq, ` + alias + `.tool, ` + alias + `.args_json, ` + alias + `.status, ` +
		alias + `.result_json, ` + alias + `.error_json, ` + alias + `.attempt, ` + alias + `.lease_until, ` +
		alias + `.owner, ` + alias + `.effect_id, ` + alias + `.created_at, ` + alias + `.updated_at, ` +
		alias + `.cancel_requested, ` + alias + `.not_before, ` + alias + `.via`
}

// scanCall reads one row of callColumns.
func scanCall(row pgx.Row) (store.Call, error) {
	var (
		c              store.Call
		args           string
		status         string
		result, errObj *string
	)
	err := row.Scan(&c.CallID, &c.Principal, &c.IdemKey, &c.Fingerprint, &c.ClientID, &c.Seq, &c.Tool, &args, &status,
		&result, &errObj, &c.Attempt, &c.LeaseUntil, &c.Owner, &c.EffectID, &c.CreatedAt, &c.UpdatedAt, &c.CancelRequested, &c.NotBefore, &c.Via)
	if err != nil {
		return store.Call{}, err
	}
	c.ArgsJSON = json.RawMessage(args)
	c.Status = store.Status(status)
	if result != nil {
		c.ResultJSON = json.RawMessage(*result)
	}
	if errObj != nil {
		c.ErrorJSON = json.RawMessage(*errObj)
	}
	return c, nil
}

// collectCalls reads every row of callColumns.
func collectCalls(rows pgx.Rows) ([]store.Call, error) {
	defer rows.Close()
	calls := []store.Call{}
	for rows.Next() {
		c, err := scanCall(rows)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, rows.Err()
}

// insertAudit appends one audit row in tx.
func insertAudit(ctx context.Context, tx pgx.Tx, ts float64, callID, event, detail string) error {
	_, err := tx.Exec(ctx, `INSERT INTO audit (ts, call_id, event, detail) VALUES ($1, $2, $3, $4)`,
		ts, callID, event, detail)
	return err
}

// errWinnerVanished: the key's row was gone between the conflicting INSERT
// and the SELECT: the retention purge deleted it in between (a final call
// past the retention). CreateOrGet retries on it, and then inserts.
var errWinnerVanished = errors.New("postgres: conflicting call row vanished")

// createOrGetTries bounds CreateOrGet's retries on errWinnerVanished.
const createOrGetTries = 5

// CreateOrGet records a new call for n.IdemKey or returns the existing one.
//
// Correct at READ COMMITTED without any table lock: the INSERT ... ON
// CONFLICT DO NOTHING either inserts (the unique index on idem_key makes
// exactly one concurrent inserter win; a loser waits for the winner's
// transaction to end) or returns no row, and then the winner's row is read;
// only a failed call, which a retryable reset may change, is re-read with
// FOR UPDATE, so deciding on the reset and performing it cannot interleave
// with a concurrent reset.
func (s *Store) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	if err := s.writable(); err != nil {
		return store.Call{}, 0, err
	}
	for try := 0; try < createOrGetTries; try++ {
		call, out, err := s.createOrGetOnce(ctx, n)
		if errors.Is(err, errWinnerVanished) {
			continue
		}
		return call, out, err
	}
	return store.Call{}, 0, fmt.Errorf("postgres: create or get %q: %w", n.IdemKey, errWinnerVanished)
}

// createSQL inserts a new call and its created audit row in one statement
// ($1 call id, $2 key, $3 fingerprint, $4 client id, $5 seq, $6 tool, $7
// args, $8 principal, $9 intent, $10 via, $11 the created audit detail),
// unless the key is a call's own key (ON CONFLICT: nothing, no row) or an
// alias (NOT EXISTS: nothing, no row). It returns the new call.
const createSQL = `
WITH clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), created AS (
  INSERT INTO calls (call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json,
                     status, attempt, created_at, updated_at, intent, via)
  SELECT $1, $8, $2, $3, $4, $5, $6, $7, 'pending', 0, clock.now, clock.now, $9, $10
  FROM clock
  WHERE NOT EXISTS (SELECT 1 FROM key_aliases WHERE principal = $8 AND idem_key = $2)
  ON CONFLICT (principal, idem_key) DO NOTHING
  RETURNING ` + callColumns + `
), audited AS (
  INSERT INTO audit (ts, call_id, event, detail)
  SELECT created_at, call_id, '` + store.EventCreated + `', $11::text FROM created
)
SELECT ` + callColumns + ` FROM created`

// lockKeySQL is the per-key advisory lock of aliasOrDedup.
const lockKeySQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2, 0))`

// errSlowPath: createFast could not decide alone; createOrGetOnce's
// transaction decides (nothing was written).
var errSlowPath = errors.New("postgres: create needs the full transaction")

// createFast is the common create-or-get of a key with no dedup rule, in
// one round trip: one pipelined batch, which PostgreSQL runs as one
// implicit transaction, of the key's advisory lock (as aliasOrDedup takes
// it), the insert of the call with its audit row unless the key is an
// alias or a call's own key (createSQL), and, for when it was not
// inserted, a read of the key's call. Each statement takes its snapshot
// after the lock is held (READ COMMITTED), so the alias check sees
// whatever an earlier holder of the lock committed, exactly as
// aliasOrDedup's SELECT does. It answers Created, and a replay of a
// non-failed call (Existing) or a conflict; anything else (an alias, a
// failed call that may be reset, a vanished winner) is errSlowPath, and
// then nothing was written.
//
// Before this, a create was six round trips (BEGIN, lock, alias lookup,
// INSERT, audit INSERT, COMMIT): BENCHMARKS.md, section 15.
func (s *Store) createFast(ctx context.Context, n store.NewCall, args string, intent *string) (store.Call, store.Outcome, error) {
	var (
		call store.Call
		out  store.Outcome
	)
	op := s.createOp(n, args, intent, &call, &out)
	if err := s.runOp(ctx, s.creates, store.WriteCreate, op, func() bool { return out == store.Created }); err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}

// createOp is createFast's write, answering into call and out.
func (s *Store) createOp(n store.NewCall, args string, intent *string, call *store.Call, out *store.Outcome) *groupOp {
	return &groupOp{
		key: "k" + n.Principal + "\x01" + n.IdemKey,
		queue: func(b *pgx.Batch) {
			b.Queue(lockKeySQL, n.Principal, n.IdemKey)
			b.Queue(createSQL, n.CallID, n.IdemKey, n.Fingerprint, n.ClientID, n.Seq, n.Tool, args, n.Principal, intent,
				store.ViaOf(n.Via), store.DetailCreated(n.Tool))
			b.Queue(`SELECT `+callColumns+` FROM calls WHERE principal = $1 AND idem_key = $2`, n.Principal, n.IdemKey)
		},
		read: func(r *results) error {
			*call, *out = store.Call{}, 0
			if _, err := r.Exec(); err != nil {
				return err
			}
			created, err := scanCall(r.QueryRow())
			existing, errExisting := scanCall(r.QueryRow())
			switch {
			case err == nil:
				*call, *out = created, store.Created
				return nil
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			case errors.Is(errExisting, pgx.ErrNoRows):
				return errSlowPath // an alias, or the winner vanished
			case errExisting != nil:
				return errExisting
			case existing.Fingerprint != n.Fingerprint:
				// Same key, different request: refuse, write nothing (409).
				return fmt.Errorf("postgres create: %w", &store.ConflictError{CallID: existing.CallID, Key: n.IdemKey})
			case existing.Status == store.StatusFailed:
				return errSlowPath // may be reset: decided under FOR UPDATE
			}
			*call, *out = existing, store.Existing
			return nil
		},
	}
}

func (s *Store) createOrGetOnce(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	var (
		call store.Call
		out  store.Outcome
	)
	args := string(n.ArgsJSON)
	if len(n.ArgsJSON) == 0 {
		args = "{}"
	}
	var intent *string
	if n.Intent != "" {
		intent = &n.Intent
	}
	if n.DedupWindow <= 0 || n.Intent == "" {
		call, out, err := s.createFast(ctx, n, args, intent)
		if !errors.Is(err, errSlowPath) {
			return call, out, interpret(ctx, err)
		}
	}
	err := s.inTx(ctx, s.beforeCommit(store.WriteCreate, func() bool { return out != store.Existing }, func(tx pgx.Tx) error {
		handled, err := s.aliasOrDedup(ctx, tx, n, &call, &out)
		if err != nil || handled {
			return err
		}
		call, err = scanCall(tx.QueryRow(ctx, `
INSERT INTO calls (call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json,
                   status, attempt, created_at, updated_at, intent, via)
SELECT $1, $8, $2, $3, $4, $5, $6, $7, 'pending', 0, clock.now, clock.now, $9, $10
FROM (SELECT `+dbNow+` AS now) AS clock
ON CONFLICT (principal, idem_key) DO NOTHING
RETURNING `+callColumns,
			n.CallID, n.IdemKey, n.Fingerprint, n.ClientID, n.Seq, n.Tool, args, n.Principal, intent, store.ViaOf(n.Via)))
		if err == nil {
			out = store.Created
			// Same transaction as the insert: a call never exists unaudited.
			return insertAudit(ctx, tx, call.CreatedAt, call.CallID, store.EventCreated, store.DetailCreated(call.Tool))
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}

		// The key exists, committed: ON CONFLICT waited for its inserter's
		// transaction, and this statement's snapshot is newer. A plain read
		// is enough for the common replay: the fingerprint never changes,
		// and a non-failed status needs no write. Locking every replay
		// would instead make the scheduler's SKIP LOCKED pass over a hot
		// key's call for as long as its clients keep retrying.
		call, err = scanCall(tx.QueryRow(ctx,
			`SELECT `+callColumns+` FROM calls WHERE principal = $1 AND idem_key = $2`, n.Principal, n.IdemKey))
		if errors.Is(err, pgx.ErrNoRows) {
			return errWinnerVanished
		}
		if err != nil {
			return err
		}
		if call.Fingerprint != n.Fingerprint {
			// Same key, different request: refuse, write nothing (409).
			return fmt.Errorf("postgres create: %w", &store.ConflictError{CallID: call.CallID, Key: n.IdemKey})
		}
		if call.Status != store.StatusFailed {
			out = store.Existing
			return nil
		}
		// A failed call may be reset. Re-read it FOR UPDATE: the row lock is
		// held until commit, so the status we decide on is the status we
		// change, and of two same-key requests racing to reset it, the
		// second waits and then finds it pending (Existing).
		call, err = scanCall(tx.QueryRow(ctx,
			`SELECT `+callColumns+` FROM calls WHERE call_id = $1 FOR UPDATE`, call.CallID))
		if err != nil {
			return err
		}
		if call.Status != store.StatusFailed || !store.Retryable(call.ErrorJSON) {
			out = store.Existing
			return nil
		}

		// A retryable failure asked for again with the same key: run it
		// again. Attempt is kept, so the attempt count goes on.
		prevErr := call.ErrorJSON
		call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = 'pending', result_json = NULL, error_json = NULL,
    lease_until = NULL, owner = NULL, cancel_requested = false, not_before = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1 AND status = 'failed'
RETURNING `+callColumnsOf("calls"), call.CallID))
		if err != nil {
			return err
		}
		out = store.RetryReset
		return insertAudit(ctx, tx, call.UpdatedAt, call.CallID, store.EventRetryReset, store.DetailRetryReset(prevErr))
	}))
	if err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}

// aliasOrDedup is CreateOrGet's first step, in its transaction: it
// answers a request whose key is an alias (Existing, or a conflict under
// another fingerprint), or whose new key deduplicates by intent
// (Deduplicated), and reports whether it did. Otherwise the caller goes on
// with its insert-or-get of a call's own key.
//
// A key must never be both a call's own key and an alias, and the two live
// in two tables, which no one unique index spans. A transaction-scoped
// advisory lock on (principal, key), taken before either is inserted,
// serialises the requests of one key; each then checks the other table
// with a statement that starts after the lock is held, so at READ
// COMMITTED it sees whatever the previous holder committed.
func (s *Store) aliasOrDedup(ctx context.Context, tx pgx.Tx, n store.NewCall, call *store.Call, out *store.Outcome) (bool, error) {
	if _, err := tx.Exec(ctx, lockKeySQL, n.Principal, n.IdemKey); err != nil {
		return false, err
	}
	var aliasOf, aliasFP string
	err := tx.QueryRow(ctx, `SELECT call_id, fingerprint FROM key_aliases WHERE principal = $1 AND idem_key = $2`,
		n.Principal, n.IdemKey).Scan(&aliasOf, &aliasFP)
	switch {
	case err == nil:
		if aliasFP != n.Fingerprint {
			return false, fmt.Errorf("postgres create: %w", &store.ConflictError{CallID: aliasOf, Key: n.IdemKey})
		}
		*call, err = scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE call_id = $1`, aliasOf))
		*out = store.Existing
		return true, err
	case !errors.Is(err, pgx.ErrNoRows):
		return false, err
	}
	if n.DedupWindow <= 0 || n.Intent == "" {
		return false, nil
	}
	var own bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM calls WHERE principal = $1 AND idem_key = $2)`,
		n.Principal, n.IdemKey).Scan(&own); err != nil {
		return false, err
	}
	if own {
		return false, nil // a call's own key: the caller replays it
	}
	c, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM calls
WHERE principal = $1 AND intent = $2 AND tool = $3 AND created_at >= `+dbNow+` - $4
ORDER BY created_at DESC LIMIT 1`, n.Principal, n.Intent, n.Tool, n.DedupWindow.Seconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var ts float64
	if err := tx.QueryRow(ctx, `INSERT INTO key_aliases (principal, idem_key, call_id, fingerprint, created_at)
VALUES ($1, $2, $3, $4, `+dbNow+`) RETURNING created_at`, n.Principal, n.IdemKey, c.CallID, n.Fingerprint).Scan(&ts); err != nil {
		return false, err
	}
	*call, *out = c, store.Deduplicated
	return true, insertAudit(ctx, tx, ts, c.CallID, store.EventDeduplicated, n.IdemKey)
}

// claimSQL is ClaimNext's statement ($1 owner, $2 limit, $3 lease seconds,
// $4 the claimed audit detail, store.DetailClaimed; $5 the tools to take
// none of, $6 and $7 the other capped tools and their quotas: per-tool
// concurrency, store.ToolQuota).
//
// The "pending" and "expired" steps select the oldest pending calls and the
// oldest running calls whose lease has expired by the database's clock, at
// most $2 of each, FOR UPDATE SKIP LOCKED: rows another instance is
// claiming, completing or recovering right now are skipped rather than
// waited for, so concurrent claimers split the work and never block one
// another. "picked" keeps the oldest $2 of the two, which are the oldest $2
// runnable calls, less those past their tool's quota: "picked" numbers the
// candidates of each tool oldest first (a window over at most 2·$2 rows,
// not over the table) and drops those beyond it. (A candidate that does
// not make the cut stays locked until
// this statement commits, a moment; another instance's claim meanwhile just
// takes a different call.)
//
// Two steps, not one WHERE status = 'pending' OR (running and expired)
// ORDER BY created_at: PostgreSQL ran that as a walk of idx_calls_created
// from the oldest call, filtering out every finished call on the way, so
// each claim cost grew with the history (BENCHMARKS.md, "Notes moved from
// the code"). "pending" reads the partial index
// idx_calls_pending (schema version 2) in order and stops after $2 rows,
// passing over calls whose not-before time (a scheduled server-side retry)
// is still ahead: those are filtered on the row, so a backlog of waiting
// retries at the head of the queue is walked on every claim;
// "expired" searches idx_calls_status and sorts only the expired rows, which
// RecoverExpired keeps few. TestClaimPendingPlan checks the plan.
//
// The steps are MATERIALIZED so each pick, with its LIMIT and row locks,
// stays a step of its own (the same as UPDATE ... WHERE call_id IN (SELECT
// ... FOR UPDATE SKIP LOCKED)). The UPDATE repeats the runnable condition so
// that only a row still runnable is taken (belt and braces: the row lock
// already guarantees it). The audit rows are written by the same statement,
// hence in the same transaction.
var claimSQL = `
WITH clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), pending AS MATERIALIZED (
  SELECT c.call_id, c.created_at, c.tool
  FROM calls c, clock
  WHERE c.status = 'pending' AND (c.not_before IS NULL OR c.not_before <= clock.now)
    AND c.tool <> ALL ($5::text[])
  ORDER BY c.created_at, c.call_id
  LIMIT $2
  FOR UPDATE OF c SKIP LOCKED
), expired AS MATERIALIZED (
  SELECT c.call_id, c.created_at, c.tool
  FROM calls c, clock
  WHERE c.status = 'running' AND c.lease_until <= clock.now
    AND c.tool <> ALL ($5::text[])
  ORDER BY c.created_at, c.call_id
  LIMIT $2
  FOR UPDATE OF c SKIP LOCKED
), picked AS MATERIALIZED (
  SELECT call_id
  FROM (SELECT cand.call_id, cand.created_at, quota.max,
               row_number() OVER (PARTITION BY cand.tool ORDER BY cand.created_at, cand.call_id) AS n
        FROM (SELECT call_id, created_at, tool FROM pending
              UNION ALL
              SELECT call_id, created_at, tool FROM expired) AS cand
        LEFT JOIN unnest($6::text[], $7::int[]) AS quota (tool, max) ON quota.tool = cand.tool) AS ranked
  WHERE ranked.max IS NULL OR ranked.n <= ranked.max
  ORDER BY created_at, call_id
  LIMIT $2
), claimed AS (
  UPDATE calls c
  SET status = 'running', attempt = c.attempt + 1,
      lease_until = clock.now + $3, owner = $1, updated_at = clock.now
  FROM picked, clock
  WHERE c.call_id = picked.call_id
    AND ((c.status = 'pending' AND (c.not_before IS NULL OR c.not_before <= clock.now))
         OR (c.status = 'running' AND c.lease_until <= clock.now))
  RETURNING ` + callColumnsOf("c") + `
), audited AS (
  INSERT INTO audit (ts, call_id, event, detail)
  SELECT updated_at, call_id, '` + store.EventClaimed + `', $4::text
  FROM claimed
)
SELECT ` + callColumns + ` FROM claimed`

// ClaimNext claims up to limit runnable calls for owner in one statement,
// claimSQL.
func (s *Store) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	if lease < 0 {
		return nil, fmt.Errorf("postgres claim: negative lease %v", lease)
	}
	if limit <= 0 {
		return []store.Call{}, nil
	}
	full, capped, left := []string{}, []string{}, []int32{}
	for _, q := range quotas {
		if q.Max <= 0 {
			full = append(full, q.Tool)
		} else {
			capped, left = append(capped, q.Tool), append(left, int32(min(q.Max, math.MaxInt32)))
		}
	}
	var calls []store.Call
	err := s.writeStmt(ctx, store.WriteClaim, func(q querier) (bool, error) {
		rows, err := q.Query(ctx, claimSQL, owner, limit, lease.Seconds(), store.DetailClaimed(owner), full, capped, left)
		if err != nil {
			return false, err
		}
		calls, err = collectCalls(rows)
		return len(calls) > 0, err
	})
	if err != nil {
		return nil, interpret(ctx, err)
	}
	// RETURNING has no order; hand the calls back oldest first.
	sort.Slice(calls, func(i, j int) bool {
		if calls[i].CreatedAt != calls[j].CreatedAt {
			return calls[i].CreatedAt < calls[j].CreatedAt
		}
		return calls[i].CallID < calls[j].CallID
	})
	return calls, nil
}

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
	fast, err := s.completeFast(ctx, c, status, result, errObj, effectID, event)
	switch {
	case errors.Is(err, store.ErrFenced):
		return store.Call{}, s.auditFenced(ctx, c)
	case !errors.Is(err, errSlowPath):
		return fast, interpret(ctx, err)
	}
	err = s.inTx(ctx, s.beforeCommit(completeWrite(status), nil, func(tx pgx.Tx) error {
		var err error
		call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = $4, result_json = $5, error_json = $6, effect_id = $7,
    lease_until = NULL, owner = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
  -- The fencing token: still running, still ours, still this attempt.
  AND status = 'running' AND owner = $2 AND attempt = $3
RETURNING `+callColumnsOf("calls"),
			c.CallID, c.Owner, c.Attempt, string(status), result, errObj, effectID))
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
		detail := store.DetailSucceeded(call.EffectID, c)
		if status == store.StatusFailed {
			detail = store.DetailFailed(c)
		}
		return insertAudit(ctx, tx, call.UpdatedAt, call.CallID, event, detail)
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
// effect tool, $9 amount, $10 audit event, $11 audit detail): the fenced
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
      lease_until = NULL, owner = NULL, updated_at = clock.now
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
	detail := store.DetailSucceeded(effectID, c)
	if status == store.StatusFailed {
		detail = store.DetailFailed(c)
	}
	var call store.Call
	op := &groupOp{
		key: c.CallID,
		queue: func(b *pgx.Batch) {
			b.Queue(completeSQL, c.CallID, c.Owner, c.Attempt, string(status), result, errObj, effectID, tool, amount, event, detail)
		},
		read: func(r *results) error {
			var err error
			call, err = scanCall(r.QueryRow())
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
	if err := s.runOp(ctx, s.completions, completeWrite(status), op, func() bool { return true }); err != nil {
		return store.Call{}, err
	}
	return call, nil
}

// ScheduleRetry returns the call to pending with a not-before time of the
// database's now + delay, fenced on (owner, attempt) like complete, and
// audits retry_scheduled in the same transaction. See store.Store.
func (s *Store) ScheduleRetry(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error) {
	if err := s.writable(); err != nil {
		return store.Call{}, err
	}
	if delay < 0 {
		return store.Call{}, fmt.Errorf("postgres schedule retry: negative delay %v", delay)
	}
	var call store.Call
	err := s.inTx(ctx, s.beforeCommit(store.WriteRetry, nil, func(tx pgx.Tx) error {
		var err error
		call, err = scanCall(tx.QueryRow(ctx, `
UPDATE calls
SET status = 'pending', not_before = clock.now + $4, result_json = NULL, error_json = NULL,
    lease_until = NULL, owner = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
  -- The fencing token, as in complete.
  AND status = 'running' AND owner = $2 AND attempt = $3
RETURNING `+callColumnsOf("calls"),
			c.CallID, c.Owner, c.Attempt, delay.Seconds()))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrFenced
		}
		if err != nil {
			return err
		}
		return insertAudit(ctx, tx, call.UpdatedAt, call.CallID, store.EventRetryScheduled,
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

// recoverSQL returns to pending the running calls whose lease has expired
// by the database's clock, or that have none
// (lease_until NULL: no claim writes that, but a damaged or hand-edited row
// would otherwise stay running for ever; the SQLite backend decides the
// same, and storetest checks both). A live lease (lease_until > now) is
// never touched.
//
// Rows locked by someone else are skipped (SKIP LOCKED): such a row is
// being completed, claimed or recovered by another instance right now, and
// waiting for it could deadlock two instances recovering overlapping sets
// in different orders. The next pass (every 200 ms) sees it again if it
// still needs recovery.
const recoverSQL = `
WITH clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), expired AS MATERIALIZED (
  SELECT c.call_id, c.owner, c.attempt, c.lease_until
  FROM calls c, clock
  WHERE c.status = 'running' AND (c.lease_until IS NULL OR c.lease_until <= clock.now)
  FOR UPDATE OF c SKIP LOCKED
), recovered AS (
  UPDATE calls c
  SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = clock.now
  FROM expired, clock
  WHERE c.call_id = expired.call_id
    AND c.status = 'running' AND (c.lease_until IS NULL OR c.lease_until <= clock.now)
  RETURNING c.call_id, c.created_at, c.updated_at, expired.owner, expired.attempt, expired.lease_until
)
SELECT call_id, coalesce(owner, ''), attempt, updated_at FROM recovered
ORDER BY lease_until NULLS FIRST, created_at, call_id`

// RecoverExpired returns running calls whose lease has expired by the
// database's clock to pending (recoverSQL) and audits recover for each, in
// one transaction.
func (s *Store) RecoverExpired(ctx context.Context) ([]string, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	ids := []string{}
	err := s.inTx(ctx, s.beforeCommit(store.WriteRecover, func() bool { return len(ids) > 0 }, func(tx pgx.Tx) error {
		ids = ids[:0]
		rows, err := tx.Query(ctx, recoverSQL)
		if err != nil {
			return err
		}
		var (
			ts              []float64
			details, events []string
		)
		var (
			id, owner string
			attempt   int64
			at        float64
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &owner, &attempt, &at}, func() error {
			ids = append(ids, id)
			ts = append(ts, at)
			events = append(events, store.EventRecover)
			details = append(details, store.DetailLeaseExpired(store.Lease{CallID: id, Owner: owner, Attempt: attempt}))
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		// One statement for all the audit rows, in recovery order (the
		// audit id follows the array order).
		_, err = tx.Exec(ctx, `INSERT INTO audit (ts, call_id, event, detail)
SELECT a.ts, a.call_id, a.event, a.detail FROM unnest($1::double precision[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS a(ts, call_id, event, detail, n)
ORDER BY n`, ts, ids, events, details)
		return err
	}))
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Release returns one running call to pending at once if it is still held
// by owner at attempt: used when the owner process is known to be dead.
func (s *Store) Release(ctx context.Context, l store.Lease, reason string) error {
	callID, owner, attempt := l.CallID, l.Owner, l.Attempt
	if err := s.writable(); err != nil {
		return err
	}
	return s.inTx(ctx, s.beforeCommit(store.WriteRelease, nil, func(tx pgx.Tx) error {
		var ts float64
		err := tx.QueryRow(ctx, `
UPDATE calls
SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
  -- Same token as a completion: only the exact lease we were told is dead.
  AND status = 'running' AND owner = $2 AND attempt = $3
RETURNING updated_at`, callID, owner, attempt).Scan(&ts)
		if errors.Is(err, pgx.ErrNoRows) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM calls WHERE call_id = $1)`, callID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("postgres release %s: %w", callID, store.ErrNotFound)
			}
			return fmt.Errorf("postgres release %s (owner %s, attempt %d): %w", callID, owner, attempt, store.ErrNotHeld)
		}
		if err != nil {
			return err
		}
		return insertAudit(ctx, tx, ts, callID, store.EventRecover, reason)
	}))
}

// extendLeaseSQL is a heartbeat in one round trip: the fenced update, and
// whether the call exists at all (to tell ErrNotHeld from ErrNotFound).
// The outer SELECT sees the statement's snapshot, before the update, which
// is all existence needs.
const extendLeaseSQL = `
WITH extended AS (
  UPDATE calls SET lease_until = ` + dbNow + ` + $4
  WHERE call_id = $1
    -- Same token as a completion: only the exact lease this worker holds.
    AND status = 'running' AND owner = $2 AND attempt = $3
  RETURNING cancel_requested
)
SELECT EXISTS (SELECT 1 FROM extended), EXISTS (SELECT 1 FROM calls WHERE call_id = $1),
       COALESCE((SELECT cancel_requested FROM extended), false)`

// ExtendLease moves the lease of a call still held by owner at attempt to
// the database's now + lease, without an audit row (a heartbeat).
func (s *Store) ExtendLease(ctx context.Context, l store.Lease, lease time.Duration) error {
	callID, owner, attempt := l.CallID, l.Owner, l.Attempt
	if err := s.writable(); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("postgres extend lease: lease must be positive, got %v", lease)
	}
	var extended, exists, cancel bool
	err := s.writeStmt(ctx, store.WriteLease, func(q querier) (bool, error) {
		err := q.QueryRow(ctx, extendLeaseSQL, callID, owner, attempt, lease.Seconds()).Scan(&extended, &exists, &cancel)
		return extended, err
	})
	switch {
	case err != nil:
		return interpret(ctx, err)
	case extended && cancel:
		return fmt.Errorf("postgres extend lease %s: %w", callID, store.ErrCancelRequested)
	case extended:
		return nil
	case !exists:
		return fmt.Errorf("postgres extend lease %s: %w", callID, store.ErrNotFound)
	}
	return fmt.Errorf("postgres extend lease %s (owner %s, attempt %d): %w", callID, owner, attempt, store.ErrNotHeld)
}
