package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// The calls table's writes are split by concern, with the same file names
// in both backends (store/sqlite, store/postgres) and the same names for
// their helpers (interpret, callColumns, insertAudit): create.go
// (CreateOrGet), claim.go (ClaimNext), complete.go (Succeed, Fail,
// ScheduleRetry, the fenced audit row), lease.go (ExtendLease, Release,
// RecoverExpired), cancel.go, purge.go, and commit.go (the group commit).
// This file holds what they share: the rows of calls and audit.

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
  not_before, via, unknown_outcome, notify_url, trace_parent`

// callColumnsOf is callColumns qualified by a table alias, for statements
// that join calls with other relations.
func callColumnsOf(alias string) string {
	return alias + `.call_id, ` + alias + `.principal, ` + alias + `.idem_key, ` + alias + `.fingerprint, ` + alias + `.client_id, ` +
		alias + `.seq, ` + alias + `.tool, ` + alias + `.args_json, ` + alias + `.status, ` +
		alias + `.result_json, ` + alias + `.error_json, ` + alias + `.attempt, ` + alias + `.lease_until, ` +
		alias + `.owner, ` + alias + `.effect_id, ` + alias + `.created_at, ` + alias + `.updated_at, ` +
		alias + `.cancel_requested, ` + alias + `.not_before, ` + alias + `.via, ` + alias + `.unknown_outcome, ` + alias + `.notify_url, ` + alias + `.trace_parent`
}

// scanCall reads one row of callColumns.
func scanCall(row pgx.Row) (store.Call, error) {
	var (
		c              store.Call
		args           string
		status         string
		result, errObj *string
		unknown        *string
		traceParent    *string
	)
	err := row.Scan(&c.CallID, &c.Principal, &c.IdemKey, &c.Fingerprint, &c.ClientID, &c.Seq, &c.Tool, &args, &status,
		&result, &errObj, &c.Attempt, &c.LeaseUntil, &c.Owner, &c.EffectID, &c.CreatedAt, &c.UpdatedAt, &c.CancelRequested, &c.NotBefore, &c.Via,
		&unknown, &c.NotifyURL, &traceParent)
	if err != nil {
		return store.Call{}, err
	}
	c.ArgsJSON = json.RawMessage(args)
	c.Status = store.Status(status)
	if unknown != nil {
		c.Unknown = *unknown
	}
	if traceParent != nil {
		c.TraceParent = *traceParent
	}
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
func (s *Store) insertAudit(ctx context.Context, tx pgx.Tx, ts float64, callID, event, detail string) error {
	_, err := tx.Exec(ctx, `INSERT INTO audit (ts, call_id, event, detail) VALUES ($1, $2, $3, $4)`,
		ts, callID, event, detail)
	return err
}

// setUnknown sets unknown_outcome after a completion: kept when the first
// parameter is true, else the second (NULL: settled). See
// store.UnknownAfter; $N and $M are the parameters' numbers.
func setUnknown(keep, val int) string {
	return fmt.Sprintf(`unknown_outcome = CASE WHEN $%d::boolean THEN unknown_outcome ELSE $%d::text END`, keep, val)
}

// unknownArgs are setUnknown's arguments for completion c ending in
// status.
func unknownArgs(c store.Completion, status store.Status) (keep bool, val *string) {
	if status == store.StatusSucceeded {
		return false, nil
	}
	u, keep := store.UnknownAfter(c)
	if u == "" {
		return keep, nil
	}
	return keep, &u
}

// nullIfEmpty stores an optional text column: NULL for "".
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
