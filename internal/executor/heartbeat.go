package executor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// errLeaseLost is the cause a refused heartbeat cancels a tool's context
// with: the call was taken over (or completed, or released) while the tool
// ran, so its outcome can no longer be recorded.
var errLeaseLost = errors.New("lease lost: the call is no longer held by this attempt")

// heartbeat keeps one running call's lease alive while its tool runs
// (docs/lifecycle.md, "Leases"): every lease/3 it extends the lease to the
// database's now + lease, fenced on the claim's owner and attempt. A lease
// therefore lives as long as its worker, and a tool may run longer than
// --lease; a process that dies or freezes stops extending, and its call is
// recovered when the lease runs out, as before.
//
// An extension the store refuses (store.ErrNotHeld, ErrNotFound) means the
// call is no longer this attempt's: the tool's context is cancelled with
// errLeaseLost, and the completion that follows is fenced. Any other error
// (the database is busy or unreachable) is logged and the next beat tries
// again; the lease still has two thirds of its length to go when a beat
// fails, and if it runs out meanwhile, the next beat finds out.
//
// Extensions write no audit row: the count rides on the completion
// (store.Completion.Extensions) and shows in its audit detail.
type heartbeat struct {
	extended atomic.Int64
	// start and until are the lease's end by this process's monotonic
	// clock, as nanoseconds since start: conservative, as each beat counts
	// from before it was sent (tool.LeaseHeld).
	start time.Time
	until atomic.Int64
	lose  context.CancelCauseFunc

	e     *Executor
	c     store.Call
	log   *slog.Logger
	every time.Duration
	// The beats are a timer's, not a goroutine's: a fast tool returns
	// before the first one is due, and then costs no goroutine, ticker or
	// channel. A beat runs on the timer's goroutine and sets the timer for
	// the next one; stop stops the timer and waits for a beat in flight.
	timer *time.Timer
	mu    sync.Mutex
	// stopped: stop was called; no beat starts, and an error of a beat
	// in flight (cancelled by stop) is not reported.
	stopped bool
	// cancelBeat cancels the beat in flight (nil between beats).
	cancelBeat context.CancelFunc
	beating    sync.WaitGroup
}

// held reports whether the lease has not run out by this process's clock;
// when it has, it cancels the tool (errLeaseLost), as a refused beat does.
// A frozen worker that wakes past its lease thus learns it before its
// next request, not only at its next beat.
func (h *heartbeat) held() bool {
	if time.Since(h.start) < time.Duration(h.until.Load()) {
		return true
	}
	h.lose(errLeaseLost)
	return false
}

// startHeartbeat starts beating for c; lose cancels the tool's context.
// sent is when the request that claimed c (a claim, or a create that
// claimed it) was sent, by this process's clock. Call stop when the tool
// has returned.
func (e *Executor) startHeartbeat(c store.Call, log *slog.Logger, lose context.CancelCauseFunc, sent time.Time) *heartbeat {
	// The beats run under a context of their own, not the tool's, and end
	// only when stop is called: a cancelled tool may take a moment to
	// return, and its lease must hold until its release or completion.
	every := e.lease / 3
	// The claim's lease counts from the database's now, which came after
	// the claim's request was sent: counted from then, a worker frozen
	// between the claim and this start (a create's commit and answer
	// included) learns on waking that the lease ran out. Half a beat of
	// margin besides, as for an extension.
	h := &heartbeat{start: sent, lose: lose, e: e, c: c, log: log, every: every}
	h.until.Store(int64(e.lease - every/2))
	h.mu.Lock() // the first beat's Reset reads timer
	h.timer = time.AfterFunc(every, h.beat)
	h.mu.Unlock()
	return h
}

// beat extends the lease once and, unless the call is no longer this
// attempt's, sets the timer for the next beat, every lease/3 from this
// one's start.
func (h *heartbeat) beat() {
	began := time.Now()
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	// One beat may take at most one period: a stuck database must not
	// stack beats up, and the next one tries again.
	bctx, bcancel := context.WithTimeout(context.Background(), h.every)
	h.cancelBeat = bcancel
	h.beating.Add(1)
	h.mu.Unlock()
	defer h.beating.Done()

	e, c, log := h.e, h.c, h.log
	sentAt := time.Since(h.start)
	err := e.st.ExtendLease(bctx, store.Lease{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt}, e.lease)
	bcancel()
	h.mu.Lock()
	h.cancelBeat = nil
	stopped := h.stopped
	h.mu.Unlock()
	switch {
	case err == nil:
		h.until.Store(int64(sentAt + e.lease))
		h.extended.Add(1)
		e.m.heartbeats.WithLabelValues(beatExtended).Inc()
	case stopped:
		return // stopped: the tool returned meanwhile
	case errors.Is(err, store.ErrCancelRequested):
		// Extended, and canceled through some instance: stop the
		// tool; runTool records the call canceled.
		h.extended.Add(1)
		e.m.heartbeats.WithLabelValues(beatExtended).Inc()
		log.Info("cancel requested through another instance; cancelling the tool")
		h.lose(errCanceledByRequest)
		return
	case errors.Is(err, store.ErrNotHeld), errors.Is(err, store.ErrNotFound):
		e.m.heartbeats.WithLabelValues(beatLost).Inc()
		log.Warn("lease extension refused: the call was taken over; cancelling the tool",
			logkey.Owner, e.owner, logkey.Err, err)
		h.lose(errLeaseLost)
		return
	default:
		e.m.heartbeats.WithLabelValues(beatError).Inc()
		log.Warn("lease extension failed; trying again at the next beat", logkey.Err, err)
	}
	h.mu.Lock()
	if !h.stopped {
		h.timer.Reset(max(h.every-time.Since(began), 0))
	}
	h.mu.Unlock()
}

// stop ends the beats and waits for the last one, so the count is final
// and no extension races with the completion. It returns the count.
func (h *heartbeat) stop() int64 {
	h.mu.Lock()
	h.stopped = true
	if h.cancelBeat != nil {
		h.cancelBeat()
	}
	h.mu.Unlock()
	h.timer.Stop()
	h.beating.Wait()
	return h.extended.Load()
}
