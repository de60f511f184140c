package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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

// claimableRow is claimable tested on a row found otherwise: the unary +
// keeps SQLite from searching an index on status or lease_until for it.
const claimableRow = `((+status = 'pending' AND ` + notBeforePassed + `) OR (+status = 'running' AND +lease_until <= ?))`

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
		now := s.now()
		until := now + lease.Seconds()
		return s.hot(func(h *hotStmts) error {
			// Two index-ordered picks instead of one query with an OR, which
			// SQLite can only answer by collecting every claimable row and
			// sorting them (USE TEMP B-TREE FOR ORDER BY): with a queue of
			// 20 k calls, every claim sorted 20 k rows. Each pick returns at
			// most limit rows, so the oldest limit of their union are the
			// oldest limit claimable calls, exactly as the single query chose.
			pending, err := h.pick(h.pickPending, now, full, limit)
			if err != nil {
				return err
			}
			expired, err := h.pick(h.pickExpired, now, full, limit)
			if err != nil {
				return err
			}
			for i := range expired {
				expired[i].expired = true
			}
			// The calls to claim, oldest first, within the tools' quotas;
			// an expired lease's owner and attempt are read before the
			// claim changes them, for its outcome_unknown row. The claim
			// and its audit rows name the calls by rowid (a JSON array of
			// integers: nothing to escape), found by the picks in this
			// transaction.
			var (
				chosen = oldest(pending, expired, limit)
				rowids = make([]int64, 0, len(chosen))
				order  = make(map[string]int, len(chosen)) // call id → position in chosen
				lapsed = map[string]store.Lease{}
				taken  = map[string]int{} // calls of a capped tool chosen so far
			)
			for _, cand := range chosen {
				if max, capped := left[cand.tool]; capped && taken[cand.tool] >= max {
					continue // the tool's quota is used up: leave the call pending
				}
				taken[cand.tool]++
				if cand.expired {
					l, err := h.lapsedLease(cand.callID)
					if err != nil {
						return err
					}
					lapsed[cand.callID] = l
				}
				order[cand.callID] = len(rowids)
				rowids = append(rowids, cand.rowid)
			}
			if len(rowids) == 0 {
				return nil
			}
			// One UPDATE claims them all; a call it does not return is no
			// longer claimable (someone else won it) and is passed over.
			if err := h.query(h.claim, func(row []driver.Value) error {
				c, err := callFromRow(row)
				if err == nil {
					claimed = append(claimed, c)
				}
				return err
			}, until, owner, now, rowidArray(rowids), now, now); err != nil {
				return err
			}
			slices.SortFunc(claimed, func(a, b store.Call) int { return order[a.CallID] - order[b.CallID] })
			// The audit: each taken-over attempt's outcome_unknown before
			// its call's claimed row, then one claimed row per call, in one
			// statement.
			won := make([]int64, 0, len(claimed))
			for _, c := range claimed {
				if l, ok := lapsed[c.CallID]; ok {
					if err := h.exec(h.insertAudit, now, c.CallID, store.EventOutcomeUnknown, store.DetailTakenOver(l)); err != nil {
						return err
					}
				}
				won = append(won, rowids[order[c.CallID]])
			}
			return h.exec(h.insertAudits, now, store.EventClaimed, store.DetailClaimed(owner), rowidArray(won))
		})
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// rowidArray is ids as a JSON array, json_each's parameter.
func rowidArray(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*8)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// lapsedLease reads the lease of a running call whose lease expired: the
// attempt its claim takes over.
func (h *hotStmts) lapsedLease(callID string) (store.Lease, error) {
	l := store.Lease{CallID: callID}
	found := false
	err := h.query(h.leaseOf, func(row []driver.Value) error {
		found = true
		if row[0] != nil {
			owner, err := asString(row[0], 0)
			if err != nil {
				return err
			}
			l.Owner = owner
		}
		var err error
		l.Attempt, err = asInt64(row[1], 1)
		return err
	}, callID)
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	return l, err
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
func (h *hotStmts) pick(st driverStmt, args ...any) ([]candidate, error) {
	var out []candidate
	err := h.query(st, func(row []driver.Value) error {
		var (
			c   candidate
			err error
		)
		if c.rowid, err = asInt64(row[0], 0); err != nil {
			return err
		}
		if c.callID, err = asString(row[1], 1); err != nil {
			return err
		}
		if c.createdAt, err = asFloat64(row[2], 2); err != nil {
			return err
		}
		if c.tool, err = asString(row[3], 3); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	}, args...)
	return out, err
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
