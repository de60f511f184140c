package store

import (
	"context"
	"sync/atomic"
	"time"
)

// NextBatch is the group commit's intake, shared by both backends' committers
// (store/sqlite commit.go, store/postgres commit.go): it waits for one write
// on ops, then takes whoever else is waiting at that moment, up to max, and
// returns them in batch (reused: its old contents are dropped). It does not
// linger for more: an idle store commits a lone write at once, a busy one
// builds its next batch while the current commit's flush runs. ok is false
// once quit is closed.
func NextBatch[T any](ops <-chan T, quit <-chan struct{}, batch []T, max int) (_ []T, ok bool) {
	clear(batch) // drop references to finished ops
	select {
	case op := <-ops:
		batch = append(batch[:0], op)
	case <-quit:
		return batch[:0], false
	}
	for len(batch) < max {
		select {
		case op := <-ops:
			batch = append(batch, op)
		default:
			return batch, true
		}
	}
	return batch, true
}

// Queued is one write of a group commit between its writer and the
// committers (store/sqlite commit.go, store/postgres commit.go): whether
// a committer took it or its writer gave up first, and its answer. Exactly
// one of the two wins (compare-and-swap): a write the committer took runs
// to its end and is answered, one its writer abandoned is never run.
// Embed it in the backend's op; the zero value is not ready: Submit
// makes it so.
type Queued struct {
	state atomic.Int32 // queued, taken or abandoned
	done  chan error   // capacity 1: the committer never blocks on it
}

const (
	queued int32 = iota
	taken
	abandoned
)

// Prepare makes q a queued write with no answer yet; Submit calls it
// (a test that hands writes to a committer directly calls it too).
func (q *Queued) Prepare() {
	q.state.Store(queued)
	q.done = make(chan error, 1)
}

// Answer gives a taken write its outcome; the committer calls it once for
// each write Take returned.
func (q *Queued) Answer(err error) { q.done <- err }

// Answered delivers the write's answer (Submit's wait, and tests').
func (q *Queued) Answered() <-chan error { return q.done }

// Refusals are Submit's answers to a write that no committer took.
type Refusals struct {
	// Busy: not taken within the wait (the busy or lock timeout).
	Busy func() error
	// Closed: the store is closing.
	Closed func() error
	// Canceled: the writer's ctx ended first; given ctx.Err().
	Canceled func(err error) error
}

// Submit hands op (whose Queued is q) to the committers on ops and waits
// for its answer. A write not yet taken gives up when ctx ends, after
// wait (waiting for a committer counts as waiting for the database's
// lock: past it the write is unavailable, not an unbounded queue), or
// when quit is closed, with the matching refusal. Once taken it runs to
// its end and is answered, whatever ctx does meanwhile.
func Submit[T any](ctx context.Context, ops chan<- T, op T, q *Queued, quit <-chan struct{}, wait time.Duration, r Refusals) error {
	q.Prepare()
	busy := time.NewTimer(wait)
	defer busy.Stop()
	select {
	case ops <- op:
	case <-busy.C:
		return r.Busy()
	case <-ctx.Done():
		return r.Canceled(ctx.Err())
	case <-quit:
		return r.Closed()
	}
	select {
	case err := <-q.done:
		return err
	case <-busy.C:
		if q.state.CompareAndSwap(queued, abandoned) {
			return r.Busy()
		}
	case <-ctx.Done():
		if q.state.CompareAndSwap(queued, abandoned) {
			return r.Canceled(ctx.Err())
		}
	case <-quit:
		if q.state.CompareAndSwap(queued, abandoned) {
			return r.Closed()
		}
	}
	// Taken: it runs to the end and is answered.
	return <-q.done
}

// Take returns the writes of batch that are still queued, marking them
// taken (a new slice: batch is NextBatch's, reused); those whose writers
// gave up are dropped. queuedOf returns a write's Queued.
func Take[T any](batch []T, queuedOf func(T) *Queued) []T {
	live := make([]T, 0, len(batch))
	for _, op := range batch {
		if queuedOf(op).state.CompareAndSwap(queued, taken) {
			live = append(live, op)
		}
	}
	return live
}
