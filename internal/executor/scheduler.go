package executor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// schedule is the scheduler loop: at start, every interval, and on wake (a
// new call, a finished run).
//
// A wake-up finds nothing to claim when no call is pending by this
// instance's count (queueGauge), and then does nothing: a finished run
// wakes the scheduler, and with calls claimed at creation most runs end
// with nothing pending, so each wake-up would otherwise cost a recovery
// probe and a claim that finds nothing (on PostgreSQL, two statements).
// The interval's round still does both whatever the count, for what the
// count does not see: expired leases, and other instances' calls until
// the count is read again (at most one interval).
func (e *Executor) schedule(ctx context.Context) {
	defer close(e.schedDone)
	tick := time.NewTicker(e.interval)
	defer tick.Stop()
	for woken := false; ; {
		if !woken || e.queue.pending() > 0 {
			e.tick(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			woken = false
		case <-e.wake:
			woken = true
		}
	}
}

// tick recovers what can be recovered, refreshes the pending count, then
// claims up to the free capacity, in batches, and starts a run per call.
//
// Expired leases are recovered before every claim (one index probe on a
// read connection when there is nothing to recover), so a lapsed call is
// audited recover before it is claimed again. The dead-owner pass runs at
// most once per interval, however often the scheduler is woken: wake-ups
// come with every new call and every finished run (thousands a second
// under load), and the pass lists every running call (listed on every
// wake-up, it was a tenth of the server's allocations in a profile).
// It is for crashed processes, where one interval more changes nothing.
func (e *Executor) tick(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	e.recoverExpired(ctx)
	if now := time.Now(); e.lastOwnerPass.IsZero() || now.Sub(e.lastOwnerPass) >= e.interval {
		e.lastOwnerPass = now
		e.releaseDeadOwners(ctx)
	}
	e.refreshQueue(ctx)
	for ctx.Err() == nil {
		if !e.claimRound(ctx) {
			return
		}
	}
}

// claimRound is one claim of tick: up to the free capacity (less the
// headroom left to claims at creation), a run started per call. It
// reports whether another round may find more. The slots and quotas the
// round may fill are held from before its claim until a slot is taken
// for each call it claimed (beginRound, endRound), so a reservation
// (Reserve) meanwhile never takes one of them; the pending calls the
// round covers are not counted as waiting meanwhile (queueGauge.cover).
func (e *Executor) claimRound(ctx context.Context) bool {
	free, quotas := e.limit.beginRound()
	if free <= 0 {
		e.limit.endRound(nil)
		return false
	}
	e.queue.cover(free)
	// The claim runs to completion even if ctx is cancelled meanwhile:
	// a claim committed but not started would sit under our lease
	// until it expired.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	// Guarded tools (a rate limit, a breaker) are admitted first; the
	// grants cap them in the claim (gate.go).
	quotas, adm := e.gates.admit(cctx, e.st, free, quotas, e.noteErr)
	sent := time.Now() // before the claim: its lease counts from later (startHeartbeat)
	calls, err := e.st.ClaimNext(cctx, e.owner, e.lease, free, quotas...)
	e.m.claimQueries.Inc()
	claimErr := e.noteErr("claim", err)
	if len(adm) > 0 {
		e.gates.settle(cctx, e.st, adm, calls, e.noteErr)
	}
	cancel()
	e.limit.endRound(calls) // no call on an error
	e.queue.claimed(len(calls))
	e.queue.cover(0)
	if claimErr {
		return false
	}
	for _, c := range calls {
		e.m.busyWorkers.Inc()
		e.m.attempts.Observe(float64(c.Attempt))
		// Debug: per call (idemctl_claim_queries_total and the
		// attempts histogram count claims at info's price).
		if e.log.Enabled(cctx, slog.LevelDebug) { // the arguments cost allocations even when off
			e.log.Debug("claimed call", logkey.CallID, c.CallID, logkey.Key, c.IdemKey,
				logkey.Tool, c.Tool, logkey.Attempt, c.Attempt)
		}
		e.runs.Add(1)
		e.startRun(c, sent)
	}
	// Short of free and no quota filled: nothing more runnable now.
	return len(calls) >= free || filledQuota(quotas, calls)
}

// filledQuota reports whether a claim took all that was left of some
// tool's quota. The store then passed over that tool's other calls, so a
// short claim does not mean nothing else is runnable: the next claim,
// with the tool full, may find calls of other tools behind them. A tool
// stays full until one of its runs ends, so this adds about one claim per
// capped tool to a tick.
func filledQuota(quotas []store.ToolQuota, calls []store.Call) bool {
	for _, q := range quotas {
		if q.Max <= 0 {
			continue
		}
		n := 0
		for _, c := range calls {
			if c.Tool == q.Tool {
				n++
			}
		}
		if n >= q.Max {
			return true
		}
	}
	return false
}

// refreshQueue reads the pending count and the oldest pending call's age
// from the store, at most once per interval however often the scheduler is
// woken: the count reads an index of every pending call, and wake-ups come
// with every new call.
func (e *Executor) refreshQueue(ctx context.Context) {
	if !e.queue.due(e.interval) {
		return
	}
	q, err := e.st.Queue(ctx)
	if e.noteErr("queue count", err) {
		return
	}
	e.queue.set(q)
}

// noteErr logs a scheduler error once per distinct message (the loop runs
// five times a second) and reports whether err is non-nil.
func (e *Executor) noteErr(op string, err error) bool {
	if err == nil {
		if e.lastErr[op] != "" {
			e.log.Info("scheduler "+op+" works again", logkey.Owner, e.owner)
			delete(e.lastErr, op)
		}
		return false
	}
	if errors.Is(err, context.Canceled) {
		return true
	}
	if msg := err.Error(); e.lastErr[op] != msg {
		e.log.Warn("scheduler "+op+" failed", logkey.Err, err)
		e.lastErr[op] = msg
	}
	return true
}

// run is one claimed call's run, on a worker (workers.go): it runs the
// attempt, then gives its slot back and wakes the scheduler to claim the
// backlog. sent is when the claim's request was sent (startHeartbeat).
func (e *Executor) run(c store.Call, sent time.Time) {
	defer e.runs.Done()
	defer func() {
		e.limit.release(c.Tool)
		e.m.busyWorkers.Dec()
		e.Wake()
	}()
	e.safeExecute(c, sent)
}
