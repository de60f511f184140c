package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// CreateOrGet records a new call for n.IdemKey or returns the existing one
// (docs/lifecycle.md, "Create or get"). See store.Store.
func (s *Store) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	if s.readOnly {
		return store.Call{}, 0, fmt.Errorf("sqlite create: %w", store.ErrReadOnly)
	}
	if err := store.CheckCreateClaim(n); err != nil {
		return store.Call{}, 0, fmt.Errorf("sqlite %w", err)
	}
	if err := s.closedErr("create"); err != nil {
		return store.Call{}, 0, err
	}
	// A replay of a key seen lately, whose call needs no reset, only
	// reads (recent.go): the key→call binding and the fingerprint never
	// change once inserted, so answering Existing or ErrConflict from a
	// read snapshot is exact. A retryable failure (which needs a reset), an
	// absent key and a key not seen lately go to the serialised path below.
	kh := s.recent.hash(n.Principal, n.IdemKey)
	if s.recent.holds(kh) {
		if c, err := scanCall(s.rq.callByKey.QueryRowContext(ctx, n.Principal, n.IdemKey)); err == nil {
			if c.Fingerprint != n.Fingerprint {
				return store.Call{}, 0, conflict(c)
			}
			if !(c.Status == store.StatusFailed && store.Retryable(c.ErrorJSON)) {
				return c, store.Existing, nil
			}
		} else if !errors.Is(err, sql.ErrNoRows) {
			return store.Call{}, 0, interpret(ctx, "create: lookup", err)
		}
	}

	var (
		call store.Call
		out  store.Outcome
	)
	// One IMMEDIATE transaction: select by key, then insert or reset. No
	// other writer can slip in between the select and the insert, so two
	// requests with one key cannot both see it absent; the UNIQUE
	// idem_key is the backstop.
	err := s.writeTx(ctx, store.WriteCreate, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		var intent *string
		if n.Intent != "" {
			intent = &n.Intent
		}
		if n.DedupWindow <= 0 || n.Intent == "" {
			// No dedup rule: try the insert first. It inserts nothing,
			// and writes nothing, when the key is a call's own, an alias
			// or expired; the lookups below then tell which.
			c := newCallRow(n, now)
			inserted, err := s.insertNewCallHot(c, intent, n.TombstoneRetention, now)
			if err != nil {
				return err
			}
			if inserted {
				call, out = c, store.Created
				return s.insertAudit(ctx, tx, now, n.CallID, store.EventCreated, store.DetailCreatedOf(n))
			}
		}
		c, err := s.queryCallHot(ctx, tx, s.wq.callByKey, n.Principal, n.IdemKey)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// Not a call's own key. An alias? The same transaction
			// decides, so a key is never both (store.Store.CreateOrGet).
			var aliasOf, aliasFP string
			aliasOf, aliasFP, err = s.aliasByKeyHot(n.Principal, n.IdemKey)
			switch {
			case err == nil:
				if aliasFP != n.Fingerprint {
					return fmt.Errorf("sqlite create: %w", &store.ConflictError{CallID: aliasOf, Key: n.IdemKey})
				}
				call, err = s.queryCallHot(ctx, tx, s.wq.callByID, aliasOf)
				out = store.Existing
				return err
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			// Neither: a key retention purged is expired while its
			// tombstone counts, whatever the fingerprint (410).
			if n.TombstoneRetention > 0 {
				ts, err := s.tombstoneByKeyHot(n.Principal, n.IdemKey, now-n.TombstoneRetention.Seconds())
				switch {
				case err == nil:
					return fmt.Errorf("sqlite create: %w", &store.ExpiredError{Tombstone: ts})
				case !errors.Is(err, sql.ErrNoRows):
					return err
				}
			}
			if n.DedupWindow > 0 && n.Intent != "" {
				c, err := s.queryCallHot(ctx, tx, s.wq.callByIntent, n.Principal, n.Intent, n.Tool, now-n.DedupWindow.Seconds())
				switch {
				case err == nil:
					if _, err := tx.StmtContext(ctx, s.wq.insertAlias).ExecContext(ctx,
						n.Principal, n.IdemKey, c.CallID, n.Fingerprint, now); err != nil {
						return err
					}
					call, out = c, store.Deduplicated
					return s.insertAudit(ctx, tx, now, c.CallID, store.EventDeduplicated, n.IdemKey)
				case !errors.Is(err, sql.ErrNoRows):
					return err
				}
			}
			c := newCallRow(n, now)
			if err := s.hot(func(h *hotStmts) error {
				return h.exec(h.insertCall, c.CallID, c.Principal, c.IdemKey, c.Fingerprint, c.ClientID, c.Seq, c.Tool, string(c.ArgsJSON),
					string(c.Status), c.Attempt, c.LeaseUntil, c.Owner, now, now, intent, c.Via, c.NotifyURL,
					nullIfEmpty(c.TraceParent))
			}); err != nil {
				return err
			}
			call, out = c, store.Created
			return s.insertAudit(ctx, tx, now, n.CallID, store.EventCreated, store.DetailCreatedOf(n))
		case err != nil:
			return err
		case c.Fingerprint != n.Fingerprint:
			// Same key, different request: refuse, write nothing (409).
			return conflict(c)
		case c.Status == store.StatusFailed && store.Retryable(c.ErrorJSON):
			// Only a same-key request resets a retryable failure; the
			// server never retries on its own. attempt is kept:
			// it counts physical tries.
			call, err = s.queryCallHot(ctx, tx, s.wq.retryReset, now, c.CallID)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("retry reset %s: no row changed", c.CallID)
			} else if err != nil {
				return err
			}
			out = store.RetryReset
			return s.insertAudit(ctx, tx, now, c.CallID, store.EventRetryReset, store.DetailRetryReset(c.ErrorJSON))
		default:
			call, out = c, store.Existing
			return nil
		}
	})
	if _, known := errors.AsType[*store.ConflictError](err); err == nil || known {
		s.recent.add(kh) // the key has a call now: a replay may read it
	}
	if err != nil {
		return store.Call{}, 0, err
	}
	return call, out, nil
}

// conflict is CreateOrGet's ErrConflict, naming existing, the call that
// holds the key.
func conflict(existing store.Call) error {
	return fmt.Errorf("sqlite create: %w", &store.ConflictError{CallID: existing.CallID, Key: existing.IdemKey})
}

// newCallRow is the call CreateOrGet inserts for n at now, exactly as a
// read of its row returns it: the writer knows every column, so the
// insert needs no RETURNING. Claimed at creation (n.Claim), it is running
// at attempt 1 under the claim's owner, its lease ending at now + lease by
// this database's clock (the local clock, as for every SQLite lease).
func newCallRow(n store.NewCall, now float64) store.Call {
	args := string(n.ArgsJSON)
	if args == "" {
		args = "{}"
	}
	c := store.Call{
		CallID:      n.CallID,
		Principal:   n.Principal,
		IdemKey:     n.IdemKey,
		Fingerprint: n.Fingerprint,
		ClientID:    copyOf(n.ClientID),
		Seq:         copyOf(n.Seq),
		Tool:        n.Tool,
		ArgsJSON:    json.RawMessage(args),
		Status:      store.StatusPending,
		Via:         store.ViaOf(n.Via),
		NotifyURL:   copyOf(n.NotifyURL),
		TraceParent: n.TraceParent,
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if n.Claim != nil {
		until, owner := now+n.Claim.Lease.Seconds(), n.Claim.Owner
		c.Status, c.Attempt, c.LeaseUntil, c.Owner = store.StatusRunning, 1, &until, &owner
	}
	return c
}

// copyOf is a copy of *p, nil for nil: the returned call shares no
// memory with the caller's NewCall, as a call read from a row does not.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
