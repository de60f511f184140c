package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// recoverExpired returns expired running calls to pending (audit recover).
// With heartbeats a lease expires only when its worker stopped extending
// it: the process died or froze, or the database refused it for longer
// than the lease (docs/lifecycle.md, "Leases").
func (e *Executor) recoverExpired(ctx context.Context) {
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
func (e *Executor) releaseDeadOwners(ctx context.Context) {
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
			e.log.Warn("releasing call of dead owner", logkey.CallID, c.CallID, logkey.Key, c.IdemKey,
				logkey.Owner, *c.Owner, logkey.Err, err)
			continue
		}
		e.m.recoveries.WithLabelValues(recoverDeadOwner).Inc()
		e.log.Warn("owner process gone, call back to pending", logkey.CallID, c.CallID, logkey.Key, c.IdemKey,
			logkey.Owner, *c.Owner, logkey.Attempt, c.Attempt)
	}
}

// callAttrs returns the log attributes of a call known only by id.
func (e *Executor) callAttrs(ctx context.Context, id string) []any {
	attrs := []any{logkey.CallID, id}
	if c, err := e.st.GetAny(ctx, id); err == nil {
		attrs = append(attrs, logkey.Key, c.IdemKey)
	}
	return attrs
}
