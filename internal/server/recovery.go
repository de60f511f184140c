package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// recoverExpired returns expired running calls to pending (audit recover).
// With heartbeats a lease expires only when its worker stopped extending
// it: the process died or froze, or the database refused it for longer
// than the lease (docs/lifecycle.md, "Leases").
func (e *executor) recoverExpired(ctx context.Context) {
	ids, err := e.st.RecoverExpired(ctx)
	if e.noteErr("recover", err) {
		return
	}
	for _, id := range ids {
		e.m.recoveries.WithLabelValues(recoverExpired).Inc()
		e.log.Warn("lease expired, call back to pending", e.callAttrs(ctx, id)...)
	}
}

// releaseDeadOwners returns at once the running calls whose owner was a
// process on this host that is gone (docs/lifecycle.md, "Recovery"): after a
// crash and restart there is no need to wait out the old lease. Only owners
// that provably no longer exist are released; other hosts and live
// processes are never touched.
func (e *executor) releaseDeadOwners(ctx context.Context) {
	if !e.deadOwners {
		return
	}
	running, err := e.st.ListCalls(ctx, store.ListFilter{Status: store.StatusRunning})
	if e.noteErr("list running", err) {
		return
	}
	for _, c := range running {
		if c.Owner == nil {
			continue
		}
		o, gone := e.proc.ownerGone(e.self, *c.Owner)
		if !gone {
			continue
		}
		reason := fmt.Sprintf("owner process gone (%s pid %d)", o.Host, o.PID)
		// Fenced on the owner and attempt we saw: if the call moved on
		// meanwhile, Release refuses and nothing happens.
		err := e.st.Release(ctx, store.Lease{CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt}, reason)
		if errors.Is(err, store.ErrNotHeld) {
			continue
		}
		if err != nil {
			e.log.Warn("releasing call of dead owner", attrCallID, c.CallID, attrKey, c.IdemKey,
				attrOwner, *c.Owner, attrErr, err)
			continue
		}
		e.m.recoveries.WithLabelValues(recoverDeadOwner).Inc()
		e.log.Warn("owner process gone, call back to pending", attrCallID, c.CallID, attrKey, c.IdemKey,
			attrOwner, *c.Owner, attrAttempt, c.Attempt)
	}
}

// callAttrs returns the log attributes of a call known only by id.
func (e *executor) callAttrs(ctx context.Context, id string) []any {
	attrs := []any{attrCallID, id}
	if c, err := e.st.Get(ctx, id); err == nil {
		attrs = append(attrs, attrKey, c.IdemKey)
	}
	return attrs
}
