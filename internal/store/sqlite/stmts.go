package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Hot statements. Each is prepared once per Store (database/sql then keeps
// one SQLite statement per pooled connection and reuses it), instead of being
// parsed and planned again on every execution, where a CPU profile of
// `idemctl bench` found a large share of the service's time (BENCHMARKS.md,
// "Notes moved from the code"). modernc.org/sqlite has no statement cache of its own; a one-shot
// Exec or Query prepares and finalizes every time.
//
// The SQL is written out here, next to the comment that says why it is
// shaped as it is; the Go code that runs it is in create.go, claim.go, complete.go, lease.go and reads.go.
const (
	// sqlCallByID and sqlCallByKey read one call (scanCall's columns).
	sqlCallByID  = `SELECT ` + callColumns + ` FROM calls WHERE call_id = ?`
	sqlCallByKey = `SELECT ` + callColumns + ` FROM calls WHERE principal = ? AND idem_key = ?`
	// sqlCallOf is Get: the call with that id if principal recorded it.
	sqlCallOf = `SELECT ` + callColumns + ` FROM calls WHERE call_id = ? AND principal = ?`

	// sqlInsertCall inserts a new call: pending at attempt 0, or running
	// at attempt 1 under an owner and lease when it is claimed at
	// creation (store.NewCall.Claim). No RETURNING: CreateOrGet knows
	// every column it writes and builds the call in Go (newCallRow).
	sqlInsertCall = `INSERT INTO calls
		(call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json, status, attempt, lease_until, owner,
		 created_at, updated_at, intent, via, notify_url, trace_parent)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

	// sqlInsertNewCall is CreateOrGet's first try at a key with no dedup
	// rule: sqlInsertCall's insert (?1 to ?18), unless the key is a call's
	// own (ON CONFLICT: nothing), an alias, or, when ?19 is true (a
	// tombstone retention), has a tombstone purged at or after ?20. One
	// statement instead of three lookups and an insert for a new key; when
	// it inserts nothing it writes nothing, and the lookups tell why.
	sqlInsertNewCall = `INSERT INTO calls
		(call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json, status, attempt, lease_until, owner,
		 created_at, updated_at, intent, via, notify_url, trace_parent)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18
		WHERE NOT EXISTS (SELECT 1 FROM key_aliases WHERE principal = ?2 AND idem_key = ?3)
		  AND NOT (?19 AND EXISTS (SELECT 1 FROM tombstones WHERE principal = ?2 AND idem_key = ?3 AND purged_at >= ?20))
		ON CONFLICT (principal, idem_key) DO NOTHING`

	// sqlAliasByKey reads an alias key's call id and the fingerprint the
	// alias was recorded with (intent deduplication).
	sqlAliasByKey = `SELECT call_id, fingerprint FROM key_aliases WHERE principal = ? AND idem_key = ?`

	// sqlCallByIntent is the newest call of a principal, tool and intent
	// created at or after a time: idx_calls_intent, then one row.
	sqlCallByIntent = `SELECT ` + callColumns + ` FROM calls
		WHERE principal = ? AND intent = ? AND tool = ? AND created_at >= ? AND intent IS NOT NULL
		ORDER BY created_at DESC LIMIT 1`

	// sqlTombstoneByKey reads a key's tombstone purged at or after a time
	// (store.NewCall.TombstoneRetention): one primary-key probe.
	sqlTombstoneByKey = `SELECT ` + tombstoneColumns + ` FROM tombstones
		WHERE principal = ? AND idem_key = ? AND purged_at >= ?`

	// sqlInsertAlias records a new key as an alias of an existing call.
	sqlInsertAlias = `INSERT INTO key_aliases (principal, idem_key, call_id, fingerprint, created_at) VALUES (?, ?, ?, ?, ?)`

	// sqlRetryReset returns a failed call to pending (CreateOrGet's reset).
	sqlRetryReset = `UPDATE calls
		SET status = 'pending', error_json = NULL, result_json = NULL, lease_until = NULL, owner = NULL,
		    cancel_requested = 0, not_before = NULL, updated_at = ?
		WHERE call_id = ? AND status = 'failed'
		RETURNING ` + callColumns

	sqlInsertAudit = `INSERT INTO audit (ts, call_id, event, detail) VALUES (?, ?, ?, ?)`

	// sqlInsertAudits writes one event with one detail for each call whose
	// rowid is in the JSON array (fourth ?), in the array's order: a
	// claim's claimed rows, one statement for the batch instead of one per
	// call. The call id is read from the call's row.
	sqlInsertAudits = `INSERT INTO audit (ts, call_id, event, detail)
		SELECT ?, c.call_id, ?, ? FROM json_each(?) AS j JOIN calls AS c ON c.rowid = j.value ORDER BY j.key`

	// sqlInsertDelivery is a completion's webhook outbox row
	// (insertDelivery).
	sqlInsertDelivery = `INSERT INTO webhook_deliveries
		(id, call_id, url, state, attempts, next_at, created_at, updated_at)
		VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)`

	// sqlLeaseOf reads the lease a claim is about to take over (an
	// expired one), for its outcome_unknown audit row.
	sqlLeaseOf = `SELECT owner, attempt FROM calls WHERE call_id = ?`

	// sqlHasClaimable is ClaimNext's pre-check on a read connection. Two
	// EXISTS, not one with an OR, so each is a single index probe: pending
	// through idx_calls_pending, expired through idx_calls_running. A
	// pending call waiting for its not-before time does not count: an idle
	// poll must not take the write lock for it.
	// The tools of the last ? (a JSON array) are full (store.ToolQuota with
	// Max <= 0) and do not count either.
	sqlHasClaimable = `SELECT EXISTS (SELECT 1 FROM calls WHERE status = 'pending' AND ` + notBeforePassed + `
			AND ` + toolNotFull + `)
		OR EXISTS (SELECT 1 FROM calls WHERE status = 'running' AND lease_until <= ? AND ` + toolNotFull + `)`

	// sqlPickPending is the oldest pending calls, read in order from the
	// partial index idx_calls_pending (created_at, then rowid, which every
	// SQLite index carries as its last column): no sort, and it stops after
	// LIMIT rows however long the queue is. The literal status = 'pending'
	// is what makes the partial index usable. INDEXED BY because, without
	// statistics, the planner may prefer another index and then sort every
	// pending row or walk every call; it is also SQLite's documented way to
	// make a plan change an error (preparing this at Open fails if the
	// index is missing) rather than a silent slowdown. TestClaimPlans
	// checks the plan.
	//
	// LIMIT ?+0, not LIMIT ?: SQLite 3.54 plans a statement differently
	// for a LIMIT of 0 or 1, so it expires a prepared statement whose
	// LIMIT parameter changes to or from those values and parses it again
	// on the next step; the claim's limit (the idle workers) is 1 one time
	// and 3 the next. An expression is not looked at when planning.
	// TestNoReprepare checks this.
	//
	// A call waiting for its not-before time (a scheduled server-side
	// retry) is passed over; the test reads the row, which the pick reads
	// anyway for call_id, so the walk stays in index order. Its cost grows
	// with the waiting calls older than the first claimable one: a backlog
	// of retries at the head of the queue is walked on every claim.
	//
	// toolNotFull (its ? a JSON array of tool names) passes over the
	// calls of tools whose quota is used up (per-tool concurrency), tested
	// on the same row; an empty array passes everything.
	sqlPickPending = `SELECT rowid, call_id, created_at, tool FROM calls INDEXED BY idx_calls_pending
		WHERE status = 'pending' AND ` + notBeforePassed + ` AND ` + toolNotFull + `
		ORDER BY created_at, rowid LIMIT ?+0`

	// sqlPickExpired is the oldest running calls whose lease has expired.
	// It searches idx_calls_running (lease_until) for the expired ones and
	// sorts only those by age. There are few: the scheduler runs
	// RecoverExpired before every claim, which returns them to pending.
	// INDEXED BY: unforced, the planner walks idx_calls_created over every
	// call for the ORDER BY. LIMIT ?+0 as in sqlPickPending; toolNotFull as
	// there.
	sqlPickExpired = `SELECT rowid, call_id, created_at, tool FROM calls INDEXED BY idx_calls_running
		WHERE status = 'running' AND lease_until <= ? AND ` + toolNotFull + `
		ORDER BY created_at, rowid LIMIT ?+0`

	// sqlClaim is the claim itself, of every call whose rowid is in the
	// JSON array (fourth ?): one statement for a claim's batch. It is a
	// conditional update that wins only for the rows still claimable
	// (pending, or running under an expired lease), checked on each row.
	// Under BEGIN IMMEDIATE they always are, but the condition keeps the
	// claim correct on its own. RETURNING gives the claimed rows, in no
	// particular order; a call whose claim lost is not among them.
	// error_json is cleared: a call back from a scheduled retry kept the
	// failure it waited out (sqlScheduleRetry), and a running call has none.
	// A running call here is one whose lease expired: its attempt was
	// abandoned in flight, so its outcome is unknown (unknown_outcome;
	// SET reads the row as it was).
	// The condition is claimableRow, claimable with its columns out of the
	// planner's reach: with them, it may take an index of status or
	// lease_until and walk the whole queue looking for the rowids
	// (TestClaimPlans).
	sqlClaim = `UPDATE calls
		SET status = 'running', attempt = attempt + 1, lease_until = ?, owner = ?, updated_at = ?, error_json = NULL,
		    unknown_outcome = CASE WHEN status = 'running' THEN '` + wire.UnknownAbandoned + `' ELSE unknown_outcome END
		WHERE rowid IN (SELECT value FROM json_each(?)) AND ` + claimableRow + `
		RETURNING ` + callColumns

	// sqlSucceed and sqlFail are the fenced completions (see fencing);
	// no row back means the completion is stale. sqlSucceed also points
	// the call at its effect when the completion has one (first ?, run
	// after sqlInsertEffect): the effect that exists, which is the one just
	// inserted unless an earlier one was kept; in this UPDATE, so a
	// success writes the call's row once. A success settles an unknown
	// outcome; a failure sets it as store.UnknownAfter says (setUnknown:
	// keep it, or this value).
	sqlSucceed = `UPDATE calls
		SET status = 'succeeded', result_json = ?, error_json = NULL, lease_until = NULL, owner = NULL, updated_at = ?,
		    effect_id = CASE WHEN ? THEN (SELECT e.effect_id FROM effects e WHERE e.call_id = calls.call_id) ELSE effect_id END,
		    unknown_outcome = NULL
		WHERE ` + fencing + `
		RETURNING ` + callColumns
	sqlFail = `UPDATE calls
		SET status = 'failed', error_json = ?, result_json = NULL, lease_until = NULL, owner = NULL, updated_at = ?,
		    ` + setUnknown + `
		WHERE ` + fencing + `
		RETURNING ` + callColumns

	// sqlScheduleRetry is ScheduleRetry, fenced like a completion: back to
	// pending, not claimable before not_before (first ?), with the failure
	// it waits out as its error (second ?). The attempt is kept; the next
	// claim increments it.
	sqlScheduleRetry = `UPDATE calls
		SET status = 'pending', not_before = ?, error_json = ?, result_json = NULL,
		    lease_until = NULL, owner = NULL, updated_at = ?, ` + setUnknown + `
		WHERE ` + fencing + `
		RETURNING ` + callColumns

	// sqlExtendLease is a heartbeat: the fencing token of a completion,
	// and only lease_until changes (updated_at is the time of the last
	// change of state, which a heartbeat is not).
	// sqlExtendLease returns the cancel flag, so a cancel requested through
	// another instance reaches this worker at its next heartbeat.
	sqlExtendLease = `UPDATE calls SET lease_until = ? WHERE ` + fencing + ` RETURNING cancel_requested`

	// sqlCallExists tells a refused heartbeat's "not held" from "no such
	// call".
	sqlCallExists = `SELECT 1 FROM calls WHERE call_id = ?`

	// sqlQueue counts the pending calls and finds the oldest from the
	// partial index idx_calls_pending alone (a covering read: created_at
	// is its key), so the cost grows with the queue, not with the table.
	// INDEXED BY for the reason given at sqlPickPending. TestQueuePlan
	// checks the plan. A read-only store may
	// open a version 1 file without that index, so it prepares no such
	// statement and runs sqlQueueAnyVersion instead (inspect, rarely).
	sqlQueue = `SELECT count(*), min(created_at) FROM calls INDEXED BY idx_calls_pending
		WHERE status = 'pending'`
	sqlQueueAnyVersion = `SELECT count(*), min(created_at) FROM calls WHERE status = 'pending'`

	// sqlInsertEffect: ON CONFLICT(call_id) DO NOTHING, because
	// effects.call_id UNIQUE is the last gate (docs/design.md, "Why effects are unique per call"). effect_id is
	// derived from call_id, so a second insert for one call is the same
	// effect and is dropped; a clash on effect_id with another call is an
	// error and rolls the whole completion back. It runs before the
	// completion's UPDATE (which links the call to it) and is fenced like
	// it: a stale completion inserts nothing, and its UPDATE then matches
	// nothing either.
	sqlInsertEffect = `INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
		SELECT ?, call_id, COALESCE(NULLIF(?, ''), tool), ?, ? FROM calls WHERE ` + fencing + `
		ON CONFLICT (call_id) DO NOTHING`

	// sqlHasExpired is RecoverExpired's pre-check on a read connection:
	// an expired lease, or a running call without one (see leaseLapsed).
	// Two EXISTS, each a single probe of idx_calls_running.
	sqlHasExpired = `SELECT EXISTS (SELECT 1 FROM calls WHERE status = 'running' AND lease_until <= ?)
		OR EXISTS (SELECT 1 FROM calls WHERE status = 'running' AND lease_until IS NULL)`
)

// setUnknown sets unknown_outcome after a failure: kept when the first ?
// is true, else the second ? (NULL: settled). See store.UnknownAfter.
const setUnknown = `unknown_outcome = CASE WHEN ? THEN unknown_outcome ELSE ? END`

// unknownArgs are setUnknown's arguments for c.
func unknownArgs(c store.Completion) (keep bool, val any) {
	u, keep := store.UnknownAfter(c)
	if u == "" {
		return keep, nil
	}
	return keep, u
}

// sqlListByStatus serves ListCalls with a status filter (the scheduler
// lists running calls once per scheduler interval to find those of dead owners). The
// status is a literal, one statement per status, not a parameter: SQLite
// 3.54 expires an ORDER BY statement with a "col = ?" term whenever that
// parameter is bound again after the driver unbinds it, so a parameter
// would mean a parse on every call.
//
// Running and pending calls are read from their partial index (named:
// unforced, the planner walks idx_calls_created backwards over every call
// for the ORDER BY), and only they are sorted. Final calls are most calls:
// idx_calls_created walked newest first finds a page of them soon.
// TestListByStatusPlans checks the plans.
func sqlListByStatus(st store.Status) string {
	indexed := ""
	switch st {
	case store.StatusRunning:
		indexed = " INDEXED BY idx_calls_running"
	case store.StatusPending:
		indexed = " INDEXED BY idx_calls_pending"
	}
	return `SELECT ` + callColumns + ` FROM calls` + indexed + ` WHERE status = '` + string(st) + `'
		ORDER BY created_at DESC, rowid DESC LIMIT ?+0`
}

// statuses are the statuses ListCalls has a statement for: all of them.
var statuses = store.Statuses

// readStmts are prepared on the read pool; every store has them.
type readStmts struct {
	callByID, callByKey      *sql.Stmt
	callOf, aliasByKey       *sql.Stmt
	hasClaimable, hasExpired *sql.Stmt
	// queue is sqlQueue, prepared only on a writable store (whose schema
	// is current): withQueue.
	queue     *sql.Stmt
	withQueue bool
	// listByStatus[i] lists calls of statuses[i].
	listByStatus [4]*sql.Stmt
}

// listStatus returns the statement that lists calls of status st, or nil
// for an unknown status (no call has one: the column's CHECK allows only
// these).
func (r *readStmts) listStatus(st store.Status) *sql.Stmt {
	for i, s := range statuses {
		if s == st {
			return r.listByStatus[i]
		}
	}
	return nil
}

// writeStmts are prepared on the write pool (one connection) and used inside
// write transactions through tx.StmtContext, which reuses the statement
// already prepared on that connection. A read-only store has none. The
// statements every call runs are hotStmts (hot.go) instead.
type writeStmts struct {
	callByID, callByKey     *sql.Stmt
	insertCall, retryReset  *sql.Stmt
	aliasByKey, insertAlias *sql.Stmt
	callByIntent            *sql.Stmt
	tombstoneByKey          *sql.Stmt
	extendLease, callExists *sql.Stmt
}

// prepared is one statement to prepare: where to store it and its SQL.
type prepared struct {
	dst   **sql.Stmt
	query string
}

// prepareAll prepares every statement on db. On error it closes the ones
// already prepared.
func prepareAll(ctx context.Context, db *sql.DB, list []prepared) error {
	for i, p := range list {
		st, err := db.PrepareContext(ctx, p.query)
		if err != nil {
			closeAll(list[:i])
			return interpret(ctx, "prepare", fmt.Errorf("%w\n%s", err, p.query))
		}
		*p.dst = st
	}
	return nil
}

// closeAll closes the statements of list that were prepared.
func closeAll(list []prepared) error {
	var errs []error
	for _, p := range list {
		if *p.dst != nil {
			errs = append(errs, (*p.dst).Close())
			*p.dst = nil
		}
	}
	return errors.Join(errs...)
}

func (r *readStmts) list() []prepared {
	list := []prepared{
		{&r.callByID, sqlCallByID},
		{&r.callByKey, sqlCallByKey},
		{&r.callOf, sqlCallOf},
		{&r.aliasByKey, sqlAliasByKey},
		{&r.hasClaimable, sqlHasClaimable},
		{&r.hasExpired, sqlHasExpired},
	}
	if r.withQueue {
		list = append(list, prepared{&r.queue, sqlQueue})
	}
	for i, st := range statuses {
		list = append(list, prepared{&r.listByStatus[i], sqlListByStatus(st)})
	}
	return list
}

func (w *writeStmts) list() []prepared {
	return []prepared{
		{&w.callByID, sqlCallByID},
		{&w.callByKey, sqlCallByKey},
		{&w.insertCall, sqlInsertCall},
		{&w.retryReset, sqlRetryReset},
		{&w.aliasByKey, sqlAliasByKey},
		{&w.insertAlias, sqlInsertAlias},
		{&w.callByIntent, sqlCallByIntent},
		{&w.tombstoneByKey, sqlTombstoneByKey},
		{&w.extendLease, sqlExtendLease},
		{&w.callExists, sqlCallExists},
	}
}
