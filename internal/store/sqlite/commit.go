package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Group commit.
//
// Every write of the store is a writeOp handed to one committer goroutine,
// which owns the single write connection. The committer runs the writes that
// are waiting in one BEGIN IMMEDIATE transaction, each inside a SAVEPOINT of
// its own, and commits them with one fsync; only then does it answer them.
//
// What each write sees is unchanged: it is atomic (a failing write is rolled
// back to its savepoint and the others go on), writes run one after another
// in arrival order, each sees the ones before it, and none is answered before
// its commit is durable (synchronous=FULL). What changes is the cost: a
// commit's fsync and its WAL frames (the calls, index and audit pages the
// writes share) are paid once per batch instead of once per write. With 20
// HTTP handlers and 8 workers writing, the write connection was mostly
// waiting on fsync.
//
// The queue is an unbuffered channel, so the writes are taken in the order
// they arrived (Go's channel senders queue FIFO), where database/sql's pool
// hands a freed connection to a random waiter: a worker's completion no
// longer waits behind however many HTTP creates happen to be waiting.

// maxBatch bounds the writes committed together, so one batch's transaction
// stays short even when many writers wait.
const maxBatch = 64

// writeOp is one write waiting for the committer.
type writeOp struct {
	store.Queued
	ctx  context.Context
	name string
	fn   func(ctx context.Context, tx *sql.Tx) error
	// before is the write's before-commit hook (failpoint.go), nil if none.
	before func() error
}

// writeTx runs fn as the write w of store.Store (writeOp below), with
// Options.BeforeCommit for w.
func (s *Store) writeTx(ctx context.Context, w store.Write, fn func(ctx context.Context, tx *sql.Tx) error) error {
	var before func() error
	if h := s.beforeCommit; h != nil {
		before = func() error { return h(w) }
	}
	return s.commitTx(ctx, w.String(), before, fn)
}

// sideTx runs fn as a write of the store's own that is none of
// store.Store's writes (the fenced audit row, the page limit): through the
// committer as any write, without a before-commit hook.
func (s *Store) sideTx(ctx context.Context, name string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.commitTx(ctx, name, nil, fn)
}

// commitTx runs fn as one atomic write and returns once it is committed (or
// has failed). Waiting to be taken by the committer counts against the busy
// timeout, like waiting for SQLite's lock does: a write that cannot start
// within it is store.ErrUnavailable (503), not an unbounded queue. Once the
// committer has taken it, the write runs to the end, under ctx without its
// cancellation: a cancelled statement interrupts the connection, which
// would roll back the other writes of the batch with it.
func (s *Store) commitTx(ctx context.Context, name string, before func() error, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if s.readOnly {
		return fmt.Errorf("sqlite %s: %w", name, store.ErrReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return interpret(ctx, name, err)
	}
	op := &writeOp{ctx: ctx, name: name, fn: fn, before: before}
	return store.Submit(ctx, s.writes, op, &op.Queued, s.quit, s.busy, store.Refusals{
		Busy:     func() error { return busyErr(name, s.busy) },
		Closed:   func() error { return closedErr(name) },
		Canceled: func(err error) error { return interpret(ctx, name, err) },
	})
}

func busyErr(name string, busy time.Duration) error {
	return fmt.Errorf("sqlite %s: %w: write lock busy for more than %v", name, store.ErrUnavailable, busy)
}

func closedErr(name string) error {
	return fmt.Errorf("sqlite %s: %w: store closed", name, store.ErrUnavailable)
}

// commitLoop is the committer: it takes the waiting writes, up to maxBatch,
// and commits them together, until quit is closed.
func (s *Store) commitLoop() {
	defer close(s.commitDone)
	batch := make([]*writeOp, 0, maxBatch)
	for {
		var ok bool
		if batch, ok = store.NextBatch(s.writes, s.quit, batch, maxBatch); !ok {
			return
		}
		s.commitBatch(batch)
	}
}

// panicError is a write whose function panicked: a bug, reported to the
// writer (and from there to its log) as an error rather than wedging the
// committer with the batch's transaction open.
type panicError struct {
	name  string
	value any
	stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("write %s panicked (a bug): %v\n%s", e.name, e.value, e.stack)
}

// run runs one write's function in tx, under its context without the
// cancellation (a cancelled statement interrupts the connection, which
// would roll back the other writes of the batch with it), and turns a
// panic into a *panicError.
func run(op *writeOp, tx *sql.Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{name: op.name, value: v, stack: debug.Stack()}
		}
	}()
	return withBeforeCommit(context.WithoutCancel(op.ctx), op, tx) // op.fn, then its hook (failpoint.go)
}

// runAlone runs one write in a transaction of its own on conn: the retry
// of a write whose batch was lost through another write's fault.
func runAlone(conn *sql.Conn, op *writeOp) error {
	bg := context.Background()
	tx, err := conn.BeginTx(bg, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := run(op, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// guardedBatches is how many batches after one whose optimistic run failed
// take savepoints from the start (commitBatch).
const guardedBatches = 64

// optimistic runs ops in tx without savepoints until one fails, and
// returns its index (len(ops): none failed), its error in errs.
func optimistic(ops []*writeOp, errs []error, tx *sql.Tx) int {
	for i, op := range ops {
		if errs[i] = run(op, tx); errs[i] != nil {
			return i
		}
	}
	return len(ops)
}

// commitBatch runs ops in one transaction and answers each of them: every
// write of a batch that was not committed gets an error, whatever happened
// (a failed statement, a lost transaction, a panic).
func (s *Store) commitBatch(ops []*writeOp) {
	live := store.Take(ops, func(op *writeOp) *store.Queued { return &op.Queued })
	if len(live) == 0 {
		return
	}
	errs := make([]error, len(live))
	answer := func() {
		for i, op := range live {
			// The write ran to its end under its context without the
			// cancellation, so its error is its own outcome: a caller
			// that gave up meanwhile must still learn it (a fenced
			// completion stays ErrFenced and gets its audit row), not
			// read its own "context canceled" instead.
			op.Answer(interpret(context.WithoutCancel(op.ctx), op.name, errs[i]))
		}
	}
	defer answer()
	failAll := func(err error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}

	// The committer's own context: one writer's cancellation must not
	// stop the others' transaction. BEGIN waits at most busy_timeout for
	// another process's write lock.
	bg := context.Background()
	conn, err := s.w.Conn(bg)
	if err != nil {
		failAll(err)
		return
	}
	defer conn.Close()
	// The hot statements (hot.go) run on conn while the batch is committed.
	s.batchConn = conn
	defer func() { s.batchConn = nil }()
	// BEGIN IMMEDIATE (the pool's _txlock): the write lock is ours from
	// here to Commit.
	tx, err := conn.BeginTx(bg, nil)
	if err != nil {
		failAll(fmt.Errorf("begin: %w", err))
		return
	}
	// A panic outside the writes' own functions (which run recovers) would
	// otherwise leave tx open, and the deferred conn.Close would wait on it
	// for ever: roll back and fail every write not already answered with
	// its own error. Deferred after conn.Close, so it runs before it.
	defer func() {
		if v := recover(); v != nil {
			_ = tx.Rollback()
			failAll(fmt.Errorf("write batch rolled back: %w",
				&panicError{name: "commit", value: v, stack: debug.Stack()}))
		}
	}()
	if len(live) == 1 {
		// Alone: the transaction is the write's own, no savepoint needed.
		if errs[0] = run(live[0], tx); errs[0] != nil {
			_ = tx.Rollback() // the error that matters is fn's
			return
		}
	} else {
		if s.guarded == 0 && s.beforeCommit == nil {
			// Optimistic: no savepoints. Most batches have no failing
			// write, and then a savepoint and its release per write
			// (two statements, and a copy of every page a write
			// first touches into the statement journal) bought nothing.
			// A write that fails may have written part of itself, which
			// only a savepoint could undo alone: the batch is rolled
			// back, nothing of it committed, and run again below with
			// savepoints (each write's function starts from scratch, as
			// runAlone's does). With failpoints armed every batch takes
			// savepoints, so an injected failure fires once per write.
			i := optimistic(live, errs, tx)
			if i == len(live) {
				if err := tx.Commit(); err != nil {
					failAll(fmt.Errorf("commit: %w", err))
				}
				return
			}
			if p := (*panicError)(nil); errors.As(errs[i], &p) {
				_ = tx.Rollback()
				failAll(fmt.Errorf("write batch rolled back: %w", errs[i]))
				return
			}
			_ = tx.Rollback() // may be gone already (an I/O error ends it)
			clear(errs)
			// Failing writes tend to come in runs (a client sending a
			// conflicting body again and again): the next batches take
			// savepoints at once, instead of running twice each.
			s.guarded = guardedBatches
			if tx, err = conn.BeginTx(bg, nil); err != nil {
				failAll(fmt.Errorf("begin: %w", err))
				return
			}
		} else if s.guarded > 0 {
			s.guarded--
		}
		s.savepointBatches.Add(1)
		for i, op := range live {
			if err := s.hot(func(h *hotStmts) error { return h.exec(h.savepoint) }); err != nil {
				_ = tx.Rollback()
				failAll(fmt.Errorf("savepoint: %w", err))
				return
			}
			errs[i] = run(op, tx)
			if p := (*panicError)(nil); errors.As(errs[i], &p) {
				// A panicking write may have left the transaction
				// anywhere: undo the whole batch, and tell every write
				// so (none of them was committed).
				_ = tx.Rollback()
				failAll(fmt.Errorf("write batch rolled back: %w", errs[i]))
				return
			}
			err := s.hot(func(h *hotStmts) error {
				if errs[i] != nil {
					// Undo this write only, then pop its savepoint.
					if err := h.exec(h.rollbackTo); err != nil {
						return err
					}
				}
				return h.exec(h.release)
			})
			if err != nil {
				// Some errors (disk full, I/O) make SQLite roll back the
				// whole transaction: the writes before this one are gone
				// too, and those after it never ran. This write's own
				// error ends it; the others are innocent and are tried
				// once more, each in a transaction of its own, in arrival
				// order (a write's function starts from scratch when run
				// again: each sets its results anew). Each is answered
				// with the outcome of that try, so none is told
				// "committed" unless its own transaction committed.
				_ = tx.Rollback()
				errs[i] = fmt.Errorf("write batch rolled back: %w", errors.Join(errs[i], err))
				for j, other := range live {
					// A write before this one that failed on its own
					// keeps its own answer: it was undone to its
					// savepoint, and nothing of it was ever committed.
					if j != i && (j > i || errs[j] == nil) {
						errs[j] = runAlone(conn, other)
					}
				}
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		failAll(fmt.Errorf("commit: %w", err))
	}
}
