package postgres

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

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
// "expired" searches idx_calls_running and sorts only the expired rows, which
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
  SELECT c.call_id, c.created_at, c.tool, c.owner, c.attempt
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
  -- error_json: a call back from a scheduled retry kept the failure it
  -- waited out (ScheduleRetry); a running call has none.
  -- unknown_outcome: a running call here is one whose lease expired, its
  -- attempt abandoned in flight (SET reads the row as it was).
  SET status = 'running', attempt = c.attempt + 1, error_json = NULL,
      lease_until = clock.now + $3, owner = $1, updated_at = clock.now,
      unknown_outcome = CASE WHEN c.status = 'running' THEN '` + wire.UnknownAbandoned + `' ELSE c.unknown_outcome END
  FROM picked, clock
  WHERE c.call_id = picked.call_id
    AND ((c.status = 'pending' AND (c.not_before IS NULL OR c.not_before <= clock.now))
         OR (c.status = 'running' AND c.lease_until <= clock.now))
  RETURNING ` + callColumnsOf("c") + `
), audited AS (
  -- A call taken from expired abandons the attempt in flight: its
  -- outcome_unknown row comes right before its claimed row ($8:
  -- store.TakenOverFormat); the audit id follows the ORDER BY.
  INSERT INTO audit (ts, call_id, event, detail)
  SELECT a.ts, a.call_id, a.event, a.detail FROM (
    SELECT cl.updated_at AS ts, cl.call_id, 0 AS k, '` + store.EventOutcomeUnknown + `' AS event,
           format($8::text, e.attempt, coalesce(e.owner, '')) AS detail
    FROM claimed cl JOIN expired e ON e.call_id = cl.call_id
    UNION ALL
    SELECT updated_at, call_id, 1, '` + store.EventClaimed + `', $4::text
    FROM claimed
  ) AS a
  ORDER BY a.ts, a.call_id, a.k
)
SELECT ` + callColumns + ` FROM claimed`

// ClaimNext claims up to limit runnable calls for owner in one statement,
// claimSQL.
func (s *Store) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
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
		rows, err := q.Query(ctx, claimSQL, owner, limit, lease.Seconds(), store.DetailClaimed(owner), full, capped, left,
			store.TakenOverFormat)
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
