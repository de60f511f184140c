package executor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// Claim at creation (docs/lifecycle.md, "Claim at creation"): when a
// worker of this executor is free, the server's create claims the new call
// in its own transaction (store.NewCall.Claim), and the call starts here
// at once, without the scheduler's claim: one row write and one audit row
// fewer per call. The server asks for the worker first (Reserve), creates,
// then starts the call on the reservation (Start) or gives the worker back
// (Release).
//
// A reservation is refused whenever taking it could change what the
// scheduler would have done, so the claim order, the limits and the gates
// stay as documented:
//
//   - the executor is not running, or is stopping;
//   - no slot is free under --workers, or the tool's concurrency cap is
//     reached;
//   - the tool has a rate limit or a circuit breaker: those calls are
//     admitted through the store before a claim (gate.go), never claimed
//     without it;
//   - a pending call waits, by this instance's view of the queue, that
//     the scheduler's claim in flight (if any) will not take: a new call
//     must not overtake it (calls are claimed oldest first);
//   - the free slots left are held by the scheduler's claim in flight: it
//     takes up to as many calls as it held slots for, and a slot reserved
//     out of those would let the two together exceed a limit. A claim
//     round leaves a share of the free slots out (roundHeadroom), so new
//     calls still start at once while it runs.
//
// A refusal costs the call nothing but the usual path (pending, then
// claimed by the scheduler).

// Reservation is a worker slot taken for one call of a tool, before the
// call exists. Exactly one of Start and Release gives it up; later uses of
// either do nothing.
type Reservation struct {
	e    *Executor
	tool string
	used atomic.Bool
	// at is when the reservation was taken, before the create that
	// claims on it is sent: the claim's lease counts from later.
	at time.Time
}

// Claim is the store.CreateClaim a create made on this reservation must
// carry: this executor's owner and lease, as its scheduler claims with;
// nil (no claim) for no reservation.
func (r *Reservation) Claim() *store.CreateClaim {
	if r == nil {
		return nil
	}
	return &store.CreateClaim{Owner: r.e.owner, Lease: r.e.lease}
}

// Reserve takes a worker slot for a new call of tool without waiting, or
// reports false when the call must take the usual path (see above).
func (e *Executor) Reserve(tool string) (*Reservation, bool) {
	if e.gates.gateOf(tool).Guarded() || e.queue.waiting() > 0 {
		return nil, false
	}
	// Under stopMu, against stop: a reservation counts in runs, and
	// stop's Wait must not start before every Add it will wait for.
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	if !e.reserving || !e.limit.tryAcquire(tool) {
		return nil, false
	}
	e.runs.Add(1)
	return &Reservation{e: e, tool: tool, at: time.Now()}, true
}

// Start runs c, claimed at creation on this reservation, as the
// scheduler runs a call it claimed: the slot is the run's, counted busy,
// its attempt observed, and the run gives the slot back when it ends. It
// reports false, and gives the slot back, for a call that is not running
// at attempt 1 under this executor's owner (the create did not claim it),
// or when the reservation was already used.
func (r *Reservation) Start(c store.Call) bool {
	if r == nil {
		return false
	}
	e := r.e
	if c.Status != store.StatusRunning || c.Owner == nil || *c.Owner != e.owner || c.Attempt != 1 || c.Tool != r.tool {
		r.Release()
		return false
	}
	if !r.used.CompareAndSwap(false, true) {
		return false
	}
	e.m.busyWorkers.Inc()
	e.m.attempts.Observe(float64(c.Attempt))
	e.m.claimedAtCreation.Inc()
	if e.log.Enabled(context.Background(), slog.LevelDebug) { // the arguments cost allocations even when off
		e.log.Debug("claimed call", logkey.CallID, c.CallID, logkey.Key, c.IdemKey,
			logkey.Tool, c.Tool, logkey.Attempt, c.Attempt, "at_creation", true)
	}
	// The lease counts from the create's database now, after r.at: a
	// server frozen between the create and this start finds its lease
	// lapsed on waking, and sends nothing (startHeartbeat).
	e.startRun(c, r.at)
	return true
}

// Release gives the slot back unused: the create did not create a call
// (a replay, a reset, a conflict, an error). A call the store claimed on
// it all the same (an error that came after its commit) waits for its
// lease, as any claim that was never started does.
func (r *Reservation) Release() {
	if r == nil || !r.used.CompareAndSwap(false, true) {
		return
	}
	r.e.limit.release(r.tool)
	r.e.runs.Done()
	if r.e.queue.pending() > 0 {
		// The slot may be what a pending call waits for. Only then: a
		// wake-up is a claim, and a storm of replays gives a slot back
		// per request.
		r.e.Wake()
	}
}
