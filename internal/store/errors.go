package store

import (
	"errors"
	"strconv"
)

// Sentinel errors. Backends return these (possibly wrapped) and never their
// driver's own error for these situations; which method returns which is
// documented on Store.
var (
	// ErrNotFound: no call with that id or key.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: the key exists with a different fingerprint (HTTP 409).
	ErrConflict = errors.New("store: idempotency key reused with a different fingerprint")
	// ErrNotHeld: Release found the call not running under the owner and
	// attempt it was given (completed, recovered or taken over meanwhile),
	// so there was nothing of that lease to release.
	ErrNotHeld = errors.New("store: call not held by that owner and attempt")
	// ErrFenced: a completion was refused because the worker no longer holds
	// the lease it claimed (owner or attempt changed). The refusal is audited.
	ErrFenced = errors.New("store: stale lease, completion fenced")
	// ErrUnavailable: the database cannot take the request now (busy past
	// the busy timeout, disk full, connection lost, store closed). Maps to
	// HTTP 503; the same request may succeed later.
	ErrUnavailable = errors.New("store: database unavailable")
	// ErrReadOnly: a write was attempted on a store opened read-only.
	ErrReadOnly = errors.New("store: opened read-only")
	// ErrCancelRequested: ExtendLease extended the lease, and a cancel was
	// requested for the call meanwhile (by a request to any instance): the
	// worker should stop the tool and record the call canceled. It is how
	// a cancel reaches a tool running on another instance.
	ErrCancelRequested = errors.New("store: cancel requested for the running call")
	// ErrRefused: the database refused this write for good (a constraint,
	// a value it cannot store, a row too big). The same write would be
	// refused every time, so retrying it is pointless. Backends return it
	// as a *RefusedError, which errors.Is matches against ErrRefused.
	ErrRefused = errors.New("store: write refused by the database")
	// ErrKeyExpired: the key named a call that retention purged, and the
	// key's tombstone is still kept (NewCall.TombstoneRetention): the
	// request is not run again (HTTP 410). Backends return it as an
	// *ExpiredError naming the purged call.
	ErrKeyExpired = errors.New("store: idempotency key expired with its purged call")
)

// ConflictError is how a backend returns ErrConflict: it names the call
// that already holds the key, so the server can tell the client which one
// (docs/api.md, "Errors"). errors.Is(err, ErrConflict) matches it.
type ConflictError struct {
	// CallID is the existing call recorded under the key.
	CallID string
	// Key is the idempotency key, for the log.
	Key string
}

// Error names the key and the existing call.
func (e *ConflictError) Error() string {
	return "store: idempotency key " + strconv.Quote(e.Key) + " reused with a different fingerprint (call " + e.CallID + ")"
}

// Is makes errors.Is(err, ErrConflict) true for a *ConflictError.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ExpiredError is how a backend returns ErrKeyExpired: the tombstone of
// the key, so the server can tell the client which call the key named and
// when it was purged. errors.Is(err, ErrKeyExpired) matches it.
type ExpiredError struct {
	Tombstone Tombstone
}

// Error names the key, the purged call and the purge time.
func (e *ExpiredError) Error() string {
	return "store: idempotency key " + strconv.Quote(e.Tombstone.IdemKey) + " expired: call " + e.Tombstone.CallID +
		" purged at " + strconv.FormatFloat(e.Tombstone.PurgedAt, 'f', 3, 64)
}

// Is makes errors.Is(err, ErrKeyExpired) true for an *ExpiredError.
func (e *ExpiredError) Is(target error) bool { return target == ErrKeyExpired }

// sentinels lists every sentinel, for IsSentinel.
var sentinels = []error{ErrNotFound, ErrConflict, ErrNotHeld, ErrFenced, ErrUnavailable, ErrReadOnly, ErrRefused, ErrCancelRequested, ErrKeyExpired}

// IsSentinel reports whether err already is (wraps) one of the store's
// sentinel errors, so a backend's error translation leaves it alone.
func IsSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// RefusedError is a permanent refusal of a write by the database: the
// backend's way of saying ErrRefused while keeping its own error for the
// log. Code names the class of the refusal without any data (a PostgreSQL
// SQLSTATE such as "SQLSTATE 23505", or an SQLite result code name such as
// "SQLITE_CONSTRAINT_UNIQUE"); it is safe to show to a client, where the
// wrapped error's text may quote the refused value and is not.
type RefusedError struct {
	Code string
	Err  error
}

// Error returns the refusal with the driver's message.
func (e *RefusedError) Error() string {
	return "store: write refused by the database (" + e.Code + "): " + e.Err.Error()
}

// Unwrap returns the driver's error.
func (e *RefusedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRefused) true for a *RefusedError.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }
