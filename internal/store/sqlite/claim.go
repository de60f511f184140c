package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// notBeforePassed is true of a pending call that may be claimed now (first
// ?): no server-side retry is waiting, or its not-before time has passed.
const notBeforePassed = `(not_before IS NULL OR not_before <= ?)`

// toolNotFull is true of a call whose tool is not in the JSON array ? (the
// tools ClaimNext may take none of). json_each turns one text parameter
// into the list, so the statement stays prepared once whatever the list.
const toolNotFull = `tool NOT IN (SELECT value FROM json_each(?))`

// claimable is the condition under which a call may be claimed: pending
// with its not-before time passed, or running under a lease that has
// expired (both ? are now). It is the WHERE clause of the conditional
// UPDATE (sqlClaim), so the claim re-checks it on the row it changes.
const claimable = `((status = 'pending' AND ` + notBeforePassed + `) OR (status = 'running' AND lease_until <= ?))`

// candidate is a claimable call found by one of the pick queries.
type candidate struct {
	rowid     int64
	callID    string
	createdAt float64
	tool      string
	// expired: a running call whose lease lapsed; its claim abandons the
	// attempt in flight (audit outcome_unknown).
	expired bool
}

// before orders candidates oldest first, rowid breaking ties, as one
// ORDER BY created_at, rowid over both kinds would.
func (a candidate) before(b candidate) bool {
	if a.createdAt != b.createdAt {
		return a.createdAt < b.createdAt
	}
	return a.rowid < b.rowid
}

// ClaimNext claims up to limit runnable calls for owner, oldest first. See
// store.Store.
func (s *Store) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	if s.readOnly {
		return nil, fmt.Errorf("sqlite claim: %w", store.ErrReadOnly)
	}
	full, left, err := quotaArgs(quotas)
	if err != nil {
		return nil, fmt.Errorf("sqlite claim: %w", err)
	}
	if lease < 0 {
		return nil, fmt.Errorf("sqlite claim: negative lease %v", lease)
	}
	if limit <= 0 {
		return []store.Call{}, nil
	}
	if err := s.closedErr("claim"); err != nil {
		return nil, err
	}
	// Workers poll often; checking on a read connection first keeps an
	// idle poll from taking the write lock.
	var any bool
	checkNow := s.now()
	if err := s.rq.hasClaimable.QueryRowContext(ctx, checkNow, full, checkNow, full).Scan(&any); err != nil {
		return nil, interpret(ctx, "claim: check", err)
	}
	if !any {
		return []store.Call{}, nil
	}

	claimed := []store.Call{}
	err = s.writeTx(ctx, store.WriteClaim, func(ctx context.Context, tx *sql.Tx) error {
		claimed = claimed[:0]
		taken := map[string]int{} // calls of a capped tool claimed so far
		now := s.now()
		until := now + lease.Seconds()
		// Two index-ordered picks instead of one query with an OR, which
		// SQLite can only answer by collecting every claimable row and
		// sorting them (USE TEMP B-TREE FOR ORDER BY): with a queue of
		// 20 k calls, every claim sorted 20 k rows. Each pick returns at
		// most limit rows, so the oldest limit of their union are the
		// oldest limit claimable calls, exactly as the single query chose.
		pending, err := pick(ctx, tx.StmtContext(ctx, s.wq.pickPending), now, full, limit)
		if err != nil {
			return err
		}
		expired, err := pick(ctx, tx.StmtContext(ctx, s.wq.pickExpired), now, full, limit)
		if err != nil {
			return err
		}
		for i := range expired {
			expired[i].expired = true
		}
		claim := tx.StmtContext(ctx, s.wq.claim)
		for _, cand := range oldest(pending, expired, limit) {
			if max, capped := left[cand.tool]; capped && taken[cand.tool] >= max {
				continue // the tool's quota is used up: leave the call pending
			}
			var lapsed store.Lease
			if cand.expired {
				var prevOwner sql.NullString
				if err := tx.QueryRowContext(ctx, `SELECT owner, attempt FROM calls WHERE call_id = ?`, cand.callID).
					Scan(&prevOwner, &lapsed.Attempt); err != nil {
					return err
				}
				lapsed.CallID, lapsed.Owner = cand.callID, prevOwner.String
			}
			c, err := scanCall(claim.QueryRowContext(ctx, until, owner, now, cand.callID, now, now))
			if errors.Is(err, sql.ErrNoRows) {
				continue // no longer claimable: someone else won it
			} else if err != nil {
				return err
			}
			if cand.expired {
				if err := s.insertAudit(ctx, tx, now, c.CallID, store.EventOutcomeUnknown, store.DetailTakenOver(lapsed)); err != nil {
					return err
				}
			}
			if err := s.insertAudit(ctx, tx, now, c.CallID, store.EventClaimed, store.DetailClaimed(owner)); err != nil {
				return err
			}
			claimed = append(claimed, c)
			taken[c.Tool]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// quotaArgs splits ClaimNext's quotas into the JSON array of full tools
// (Max <= 0, toolNotFull's parameter) and the quota left of the others.
func quotaArgs(quotas []store.ToolQuota) (full string, left map[string]int, err error) {
	var names []string
	left = map[string]int{}
	for _, q := range quotas {
		if q.Max <= 0 {
			names = append(names, q.Tool)
		} else {
			left[q.Tool] = q.Max
		}
	}
	if len(names) == 0 {
		return "[]", left, nil
	}
	b, err := json.Marshal(names)
	return string(b), left, err
}

// pick runs a pick query and returns its candidates in order.
func pick(ctx context.Context, st *sql.Stmt, args ...any) ([]candidate, error) {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.rowid, &c.callID, &c.createdAt, &c.tool); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// oldest merges two candidate lists, each already oldest first, and keeps
// the first limit.
func oldest(a, b []candidate, limit int) []candidate {
	out := make([]candidate, 0, min(limit, len(a)+len(b)))
	for len(out) < limit && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || (len(a) > 0 && !b[0].before(a[0])) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}
