package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// callColumns is the column list scanCall expects, in its order.
const callColumns = `call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json, status,
	result_json, error_json, attempt, lease_until, owner, effect_id, created_at, updated_at, cancel_requested, not_before, via,
	unknown_outcome, notify_url, trace_parent`

type scanner interface{ Scan(dest ...any) error }

func scanCall(sc scanner) (store.Call, error) {
	var (
		c                                store.Call
		clientID, result, errJSON        sql.NullString
		owner, effectID, unknown, notify sql.NullString
		traceParent                      sql.NullString
		seq                              sql.NullInt64
		lease, notBefore                 sql.NullFloat64
		args, status                     string
	)
	err := sc.Scan(&c.CallID, &c.Principal, &c.IdemKey, &c.Fingerprint, &clientID, &seq, &c.Tool, &args, &status,
		&result, &errJSON, &c.Attempt, &lease, &owner, &effectID, &c.CreatedAt, &c.UpdatedAt, &c.CancelRequested, &notBefore, &c.Via,
		&unknown, &notify, &traceParent)
	if err != nil {
		return store.Call{}, err
	}
	c.NotBefore = nullFloat(notBefore)
	c.Unknown = unknown.String
	c.TraceParent = traceParent.String
	c.Status = store.Status(status)
	c.ArgsJSON = json.RawMessage(args)
	c.ClientID = nullString(clientID)
	c.Seq = nullInt(seq)
	c.ResultJSON = nullJSON(result)
	c.ErrorJSON = nullJSON(errJSON)
	c.LeaseUntil = nullFloat(lease)
	c.Owner = nullString(owner)
	c.EffectID = nullString(effectID)
	c.NotifyURL = nullString(notify)
	return c, nil
}

func nullString(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}

func nullInt(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	return &v.Int64
}

func nullFloat(v sql.NullFloat64) *float64 {
	if !v.Valid {
		return nil
	}
	return &v.Float64
}

func nullJSON(v sql.NullString) json.RawMessage {
	if !v.Valid {
		return nil
	}
	return json.RawMessage(v.String)
}

// jsonArg binds JSON as TEXT (a []byte would be stored as a BLOB), and
// empty JSON as NULL.
func jsonArg(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

// Get returns principal's call with that id, or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, principal, callID string) (store.Call, error) {
	if err := s.closedErr("get"); err != nil {
		return store.Call{}, err
	}
	c, err := scanCall(s.rq.callOf.QueryRowContext(ctx, callID, principal))
	return c, interpret(ctx, "get "+callID, err)
}

// GetAny returns the call with that id, whoever recorded it, or
// store.ErrNotFound.
func (s *Store) GetAny(ctx context.Context, callID string) (store.Call, error) {
	if err := s.closedErr("get"); err != nil {
		return store.Call{}, err
	}
	c, err := scanCall(s.rq.callByID.QueryRowContext(ctx, callID))
	return c, interpret(ctx, "get "+callID, err)
}

// GetByKey returns principal's call for an idempotency key, or
// store.ErrNotFound.
func (s *Store) GetByKey(ctx context.Context, principal, key string) (store.Call, error) {
	if err := s.closedErr("get by key"); err != nil {
		return store.Call{}, err
	}
	c, err := scanCall(s.rq.callByKey.QueryRowContext(ctx, principal, key))
	if errors.Is(err, sql.ErrNoRows) {
		// Not a call's own key: perhaps an alias (intent deduplication).
		var callID, fp string
		if err = s.rq.aliasByKey.QueryRowContext(ctx, principal, key).Scan(&callID, &fp); err == nil {
			c, err = scanCall(s.rq.callByID.QueryRowContext(ctx, callID))
		}
	}
	return c, interpret(ctx, "get by key", err)
}

// limitArg turns "0 means all" into SQLite's "LIMIT -1 means no limit".
func limitArg(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// ListCalls returns calls newest first, optionally of one status.
func (s *Store) ListCalls(ctx context.Context, f store.ListFilter) ([]store.Call, error) {
	if err := s.closedErr("list calls"); err != nil {
		return nil, err
	}
	// rowid breaks ties between calls created in the same microsecond.
	var (
		rows *sql.Rows
		err  error
	)
	if f.Keyset() {
		if f.Status != "" && !f.Status.Valid() {
			return []store.Call{}, nil
		}
		query, args := keysetQuery(f)
		rows, err = s.r.QueryContext(ctx, query, args...)
	} else if f.Status != "" {
		st := s.rq.listStatus(f.Status)
		if st == nil {
			return []store.Call{}, nil // no call has an unknown status
		}
		rows, err = st.QueryContext(ctx, limitArg(f.Limit))
	} else {
		rows, err = s.r.QueryContext(ctx,
			`SELECT `+callColumns+` FROM calls ORDER BY created_at DESC, rowid DESC LIMIT ?`, limitArg(f.Limit))
	}
	if err != nil {
		return nil, interpret(ctx, "list calls", err)
	}
	defer rows.Close()
	out := []store.Call{}
	for rows.Next() {
		c, err := scanCall(rows)
		if err != nil {
			return nil, interpret(ctx, "list calls", err)
		}
		out = append(out, c)
	}
	return out, interpret(ctx, "list calls", rows.Err())
}

// keysetQuery is ListCalls' statement for a keyset listing (see
// store.ListFilter.Keyset). A principal's listing reads
// idx_calls_principal_created (principal, created_at, call_id) backwards.
func keysetQuery(f store.ListFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	if f.Principal != nil {
		where, args = append(where, "principal = ?"), append(args, *f.Principal)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	if f.Tool != "" {
		where, args = append(where, "tool = ?"), append(args, f.Tool)
	}
	if f.Code != "" {
		// json_valid first: json_extract fails the whole query on a row
		// that is not JSON.
		where, args = append(where, "CASE WHEN json_valid(error_json) THEN json_extract(error_json, '$.code') END = ?"),
			append(args, f.Code)
	}
	if f.KeyPrefix != "" {
		where, args = append(where, "substr(idem_key, 1, length(?)) = ?"), append(args, f.KeyPrefix, f.KeyPrefix)
	}
	if f.Since != nil {
		where, args = append(where, "created_at >= ?"), append(args, *f.Since)
	}
	if f.Until != nil {
		where, args = append(where, "created_at < ?"), append(args, *f.Until)
	}
	if f.After != nil {
		where = append(where, "(created_at < ? OR (created_at = ? AND call_id < ?))")
		args = append(args, f.After.CreatedAt, f.After.CreatedAt, f.After.CallID)
	}
	q := `SELECT ` + callColumns + ` FROM calls`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY created_at DESC, call_id DESC LIMIT ?`, append(args, limitArg(f.Limit))
}

// ListEffects returns effects newest first (limit 0 = all).
func (s *Store) ListEffects(ctx context.Context, limit int) ([]store.Effect, error) {
	if err := s.closedErr("list effects"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx,
		`SELECT effect_id, call_id, tool, amount, created_at FROM effects
		 ORDER BY created_at DESC, rowid DESC LIMIT ?`, limitArg(limit))
	if err != nil {
		return nil, interpret(ctx, "list effects", err)
	}
	defer rows.Close()
	out := []store.Effect{}
	for rows.Next() {
		var (
			e      store.Effect
			amount sql.NullInt64
		)
		if err := rows.Scan(&e.EffectID, &e.CallID, &e.Tool, &amount, &e.CreatedAt); err != nil {
			return nil, interpret(ctx, "list effects", err)
		}
		e.Amount = nullInt(amount)
		out = append(out, e)
	}
	return out, interpret(ctx, "list effects", rows.Err())
}

// Audit returns audit rows oldest first; callID "" means every call. With a
// limit, the newest limit rows, still oldest first.
func (s *Store) Audit(ctx context.Context, callID string, limit int) ([]store.AuditEvent, error) {
	if err := s.closedErr("audit"); err != nil {
		return nil, err
	}
	// The inner query picks the newest rows, the outer one restores order.
	query := `SELECT id, ts, call_id, event, detail FROM
		(SELECT id, ts, call_id, event, detail FROM audit ORDER BY id DESC LIMIT ?) ORDER BY id`
	args := []any{limitArg(limit)}
	if callID != "" {
		query = `SELECT id, ts, call_id, event, detail FROM
			(SELECT id, ts, call_id, event, detail FROM audit WHERE call_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id`
		args = []any{callID, limitArg(limit)}
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpret(ctx, "audit", err)
	}
	defer rows.Close()
	out := []store.AuditEvent{}
	for rows.Next() {
		var (
			e            store.AuditEvent
			call, detail sql.NullString
		)
		if err := rows.Scan(&e.ID, &e.TS, &call, &e.Event, &detail); err != nil {
			return nil, interpret(ctx, "audit", err)
		}
		e.CallID, e.Detail = call.String, detail.String
		out = append(out, e)
	}
	return out, interpret(ctx, "audit", rows.Err())
}

// Dupes returns calls with more than one effect. effects.call_id is UNIQUE,
// so this is always empty; inspect runs it so an operator can see that.
func (s *Store) Dupes(ctx context.Context) ([]store.Dupe, error) {
	if err := s.closedErr("dupes"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx,
		`SELECT call_id, count(*) FROM effects GROUP BY call_id HAVING count(*) > 1 ORDER BY call_id`)
	if err != nil {
		return nil, interpret(ctx, "dupes", err)
	}
	defer rows.Close()
	out := []store.Dupe{}
	for rows.Next() {
		var d store.Dupe
		if err := rows.Scan(&d.CallID, &d.Effects); err != nil {
			return nil, interpret(ctx, "dupes", err)
		}
		out = append(out, d)
	}
	return out, interpret(ctx, "dupes", rows.Err())
}

// Attempts returns how many calls took how many attempts, by attempt.
func (s *Store) Attempts(ctx context.Context) ([]store.AttemptBucket, error) {
	if err := s.closedErr("attempts"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx,
		`SELECT attempt, count(*) FROM calls GROUP BY attempt ORDER BY attempt`)
	if err != nil {
		return nil, interpret(ctx, "attempts", err)
	}
	defer rows.Close()
	out := []store.AttemptBucket{}
	for rows.Next() {
		var b store.AttemptBucket
		if err := rows.Scan(&b.Attempt, &b.Calls); err != nil {
			return nil, interpret(ctx, "attempts", err)
		}
		out = append(out, b)
	}
	return out, interpret(ctx, "attempts", rows.Err())
}

// sqlStatsByStatus counts calls by status (pending, running, succeeded,
// failed) from the three partial indexes that hold every call once (a
// status is one of the four: the column's CHECK), never the table: there
// is no index of every call's status (docs/design.md, "The indexes of
// calls"). The final calls, most of them, in one covering walk of
// idx_calls_final_updated, counted with FILTER rather than grouped: a
// GROUP BY would sort them all. INDEXED BY, as the planner without
// statistics scans the table. TestStatsPlan checks the plan.
const sqlStatsByStatus = `
SELECT (SELECT count(*) FROM calls INDEXED BY idx_calls_pending WHERE status = 'pending'),
       (SELECT count(*) FROM calls INDEXED BY idx_calls_running WHERE status = 'running'),
       count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed')
FROM calls INDEXED BY idx_calls_final_updated WHERE status IN ('succeeded', 'failed')`

// Stats counts calls, effects and calls by status, from one snapshot so
// the numbers add up.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	if err := s.closedErr("stats"); err != nil {
		return store.Stats{}, err
	}
	st := store.Stats{ByStatus: map[store.Status]int64{
		// Every status is present, zero or not, so /stats has a fixed shape.
		store.StatusPending: 0, store.StatusRunning: 0, store.StatusSucceeded: 0, store.StatusFailed: 0,
	}}
	err := s.readTx(ctx, "stats", func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&st.Effects); err != nil {
			return err
		}
		var n [4]int64
		if err := tx.QueryRowContext(ctx, sqlStatsByStatus).Scan(&n[0], &n[1], &n[2], &n[3]); err != nil {
			return err
		}
		for i, status := range []store.Status{store.StatusPending, store.StatusRunning, store.StatusSucceeded, store.StatusFailed} {
			st.ByStatus[status] = n[i]
			st.Calls += n[i]
		}
		return nil
	})
	if err != nil {
		return store.Stats{}, err
	}
	return st, nil
}

// Queue counts the pending calls and measures the oldest one's age. See
// store.Store.
func (s *Store) Queue(ctx context.Context) (store.Queue, error) {
	if err := s.closedErr("queue"); err != nil {
		return store.Queue{}, err
	}
	var (
		q      store.Queue
		oldest sql.NullFloat64
	)
	var row *sql.Row
	if s.rq.queue != nil {
		row = s.rq.queue.QueryRowContext(ctx)
	} else {
		row = s.r.QueryRowContext(ctx, sqlQueueAnyVersion)
	}
	if err := row.Scan(&q.Pending, &oldest); err != nil {
		return store.Queue{}, interpret(ctx, "queue", err)
	}
	if oldest.Valid {
		q.OldestPendingAge = max(0, time.Duration((s.now()-oldest.Float64)*float64(time.Second)))
	}
	return q, nil
}

// sqlRates is Rates' statement (TestRatesPlan checks its plan).
const sqlRates = `
SELECT CAST(created_at / 60 AS INTEGER) * 60, 'created', count(*) FROM calls
WHERE created_at >= ? GROUP BY 1
UNION ALL
SELECT CAST(updated_at / 60 AS INTEGER) * 60, status, count(*) FROM calls INDEXED BY idx_calls_final_updated
WHERE status IN ('succeeded', 'failed') AND updated_at >= ? GROUP BY 1, 2`

// Rates counts calls created and calls finished per minute since the
// start of the window (store.Store.Rates), in one statement (one
// snapshot). idx_calls_created and idx_calls_final_updated serve the two
// halves, so the cost grows with the calls of the window only; the second
// reads the index alone (it holds status). The second index is named:
// without statistics SQLite's planner once preferred another index of
// status and read every final call (14 s instead of milliseconds over a
// million calls).
func (s *Store) Rates(ctx context.Context, minutes int) (store.Rates, error) {
	if err := store.CheckRateMinutes(minutes); err != nil {
		return store.Rates{}, err
	}
	if err := s.closedErr("rates"); err != nil {
		return store.Rates{}, err
	}
	now := s.now()
	start := store.RateWindowStart(now, minutes)
	rows, err := s.r.QueryContext(ctx, sqlRates, start, start)
	if err != nil {
		return store.Rates{}, interpret(ctx, "rates", err)
	}
	defer rows.Close()
	var sparse []store.RateBucket
	for rows.Next() {
		var (
			b    store.RateBucket
			kind string
			n    int64
		)
		if err := rows.Scan(&b.Minute, &kind, &n); err != nil {
			return store.Rates{}, interpret(ctx, "rates", err)
		}
		store.AddRate(&b, kind, n)
		sparse = append(sparse, b)
	}
	if err := rows.Err(); err != nil {
		return store.Rates{}, interpret(ctx, "rates", err)
	}
	return store.FillRates(now, minutes, sparse), nil
}

// EffectOf returns the effect row of a call, or store.ErrNotFound.
func (s *Store) EffectOf(ctx context.Context, callID string) (store.Effect, error) {
	if err := s.closedErr("effect"); err != nil {
		return store.Effect{}, err
	}
	var (
		e      store.Effect
		amount sql.NullInt64
	)
	err := s.r.QueryRowContext(ctx,
		`SELECT effect_id, call_id, tool, amount, created_at FROM effects WHERE call_id = ?`, callID).
		Scan(&e.EffectID, &e.CallID, &e.Tool, &amount, &e.CreatedAt)
	e.Amount = nullInt(amount)
	return e, interpret(ctx, "effect of "+callID, err)
}
