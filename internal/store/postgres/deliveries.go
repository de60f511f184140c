package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// The webhook outbox (store.Delivery): the row a completion or a cancel
// writes (insertDelivery), the delivery loop's claim and end, and the
// reads of the console and the metrics.

const deliveryColumns = `id, call_id, url, state, attempts, next_at, owner, lease_until, last_error, created_at, updated_at`

func scanDelivery(row pgx.Row) (store.Delivery, error) {
	var (
		d     store.Delivery
		state string
	)
	if err := row.Scan(&d.ID, &d.CallID, &d.URL, &state, &d.Attempts, &d.NextAt, &d.Owner, &d.LeaseUntil, &d.LastError,
		&d.CreatedAt, &d.UpdatedAt); err != nil {
		return store.Delivery{}, err
	}
	d.State = store.DeliveryState(state)
	return d, nil
}

// insertDelivery writes the outbox row of a call that became final, inside
// the transaction that made it final; nil writes nothing.
func insertDelivery(ctx context.Context, tx pgx.Tx, now float64, callID string, d *store.NewDelivery) error {
	if d == nil {
		return nil
	}
	_, err := tx.Exec(ctx, `
INSERT INTO webhook_deliveries (id, call_id, url, state, attempts, next_at, created_at, updated_at)
VALUES ($1, $2, $3, 'pending', 0, $4, $4, $4)`, d.ID, callID, d.URL, now)
	return err
}

// claimDeliveriesSQL claims up to $3 due deliveries for owner $1 under a
// lease of $2 seconds: FOR UPDATE SKIP LOCKED, so instances claiming at
// once take different rows and never wait on each other, and the row lock
// re-checks the condition on the row's newest version. The claim time
// (the database's clock) is returned as the last column.
const claimDeliveriesSQL = `
WITH clock AS MATERIALIZED (
  SELECT ` + dbNow + ` AS now
), picked AS (
  SELECT d.id FROM webhook_deliveries d, clock
  WHERE d.state = 'pending' AND d.next_at <= clock.now AND (d.lease_until IS NULL OR d.lease_until <= clock.now)
  ORDER BY d.next_at, d.id
  LIMIT $3
  FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries AS w
SET attempts = w.attempts + 1, owner = $1, lease_until = clock.now + $2, updated_at = clock.now
FROM picked, clock
WHERE w.id = picked.id
RETURNING w.id, w.call_id, w.url, w.state, w.attempts, w.next_at, w.owner, w.lease_until, w.last_error,
  w.created_at, w.updated_at, clock.now`

// ClaimDeliveries claims due deliveries for owner. See store.Store.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]store.Delivery, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return nil, err
	}
	if lease < 0 {
		return nil, fmt.Errorf("postgres claim deliveries: negative lease %v", lease)
	}
	if limit <= 0 {
		return []store.Delivery{}, nil
	}
	rows, err := s.pool.Query(ctx, claimDeliveriesSQL, owner, lease.Seconds(), limit)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Delivery, error) {
		var (
			d     store.Delivery
			state string
		)
		err := r.Scan(&d.ID, &d.CallID, &d.URL, &state, &d.Attempts, &d.NextAt, &d.Owner, &d.LeaseUntil, &d.LastError,
			&d.CreatedAt, &d.UpdatedAt, &d.ClaimedAt)
		d.State = store.DeliveryState(state)
		return d, err
	})
	if err != nil {
		return nil, interpret(ctx, err)
	}
	if out == nil {
		out = []store.Delivery{}
	}
	return out, nil
}

// EndDelivery records one attempt's end under its claim. See store.Store.
func (s *Store) EndDelivery(ctx context.Context, e store.DeliveryEnd) error {
	ctx, cancel := s.step(ctx)
	defer cancel()
	if err := s.writable(); err != nil {
		return err
	}
	if err := store.CheckDeliveryEnd(e); err != nil {
		return fmt.Errorf("postgres %w", err)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			url string
			now float64
		)
		err := tx.QueryRow(ctx, `
UPDATE webhook_deliveries
SET state = $2, next_at = clock.now + $3, owner = NULL, lease_until = NULL, last_error = $4, updated_at = clock.now
FROM (SELECT `+dbNow+` AS now) AS clock
WHERE id = $1 AND state = 'pending' AND owner = $5 AND attempts = $6
RETURNING url, clock.now`,
			e.ID, string(e.StateAfter()), e.Delay.Seconds(), e.Reason, e.Owner, e.Attempts).Scan(&url, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres end delivery %s (owner %s, attempt %d): %w", e.ID, e.Owner, e.Attempts, store.ErrNotHeld)
		} else if err != nil {
			return err
		}
		event, detail := store.DeliveryEvent(e, url)
		return s.insertAudit(ctx, tx, now, e.CallID, event, detail)
	})
}

// Deliveries returns a call's deliveries, oldest first. See store.Store.
func (s *Store) Deliveries(ctx context.Context, callID string) ([]store.Delivery, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
WHERE call_id = $1 ORDER BY created_at, id`, callID)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Delivery, error) { return scanDelivery(r) })
	if err != nil {
		return nil, interpret(ctx, err)
	}
	if out == nil {
		out = []store.Delivery{}
	}
	return out, nil
}

// PendingDeliveries counts the pending deliveries. See store.Store.
func (s *Store) PendingDeliveries(ctx context.Context) (int64, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&n)
	return n, interpret(ctx, err)
}
