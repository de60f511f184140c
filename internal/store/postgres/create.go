package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

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
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return store.Call{}, 0, err
	}
	if err := store.CheckCreateClaim(n); err != nil {
		return store.Call{}, 0, fmt.Errorf("postgres %w", err)
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
// args, $8 principal, $9 intent, $10 via, $11 the created audit detail,
// $12 the tombstones' retention in seconds, 0 for none, $13 notify url, $14 the trace parent, $15 and $16
// the owner and lease seconds of a claim at creation, both NULL for none: insertClaimed), unless the key is
// a call's own key (ON CONFLICT: nothing, no row), an alias or has a
// tombstone within the retention (NOT EXISTS: nothing, no row). It
// returns the new call, or else the key's own call as this statement's
// snapshot sees it (the statement's CTEs share one snapshot, so that read
// never sees the row the CTE inserts: hence NOT EXISTS (created)). The new
// call is the row whose call_id is $1.
var createSQL = `
WITH clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), created AS (
  INSERT INTO calls (call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json,
                     status, attempt, lease_until, owner, created_at, updated_at, intent, via, notify_url, trace_parent)
  SELECT $1, $8, $2, $3, $4, $5, $6, $7, ` + insertClaimed("$15", "$16") + `,
         clock.now, clock.now, $9, $10, $13, $14
  FROM clock
  WHERE NOT EXISTS (SELECT 1 FROM key_aliases WHERE principal = $8 AND idem_key = $2)
    AND NOT EXISTS (SELECT 1 FROM tombstones
                    WHERE $12 > 0 AND principal = $8 AND idem_key = $2 AND purged_at >= clock.now - $12)
  ON CONFLICT (principal, idem_key) DO NOTHING
  RETURNING ` + callColumns + `
), audited AS (
  INSERT INTO audit (ts, call_id, event, detail)
  SELECT created_at, call_id, '` + store.EventCreated + `', $11::text FROM created
)
SELECT ` + callColumns + ` FROM created
UNION ALL
SELECT ` + callColumns + ` FROM calls WHERE principal = $8 AND idem_key = $2 AND NOT EXISTS (SELECT 1 FROM created)`

// insertClaimed is the status, attempt, lease_until and owner columns of
// a new call's insert, with clock.now in scope: pending at attempt 0, or,
// when the owner parameter is not NULL (store.NewCall.Claim), running at
// attempt 1 under that owner, the lease ending at the database's now plus
// the lease parameter in seconds.
func insertClaimed(owner, lease string) string {
	return `CASE WHEN ` + owner + `::text IS NULL THEN 'pending' ELSE 'running' END,
         CASE WHEN ` + owner + `::text IS NULL THEN 0 ELSE 1 END,
         clock.now + ` + lease + `::double precision, ` + owner + `::text`
}

// claimArgs are insertClaimed's parameters for n: NULL, NULL without a
// claim.
func claimArgs(n store.NewCall) (owner *string, lease *float64) {
	if n.Claim == nil {
		return nil, nil
	}
	o, l := n.Claim.Owner, n.Claim.Lease.Seconds()
	return &o, &l
}

// retryResetSQL returns the failed call $1 to pending: a same-key retry's
// reset, and Redrive's.
var retryResetSQL = `
UPDATE calls
SET status = 'pending', result_json = NULL, error_json = NULL,
    lease_until = NULL, owner = NULL, cancel_requested = false, not_before = NULL, updated_at = clock.now
FROM (SELECT ` + dbNow + ` AS now) AS clock
WHERE call_id = $1 AND status = 'failed'
RETURNING ` + callColumnsOf("calls")

// lockKeySQL is the per-key advisory lock of aliasOrDedup.
const lockKeySQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2, 0))`

// errSlowPath: createFast could not decide alone; createOrGetOnce's
// transaction decides (nothing was written).
var errSlowPath = errors.New("postgres: create needs the full transaction")

// createFast is the common create-or-get of a key with no dedup rule, in
// one round trip: one pipelined batch, which PostgreSQL runs as one
// implicit transaction, of the key's advisory lock (as aliasOrDedup takes
// it), the insert of the call with its audit row unless the key is an
// alias or a call's own key, and, when it was not inserted, the key's call
// (createSQL: one statement, no read back of a row the insert returns).
// Each statement takes its snapshot
// after the lock is held (READ COMMITTED), so the alias check sees
// whatever an earlier holder of the lock committed, exactly as
// aliasOrDedup's SELECT does. It answers Created, and a replay of a
// non-failed call (Existing) or a conflict; anything else (an alias, a
// failed call that may be reset, a vanished winner) is errSlowPath, and
// then nothing was written.
//
// The slow path costs six round trips (BEGIN, lock, alias lookup, INSERT,
// audit INSERT, COMMIT); this one batch is one (BENCHMARKS.md, "PostgreSQL:
// one round trip per write, group commit").
func (s *Store) createFast(ctx context.Context, n store.NewCall, args string, intent *string) (store.Call, store.Outcome, error) {
	var (
		call store.Call
		out  store.Outcome
	)
	op := s.createOp(n, args, intent, &call, &out)
	if err := s.runOp(ctx, s.writes, store.WriteCreate, op, func() bool { return out == store.Created }); err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}

// createOp is createFast's write, answering into call and out.
func (s *Store) createOp(n store.NewCall, args string, intent *string, call *store.Call, out *store.Outcome) *groupOp {
	return &groupOp{
		key: "k" + n.Principal + "\x01" + n.IdemKey,
		queue: func(b *pgx.Batch) {
			owner, lease := claimArgs(n)
			b.Queue(lockKeySQL, n.Principal, n.IdemKey)
			b.Queue(createSQL, n.CallID, n.IdemKey, n.Fingerprint, n.ClientID, n.Seq, n.Tool, args, n.Principal, intent,
				store.ViaOf(n.Via), store.DetailCreatedOf(n), n.TombstoneRetention.Seconds(), n.NotifyURL, nullIfEmpty(n.TraceParent),
				owner, lease)
		},
		read: func(r *results) error {
			*call, *out = store.Call{}, 0
			if _, err := r.Exec(); err != nil {
				return err
			}
			got, err := scanCall(r.QueryRow())
			switch {
			case err == nil && got.CallID == n.CallID:
				*call, *out = got, store.Created
				return nil
			case errors.Is(err, pgx.ErrNoRows):
				return errSlowPath // an alias, a tombstone, or the winner vanished
			case err != nil:
				return err
			case got.Fingerprint != n.Fingerprint:
				// Same key, different request: refuse, write nothing (409).
				return fmt.Errorf("postgres create: %w", &store.ConflictError{CallID: got.CallID, Key: n.IdemKey})
			case got.Status == store.StatusFailed:
				return errSlowPath // may be reset: decided under FOR UPDATE
			}
			*call, *out = got, store.Existing
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
		owner, lease := claimArgs(n)
		call, err = scanCall(tx.QueryRow(ctx, `
INSERT INTO calls (call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json,
                   status, attempt, lease_until, owner, created_at, updated_at, intent, via, notify_url, trace_parent)
SELECT $1, $8, $2, $3, $4, $5, $6, $7, `+insertClaimed("$13", "$14")+`,
       clock.now, clock.now, $9, $10, $11, $12
FROM (SELECT `+dbNow+` AS now) AS clock
ON CONFLICT (principal, idem_key) DO NOTHING
RETURNING `+callColumns,
			n.CallID, n.IdemKey, n.Fingerprint, n.ClientID, n.Seq, n.Tool, args, n.Principal, intent, store.ViaOf(n.Via), n.NotifyURL, nullIfEmpty(n.TraceParent),
			owner, lease))
		if err == nil {
			out = store.Created
			// Same transaction as the insert: a call never exists unaudited.
			return s.insertAudit(ctx, tx, call.CreatedAt, call.CallID, store.EventCreated, store.DetailCreatedOf(n))
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
		call, err = scanCall(tx.QueryRow(ctx, retryResetSQL, call.CallID))
		if err != nil {
			return err
		}
		out = store.RetryReset
		return s.insertAudit(ctx, tx, call.UpdatedAt, call.CallID, store.EventRetryReset, store.DetailRetryReset(prevErr))
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
	if n.TombstoneRetention > 0 {
		// Neither an alias nor (the query checks) a call's own key: a
		// key retention purged is expired while its tombstone counts
		// (liveTombstoneSQL).
		t, err := scanTombstone(tx.QueryRow(ctx, liveTombstoneSQL, n.Principal, n.IdemKey, n.TombstoneRetention.Seconds()))
		switch {
		case err == nil:
			return false, fmt.Errorf("postgres create: %w", &store.ExpiredError{Tombstone: t})
		case !errors.Is(err, pgx.ErrNoRows):
			return false, err
		}
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
	return true, s.insertAudit(ctx, tx, ts, c.CallID, store.EventDeduplicated, n.IdemKey)
}
