package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// The webhook outbox (store.Delivery): the row a completion or a cancel
// writes (insertDelivery), the delivery loop's claim and end, and the
// reads of the console and the metrics.

const deliveryColumns = `id, call_id, url, state, attempts, next_at, owner, lease_until, last_error, created_at, updated_at`

// deliveryDue is true of a delivery the loop may send now (both ? are
// now): pending, its next time come, and no live lease on it.
const deliveryDue = `state = 'pending' AND next_at <= ? AND (lease_until IS NULL OR lease_until <= ?)`

func scanDelivery(sc scanner) (store.Delivery, error) {
	var (
		d     store.Delivery
		state string
		owner sql.NullString
		lease sql.NullFloat64
	)
	if err := sc.Scan(&d.ID, &d.CallID, &d.URL, &state, &d.Attempts, &d.NextAt, &owner, &lease, &d.LastError,
		&d.CreatedAt, &d.UpdatedAt); err != nil {
		return store.Delivery{}, err
	}
	d.State, d.Owner, d.LeaseUntil = store.DeliveryState(state), nullString(owner), nullFloat(lease)
	return d, nil
}

func collectDeliveries(rows *sql.Rows) ([]store.Delivery, error) {
	defer rows.Close()
	out := []store.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// insertDelivery writes the outbox row of a call that became final, inside
// the transaction that made it final; nil writes nothing.
func insertDelivery(ctx context.Context, tx *sql.Tx, now float64, callID string, d *store.NewDelivery) error {
	if d == nil {
		return nil
	}
	_, err := tx.ExecContext(ctx, sqlInsertDelivery, d.ID, callID, d.URL, now, now, now)
	return err
}

// ClaimDeliveries claims due deliveries for owner. See store.Store.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]store.Delivery, error) {
	if s.readOnly {
		return nil, fmt.Errorf("sqlite claim deliveries: %w", store.ErrReadOnly)
	}
	if lease < 0 {
		return nil, fmt.Errorf("sqlite claim deliveries: negative lease %v", lease)
	}
	if limit <= 0 {
		return []store.Delivery{}, nil
	}
	if err := s.closedErr("claim deliveries"); err != nil {
		return nil, err
	}
	// The loop polls; a check on a read connection keeps an idle poll
	// from taking the write lock (as ClaimNext's).
	var due bool
	checkNow := s.now()
	if err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE `+deliveryDue+`)`,
		checkNow, checkNow).Scan(&due); err != nil {
		return nil, interpret(ctx, "claim deliveries: check", err)
	}
	if !due {
		return []store.Delivery{}, nil
	}
	var claimed []store.Delivery
	err := s.writeTx(ctx, store.WriteDeliveryClaim, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		rows, err := tx.QueryContext(ctx, `UPDATE webhook_deliveries
			SET attempts = attempts + 1, owner = ?, lease_until = ?, updated_at = ?
			WHERE id IN (SELECT id FROM webhook_deliveries WHERE `+deliveryDue+` ORDER BY next_at, id LIMIT ?)
			RETURNING `+deliveryColumns, owner, now+lease.Seconds(), now, now, now, limit)
		if err != nil {
			return err
		}
		claimed, err = collectDeliveries(rows)
		for i := range claimed {
			claimed[i].ClaimedAt = now
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// EndDelivery records one attempt's end under its claim. See store.Store.
func (s *Store) EndDelivery(ctx context.Context, e store.DeliveryEnd) error {
	if s.readOnly {
		return fmt.Errorf("sqlite end delivery: %w", store.ErrReadOnly)
	}
	if err := store.CheckDeliveryEnd(e); err != nil {
		return fmt.Errorf("sqlite %w", err)
	}
	if err := s.closedErr("end delivery"); err != nil {
		return err
	}
	return s.writeTx(ctx, store.WriteDeliveryEnd, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		var url string
		err := tx.QueryRowContext(ctx, `UPDATE webhook_deliveries
			SET state = ?, next_at = ?, owner = NULL, lease_until = NULL, last_error = ?, updated_at = ?
			WHERE id = ? AND state = 'pending' AND owner = ? AND attempts = ?
			RETURNING url`,
			string(e.StateAfter()), now+e.Delay.Seconds(), e.Reason, now, e.ID, e.Owner, e.Attempts).Scan(&url)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite end delivery %s (owner %s, attempt %d): %w", e.ID, e.Owner, e.Attempts, store.ErrNotHeld)
		} else if err != nil {
			return err
		}
		event, detail := store.DeliveryEvent(e, url)
		return s.insertAudit(ctx, tx, now, e.CallID, event, detail)
	})
}

// Deliveries returns a call's deliveries, oldest first. See store.Store.
func (s *Store) Deliveries(ctx context.Context, callID string) ([]store.Delivery, error) {
	if err := s.closedErr("deliveries"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE call_id = ? ORDER BY created_at, id`, callID)
	if err != nil {
		return nil, interpret(ctx, "deliveries", err)
	}
	out, err := collectDeliveries(rows)
	return out, interpret(ctx, "deliveries", err)
}

// PendingDeliveries counts the pending deliveries. See store.Store.
func (s *Store) PendingDeliveries(ctx context.Context) (int64, error) {
	if err := s.closedErr("pending deliveries"); err != nil {
		return 0, err
	}
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&n)
	return n, interpret(ctx, "pending deliveries", err)
}
