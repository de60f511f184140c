package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Webhook deliveries (docs/api.md, "Completion webhooks"): a call that
// names a notify_url gets one delivery row each time it becomes final,
// written in the transaction that makes it final (the outbox), and a
// delivery loop sends it until the receiver answers 2xx or it is given up.
// The store records the rows and their state; the allow-list, the
// signature, the backoff and when to give up are decided above the seam
// (internal/webhook).

// Audit events of deliveries, on the call's audit trail.
const (
	// EventNotified: the receiver answered 2xx (DetailNotified).
	EventNotified = "notified"
	// EventNotifyFailed: one delivery attempt failed, or the delivery was
	// given up (DetailNotifyFailed).
	EventNotifyFailed = "notify_failed"
)

// DeliveryState is a delivery row's state.
type DeliveryState string

// The states of a delivery: pending until the receiver took it
// (delivered) or the loop gave it up (failed).
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered"
	DeliveryFailed    DeliveryState = "failed"
)

// NewDelivery is the outbox row a completion (Completion.Notify) or a
// cancel writes in the transaction that makes the call final.
type NewDelivery struct {
	// ID is the delivery's stable id, sent as its Idempotency-Key on every
	// attempt (NewDeliveryID).
	ID  string
	URL string
}

// NewDeliveryID returns "wh_" + 16 lowercase hex digits from crypto/rand.
func NewDeliveryID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("delivery id: %w", err)
	}
	return "wh_" + hex.EncodeToString(b[:]), nil
}

// DeliveryFor is the delivery a final state of c writes with it
// (Completion.Notify, Cancel's notify): one with a fresh id when c names a
// notify_url, else nil, so a call without one costs no statement.
func DeliveryFor(c Call) (*NewDelivery, error) {
	if c.NotifyURL == nil {
		return nil, nil
	}
	id, err := NewDeliveryID()
	if err != nil {
		return nil, err
	}
	return &NewDelivery{ID: id, URL: *c.NotifyURL}, nil
}

// Delivery is one row of the outbox.
type Delivery struct {
	ID     string
	CallID string
	URL    string
	State  DeliveryState
	// Attempts counts the claims of the delivery (each one send).
	Attempts int64
	// NextAt is when a pending delivery may be sent next, Unix seconds by
	// the database's clock.
	NextAt float64
	// Owner and LeaseUntil are the claim of the delivery being sent; a
	// lapsed lease (the sender died) makes it claimable again.
	Owner      *string
	LeaseUntil *float64
	// LastError is the last failed attempt's reason ("" if none).
	LastError string
	CreatedAt float64
	UpdatedAt float64
	// ClaimedAt is the database's clock at the claim (ClaimDeliveries
	// only; 0 otherwise): with CreatedAt, the delivery's age by one clock.
	ClaimedAt float64
}

// DeliveryOutcome is how one delivery attempt ended (DeliveryEnd).
type DeliveryOutcome int

// Outcomes of EndDelivery.
const (
	// Delivered: the receiver answered 2xx (audit notified).
	Delivered DeliveryOutcome = iota + 1
	// DeliveryRetry: the attempt failed; the delivery is sent again after
	// DeliveryEnd.Delay (audit notify_failed).
	DeliveryRetry
	// DeliveryGiveUp: the attempt failed and the delivery is not sent
	// again (audit notify_failed).
	DeliveryGiveUp
)

// DeliveryEnd reports one attempt of a delivery under its claim: it
// commits only if the delivery is still pending under exactly that owner
// and attempt count.
type DeliveryEnd struct {
	ID       string
	CallID   string
	Owner    string
	Attempts int64
	Outcome  DeliveryOutcome
	// Delay is DeliveryRetry's wait before the next attempt.
	Delay time.Duration
	// Reason is why a failed attempt failed (the receiver's status or the
	// transport's error, never a secret); "" when delivered.
	Reason string
}

// DetailNotified is the notified event's detail: "wh_… to URL (attempt N)".
func DetailNotified(e DeliveryEnd, url string) string {
	return fmt.Sprintf("%s to %s (attempt %d)", e.ID, url, e.Attempts)
}

// DetailNotifyFailed is the notify_failed event's detail: "wh_… to URL
// (attempt N): reason; retry in D" or "…; given up".
func DetailNotifyFailed(e DeliveryEnd, url string) string {
	d := fmt.Sprintf("%s to %s (attempt %d): %s", e.ID, url, e.Attempts, e.Reason)
	if e.Outcome == DeliveryGiveUp {
		return d + "; given up"
	}
	return d + "; retry in " + e.Delay.String()
}

// DeliveryEvent is the audit event and detail of an ended attempt.
func DeliveryEvent(e DeliveryEnd, url string) (event, detail string) {
	if e.Outcome == Delivered {
		return EventNotified, DetailNotified(e, url)
	}
	return EventNotifyFailed, DetailNotifyFailed(e, url)
}

// CheckDeliveryEnd is EndDelivery's argument check, shared by backends.
func CheckDeliveryEnd(e DeliveryEnd) error {
	switch {
	case e.Outcome < Delivered || e.Outcome > DeliveryGiveUp:
		return fmt.Errorf("end delivery %s: unknown outcome %d", e.ID, e.Outcome)
	case e.Delay < 0:
		return fmt.Errorf("end delivery %s: negative delay %v", e.ID, e.Delay)
	}
	return nil
}

// StateAfter is the state a delivery is left in by an ended attempt.
func (e DeliveryEnd) StateAfter() DeliveryState {
	switch e.Outcome {
	case Delivered:
		return DeliveryDelivered
	case DeliveryGiveUp:
		return DeliveryFailed
	}
	return DeliveryPending
}
