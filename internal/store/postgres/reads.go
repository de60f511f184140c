package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// Reads are single statements outside any explicit transaction: each sees
// one consistent snapshot of committed data, which is all they need.

// Get returns principal's call with that id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, principal, callID string) (store.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	c, err := scanCall(s.pool.QueryRow(ctx,
		`SELECT `+callColumns+` FROM calls WHERE call_id = $1 AND principal = $2`, callID, principal))
	return c, interpret(ctx, err)
}

// GetAny returns the call with that id, whoever recorded it, or
// ErrNotFound.
func (s *Store) GetAny(ctx context.Context, callID string) (store.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	c, err := scanCall(s.pool.QueryRow(ctx, `SELECT `+callColumns+` FROM calls WHERE call_id = $1`, callID))
	return c, interpret(ctx, err)
}

// GetByKey returns principal's call for an idempotency key, or ErrNotFound.
func (s *Store) GetByKey(ctx context.Context, principal, key string) (store.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	c, err := scanCall(s.pool.QueryRow(ctx,
		`SELECT `+callColumns+` FROM calls WHERE principal = $1 AND idem_key = $2`, principal, key))
	if errors.Is(err, pgx.ErrNoRows) {
		// Not a call's own key: perhaps an alias (intent deduplication).
		c, err = scanCall(s.pool.QueryRow(ctx, `SELECT `+callColumnsOf("c")+`
FROM key_aliases a JOIN calls c ON c.call_id = a.call_id WHERE a.principal = $1 AND a.idem_key = $2`, principal, key))
	}
	return c, interpret(ctx, err)
}

// ListCalls returns calls newest first, optionally of one status and at
// most f.Limit of them.
func (s *Store) ListCalls(ctx context.Context, f store.ListFilter) ([]store.Call, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	if f.Keyset() {
		if f.Status != "" && !f.Status.Valid() {
			return []store.Call{}, nil
		}
		query, args := keysetSQL(f)
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return nil, interpret(ctx, err)
		}
		calls, err := collectCalls(rows)
		return calls, interpret(ctx, err)
	}
	query, ok := listCallsSQL(f.Status)
	if !ok {
		return []store.Call{}, nil // no call has an unknown status (CHECK)
	}
	// A NULL limit is LIMIT ALL.
	rows, err := s.pool.Query(ctx, query, limitParam(f.Limit))
	if err != nil {
		return nil, interpret(ctx, err)
	}
	calls, err := collectCalls(rows)
	return calls, interpret(ctx, err)
}

// keysetSQL is ListCalls' statement for a keyset listing (see
// store.ListFilter.Keyset). A principal's listing reads
// idx_calls_principal_created (principal, created_at, call_id) backwards;
// the cursor is a row comparison, which that index serves directly. A
// status is written as a literal (one of four: a statement for each), so
// a listing of pending or running calls reads their partial index.
func keysetSQL(f store.ListFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Principal != nil {
		where = append(where, "principal = "+arg(*f.Principal))
	}
	switch {
	case f.Status.Valid():
		// A literal, as in listCallsSQL: a generic plan of "status = $n"
		// can read no partial index, and walks idx_calls_created over
		// every call (TestKeysetStatusGenericPlan).
		where = append(where, "status = '"+string(f.Status)+"'")
	case f.Status != "":
		where = append(where, "status = "+arg(string(f.Status)))
	}
	if f.Tool != "" {
		where = append(where, "tool = "+arg(f.Tool))
	}
	if f.Code != "" {
		// error_json is text that idemctl always writes as a JSON object
		// (store.FailureJSON, the executor's error objects).
		where = append(where, "(error_json::jsonb ->> 'code') = "+arg(f.Code)+"::text")
	}
	if f.KeyPrefix != "" {
		p := arg(f.KeyPrefix)
		where = append(where, "substr(idem_key, 1, length("+p+"::text)) = "+p+"::text")
	}
	if f.Since != nil {
		where = append(where, "created_at >= "+arg(*f.Since)+"::double precision")
	}
	if f.Until != nil {
		where = append(where, "created_at < "+arg(*f.Until)+"::double precision")
	}
	if f.After != nil {
		where = append(where, "(created_at, call_id) < ("+arg(f.After.CreatedAt)+"::double precision, "+arg(f.After.CallID)+"::text)")
	}
	q := `SELECT ` + callColumns + ` FROM calls`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY created_at DESC, call_id DESC LIMIT ` + arg(limitParam(f.Limit)), args
}

// listCallsSQL is ListCalls' statement for status ("" = every status), or
// false for a status no call can have.
//
// The status is a literal, one statement per status, not a parameter: pgx
// prepares each statement once per connection, and PostgreSQL soon runs a
// prepared statement with a generic plan, one made without the parameter's
// value. For "status = $1" (or "$1 IS NULL OR status = $1") that plan walks
// idx_calls_created backwards over every call, filtering on status: a cost
// growing with the history, and the scheduler lists the running calls
// after every completion. With the literal, the plan knows it is after the
// few running calls: idx_calls_running (numbers in BENCHMARKS.md, "Notes
// moved from the code").
// TestListCallsGenericPlan checks it.
func listCallsSQL(status store.Status) (string, bool) {
	where := ""
	switch {
	case status == "":
	case status.Valid():
		where = "WHERE status = '" + string(status) + "'"
	default:
		return "", false
	}
	return `
SELECT ` + callColumns + `
FROM calls
` + where + `
ORDER BY created_at DESC, call_id DESC
LIMIT $1`, true
}

// ListEffects returns effects newest first (limit 0 = all).
func (s *Store) ListEffects(ctx context.Context, limit int) ([]store.Effect, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
SELECT effect_id, call_id, tool, amount, created_at
FROM effects
ORDER BY created_at DESC, effect_id DESC
LIMIT $1`, limitParam(limit))
	if err != nil {
		return nil, interpret(ctx, err)
	}
	effs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Effect, error) {
		var e store.Effect
		err := r.Scan(&e.EffectID, &e.CallID, &e.Tool, &e.Amount, &e.CreatedAt)
		return e, err
	})
	return effs, interpret(ctx, err)
}

// Audit returns audit rows oldest first; callID "" means every call. With a
// limit, the newest limit rows, still oldest first.
func (s *Store) Audit(ctx context.Context, callID string, limit int) ([]store.AuditEvent, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	var filter *string
	if callID != "" {
		filter = &callID
	}
	rows, err := s.pool.Query(ctx, `
SELECT id, ts, call_id, event, detail
FROM (
  SELECT id, ts, coalesce(call_id, '') AS call_id, event, coalesce(detail, '') AS detail
  FROM audit
  WHERE $1::text IS NULL OR call_id = $1
  ORDER BY id DESC
  LIMIT $2
) AS newest
ORDER BY id`, filter, limitParam(limit))
	if err != nil {
		return nil, interpret(ctx, err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditEvent, error) {
		var e store.AuditEvent
		err := r.Scan(&e.ID, &e.TS, &e.CallID, &e.Event, &e.Detail)
		return e, err
	})
	return evs, interpret(ctx, err)
}

// Dupes returns calls with more than one effect. effects.call_id is UNIQUE,
// so this is empty unless the schema was tampered with; inspect shows it
// as proof.
func (s *Store) Dupes(ctx context.Context) ([]store.Dupe, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
SELECT call_id, count(*)
FROM effects
GROUP BY call_id
HAVING count(*) > 1
ORDER BY call_id`)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	d, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Dupe, error) {
		var d store.Dupe
		err := r.Scan(&d.CallID, &d.Effects)
		return d, err
	})
	return d, interpret(ctx, err)
}

// Attempts returns the attempt distribution, by attempt ascending.
func (s *Store) Attempts(ctx context.Context) ([]store.AttemptBucket, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
SELECT attempt, count(*)
FROM calls
GROUP BY attempt
ORDER BY attempt`)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	b, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AttemptBucket, error) {
		var b store.AttemptBucket
		err := r.Scan(&b.Attempt, &b.Calls)
		return b, err
	})
	return b, interpret(ctx, err)
}

// Stats counts calls, effects and calls by status, from one snapshot (one
// statement), so calls and effects are consistent with each other.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
SELECT status, count(*), (SELECT count(*) FROM effects)
FROM calls
GROUP BY status
UNION ALL
-- One row even when calls is empty, so the effects count always arrives.
SELECT NULL, 0, (SELECT count(*) FROM effects)`)
	if err != nil {
		return store.Stats{}, interpret(ctx, err)
	}
	defer rows.Close()
	st := store.Stats{ByStatus: map[store.Status]int64{
		// Every status is present, zero or not, so /stats has a fixed
		// shape (as with SQLite).
		store.StatusPending: 0, store.StatusRunning: 0, store.StatusSucceeded: 0, store.StatusFailed: 0,
	}}
	for rows.Next() {
		var (
			status *string
			n      int64
		)
		if err := rows.Scan(&status, &n, &st.Effects); err != nil {
			return store.Stats{}, interpret(ctx, err)
		}
		if status != nil {
			st.ByStatus[store.Status(*status)] = n
			st.Calls += n
		}
	}
	return st, interpret(ctx, rows.Err())
}

// limitParam turns "0 = all" into SQL's LIMIT NULL (no limit).
func limitParam(limit int) *int {
	if limit <= 0 {
		return nil
	}
	return &limit
}

// Queue counts the pending calls and measures the oldest one's age by the
// database's clock, from the partial index idx_calls_pending.
func (s *Store) Queue(ctx context.Context) (store.Queue, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	var (
		q   store.Queue
		age *float64
	)
	err := s.pool.QueryRow(ctx, `
SELECT count(*), `+dbNow+` - min(created_at)
FROM calls WHERE status = 'pending'`).Scan(&q.Pending, &age)
	if err != nil {
		return store.Queue{}, interpret(ctx, err)
	}
	if age != nil {
		q.OldestPendingAge = max(0, time.Duration(*age*float64(time.Second)))
	}
	return q, nil
}

// ratesSQL is Rates' statement: idx_calls_created and
// idx_calls_final_updated (which holds status) serve its two halves
// (TestFinalIndexPlans).
const ratesSQL = `
SELECT (floor(created_at / 60) * 60)::bigint, 'created', count(*) FROM calls
WHERE created_at >= $1::double precision GROUP BY 1
UNION ALL
SELECT (floor(updated_at / 60) * 60)::bigint, status, count(*) FROM calls
WHERE status IN ('succeeded', 'failed') AND updated_at >= $1::double precision GROUP BY 1, 2`

// Rates counts calls created and calls finished per minute since the
// start of the window (store.Store.Rates), in one statement (one
// snapshot), by the database server's clock. idx_calls_created and
// idx_calls_final_updated serve the two halves.
func (s *Store) Rates(ctx context.Context, minutes int) (store.Rates, error) {
	ctx, cancel := s.scan(ctx)
	defer cancel()
	if err := store.CheckRateMinutes(minutes); err != nil {
		return store.Rates{}, err
	}
	var now float64
	if err := s.pool.QueryRow(ctx, `SELECT `+dbNow).Scan(&now); err != nil {
		return store.Rates{}, interpret(ctx, err)
	}
	start := store.RateWindowStart(now, minutes)
	rows, err := s.pool.Query(ctx, ratesSQL, float64(start))
	if err != nil {
		return store.Rates{}, interpret(ctx, err)
	}
	sparse, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.RateBucket, error) {
		var (
			b    store.RateBucket
			kind string
			n    int64
		)
		err := r.Scan(&b.Minute, &kind, &n)
		store.AddRate(&b, kind, n)
		return b, err
	})
	if err != nil {
		return store.Rates{}, interpret(ctx, err)
	}
	return store.FillRates(now, minutes, sparse), nil
}

// EffectOf returns the effect row of a call, or store.ErrNotFound.
func (s *Store) EffectOf(ctx context.Context, callID string) (store.Effect, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	var e store.Effect
	err := s.pool.QueryRow(ctx, `
SELECT effect_id, call_id, tool, amount, created_at FROM effects WHERE call_id = $1`, callID).
		Scan(&e.EffectID, &e.CallID, &e.Tool, &e.Amount, &e.CreatedAt)
	return e, interpret(ctx, err)
}
