package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

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
  SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = clock.now,
      unknown_outcome = '` + wire.UnknownAbandoned + `'
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
	ctx, cancel := s.step(ctx)
	defer cancel()
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
			ts                        []float64
			auditIDs, details, events []string
		)
		var (
			id, owner string
			attempt   int64
			at        float64
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &owner, &attempt, &at}, func() error {
			ids = append(ids, id)
			l := store.Lease{CallID: id, Owner: owner, Attempt: attempt}
			why := store.DetailLeaseExpired(l)
			auditIDs = append(auditIDs, id, id)
			ts = append(ts, at, at)
			events = append(events, store.EventOutcomeUnknown, store.EventRecover)
			details = append(details, store.DetailAbandoned(l, why), why)
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
ORDER BY n`, ts, auditIDs, events, details)
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
	ctx, done := s.step(ctx)
	defer done()
	callID, owner, attempt := l.CallID, l.Owner, l.Attempt
	if err := s.writable(); err != nil {
		return err
	}
	return s.inTx(ctx, s.beforeCommit(store.WriteRelease, nil, func(tx pgx.Tx) error {
		var ts float64
		err := tx.QueryRow(ctx, `
UPDATE calls
SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = clock.now, unknown_outcome = $4
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE call_id = $1
  -- Same token as a completion: only the exact lease we were told is dead.
  AND status = 'running' AND owner = $2 AND attempt = $3
RETURNING updated_at`, callID, owner, attempt, wire.UnknownAbandoned).Scan(&ts)
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
		if err := s.insertAudit(ctx, tx, ts, callID, store.EventOutcomeUnknown, store.DetailAbandoned(l, reason)); err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, ts, callID, store.EventRecover, reason)
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
	ctx, done := s.step(ctx)
	defer done()
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
