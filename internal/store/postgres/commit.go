package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/store"
)

// Group commit.
//
// The one-round-trip writes (createFast, completeFast) are handed to a
// group: a few committer goroutines, each of which takes every write that
// is waiting (up to maxGroup), queues their statements into one
// pgx.Batch and sends it. PostgreSQL runs a batch as one implicit
// transaction: one round trip, one commit and one WAL flush for the whole
// group instead of one each. Only once the batch has committed is any of
// its writes answered, so every answer is still durable
// (synchronous_commit stays on).
//
// A statement that fails aborts the implicit transaction, and with it the
// other writes of the batch, which did nothing wrong. Then each write of
// the batch runs again in a batch of its own and is answered with the
// outcome of that run: the failing write fails alone, and no write is told
// it committed unless its own statements did. A write's read function
// starts from scratch when it runs again.
//
// A batch runs under the earliest deadline of its writes (each writer's
// context, bounded by Store.step): a database that stops answering holds
// a committer no longer than the first of its writers is willing to wait,
// and each writer is answered (ErrUnavailable: its outcome unknown) by its
// deadline. Without it a committer, and every write it took, waited on a
// silent connection until the network came back.
//
// A second batch is sent while one is in flight only once it holds
// parallelMin writes (gather). Each batch is a transaction, and a
// transaction's fixed cost (its commit, its WAL flush, the wakeups) is
// paid by the backends' CPU that the writes themselves need: committers
// that each sent whatever was waiting at once sent batches of one or two
// writes under load, and spent that CPU on commits. Waiting for the batch
// in flight costs a write no more than a single committer would make it
// wait, and under a heavy load batches fill and run in parallel. A batch
// that waits on a lock must not hold every other write back, though: a
// write waits for it at most gatherWait (several round trips), then goes
// out beside it.
//
// Creates and completions share one group, so a batch holds both and one
// commit serves them: two groups made twice the transactions. A batch
// holds its writes in the order of their sort key ("k" + the principal
// and idempotency key for a create, the call id for a completion): two
// batches running at once then take the locks they share in the same
// order and cannot deadlock on each other. The two kinds share none: a
// create locks its key (the advisory lock, the key's unique index entry)
// and inserts a row no one else can see yet; a completion locks the row
// of a call committed earlier and inserts its effect.

// maxGroup bounds the writes sent in one batch.
const maxGroup = 64

// committers is how many batches may be in flight at once: on
// a server of several cores, PostgreSQL runs them in parallel, and while
// one batch waits for its WAL flush the next one builds up.
const committers = 4

// parallelMin is the size from which a batch goes out while another is
// in flight (see above); a smaller one waits for that batch to end, or
// for gatherWait.
const parallelMin = 16

// gatherWait bounds how long a batch waits for the one in flight.
const gatherWait = 20 * time.Millisecond

// results are what a groupOp's read sees of the batch: its own statements'
// results, in the order it queued them. They record the first statement
// that failed (anything but no rows): then the batch was rolled back.
type results struct {
	br pgx.BatchResults
	// read counts the results the current write has read.
	read int
	// first is the first failure read (anything but no rows).
	first error
}

func (r *results) note(err error) {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && r.first == nil {
		r.first = err
	}
}

// Exec reads the next result as an Exec.
func (r *results) Exec() (pgconn.CommandTag, error) {
	r.read++
	tag, err := r.br.Exec()
	r.note(err)
	return tag, err
}

// QueryRow reads the next result as a one-row query.
func (r *results) QueryRow() pgx.Row {
	r.read++
	return row{r, r.br.QueryRow()}
}

type row struct {
	r   *results
	row pgx.Row
}

func (w row) Scan(dest ...any) error {
	err := w.row.Scan(dest...)
	w.r.note(err)
	return err
}

// groupOp is one write waiting for a committer.
type groupOp struct {
	store.Queued
	// key orders the writes of a batch (see above).
	key string
	// queue adds the write's statements to b.
	queue func(b *pgx.Batch)
	// read reads their results and decides the write's answer. It must
	// only set state that a later run sets again.
	read func(r *results) error
	// deadline is the writer's (group.run); zero: none.
	deadline time.Time
}

// group is the committers of the one-round-trip writes.
type group struct {
	pool batchSender
	// wait bounds how long a write waits to be taken by a committer: the
	// lock timeout, as for a write waiting on a lock in the database.
	wait time.Duration
	// bound is a batch's deadline when none of its writes has one.
	bound time.Duration
	ops   chan *groupOp
	quit  chan struct{}
	wg    sync.WaitGroup
	// reruns counts the writes run again alone after their batch failed
	// (tests assert a batch-wide failure causes none).
	reruns atomic.Int64

	// intake is held by the one committer building a batch: the others
	// wait for it rather than each taking a write or two off ops.
	intake sync.Mutex
	// gatherWait is the package's, but for tests.
	gatherWait time.Duration
	// mu guards inFlight, the batches sent and not yet answered, and
	// settled, closed (and replaced) whenever one of them ends.
	mu       sync.Mutex
	inFlight int
	settled  chan struct{}
}

func newGroup(pool batchSender, wait, bound time.Duration) *group {
	g := &group{pool: pool, wait: wait, bound: bound, ops: make(chan *groupOp), quit: make(chan struct{}),
		settled: make(chan struct{}), gatherWait: gatherWait}
	g.wg.Add(committers)
	for range committers {
		go g.loop()
	}
	return g
}

// stop ends the committers once the batches in flight are answered; a
// write submitted afterwards fails with ErrUnavailable.
func (g *group) stop() {
	close(g.quit)
	g.wg.Wait()
}

// run submits op and waits for its answer (store.Submit): a write not yet
// taken by a committer gives up with its ctx, or with ErrUnavailable after
// g.wait; once taken, it runs to its end and is answered (its statements
// run under a context without the cancellation: cancelling one statement
// would abort the whole batch's transaction; but under the deadline of the
// batch's earliest writer, see above).
func (g *group) run(ctx context.Context, op *groupOp) error {
	op.deadline, _ = ctx.Deadline()
	return store.Submit(ctx, g.ops, op, &op.Queued, g.quit, g.wait, store.Refusals{
		Busy:     g.busyErr,
		Closed:   func() error { return fmt.Errorf("postgres: %w: store closed", store.ErrUnavailable) },
		Canceled: func(err error) error { return err },
	})
}

// busyErr is a write's answer when no committer took it within g.wait
// (made only then: formatting it costs more than queueing a write).
func (g *group) busyErr() error {
	return fmt.Errorf("postgres: %w: no committer free for %v", store.ErrUnavailable, g.wait)
}

func (g *group) loop() {
	defer g.wg.Done()
	batch := make([]*groupOp, 0, maxGroup)
	for {
		var ok bool
		g.intake.Lock()
		if batch, ok = store.NextBatch(g.ops, g.quit, batch, maxGroup); ok {
			batch, ok = g.gather(batch)
		}
		if ok {
			g.mu.Lock()
			g.inFlight++
			g.mu.Unlock()
		}
		g.intake.Unlock()
		if !ok {
			// The writes gathered and not sent are still queued: their
			// writers see quit and are answered that the store closed.
			return
		}
		g.commit(batch)
		g.mu.Lock()
		g.inFlight--
		close(g.settled)
		g.settled = make(chan struct{})
		g.mu.Unlock()
	}
}

// gather adds to batch the writes that arrive while another batch is in
// flight, until none is, batch holds parallelMin writes or g.gatherWait
// has passed (the rule above). ok is false once quit is closed.
func (g *group) gather(batch []*groupOp) (_ []*groupOp, ok bool) {
	var expired <-chan time.Time
	for len(batch) < parallelMin {
		g.mu.Lock()
		busy, settled := g.inFlight > 0, g.settled
		g.mu.Unlock()
		if !busy {
			break
		}
		if expired == nil {
			t := time.NewTimer(g.gatherWait)
			defer t.Stop()
			expired = t.C
		}
		select {
		case op := <-g.ops:
			batch = append(batch, op)
		case <-settled:
		case <-expired:
			return batch, true
		case <-g.quit:
			return batch, false
		}
	}
	return batch, true
}

// commit sends ops as one batch and answers each of them.
func (g *group) commit(ops []*groupOp) {
	live := store.Take(ops, func(op *groupOp) *store.Queued { return &op.Queued })
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, func(a, b *groupOp) int { return strings.Compare(a.key, b.key) })
	errs, failed := g.send(live)
	var pgErr *pgconn.PgError
	if len(live) > 1 && errors.As(failed, &pgErr) && !batchWide(pgErr) {
		// A statement failed, so PostgreSQL rolled the whole batch back:
		// each write runs again on its own. (A failure below SQL, such as
		// a lost connection, leaves the outcome unknown, as it does for a
		// write sent alone: every write of the batch reports it.) A
		// failure that is not about one write's rows (batchWide) is every
		// write's answer as it stands: run alone, each would meet it again
		// and wait for it again, one after another.
		for i, op := range live {
			g.reruns.Add(1)
			alone, _ := g.send([]*groupOp{op})
			errs[i] = alone[0]
		}
	}
	for i, op := range live {
		op.Answer(errs[i])
	}
}

// send runs ops as one batch on the pool under the earliest of their
// deadlines (g.bound from now when none has one). A batch cut off by it
// answers each of its writes with errNoAnswer: the batch may have
// committed, or not.
func (g *group) send(ops []*groupOp) ([]error, error) {
	// The writers' deadlines are Store.step's, g.bound from their start.
	deadline := time.Now().Add(g.bound)
	for _, op := range ops {
		if !op.deadline.IsZero() && op.deadline.Before(deadline) {
			deadline = op.deadline
		}
	}
	ctx, cancel := context.WithDeadlineCause(context.Background(), deadline, errNoAnswer{g.bound})
	defer cancel()
	errs, failed := sendBatch(ctx, g.pool, ops)
	if failed != nil && ctx.Err() != nil {
		failed = fmt.Errorf("%w (%v)", context.Cause(ctx), failed)
		for i := range errs {
			if errs[i] != nil {
				errs[i] = failed
			}
		}
	}
	return errs, failed
}

// batchSender sends a pipelined batch: the pool (one implicit
// transaction), or an explicit transaction (sendInTx).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendBatch runs ops in one batch on q and returns each one's answer and,
// if the batch failed, why (on the pool: then it did not commit).
func sendBatch(ctx context.Context, q batchSender, ops []*groupOp) (errs []error, failed error) {
	errs = make([]error, len(ops))
	b := &pgx.Batch{}
	stmts := make([]int, len(ops))
	for i, op := range ops {
		n := b.Len()
		op.queue(b)
		stmts[i] = b.Len() - n
	}
	r := &results{br: q.SendBatch(ctx, b)}
	for i, op := range ops {
		r.read = 0
		errs[i] = read(op, r)
		// A read that returned early left some of its results unread:
		// read them, so the next write reads its own.
		for ; r.read < stmts[i]; r.read++ {
			_, err := r.br.Exec()
			r.note(err)
		}
	}
	// Close reads what is left; the batch committed only if no statement
	// failed.
	if err := r.br.Close(); err != nil && r.first == nil {
		r.first = err
	}
	if r.first != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("write batch rolled back: %w", r.first)
			}
		}
	}
	return errs, r.first
}

// read runs op's read function, turning a panic (a bug) into its error.
func read(op *groupOp, r *results) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("postgres: write panicked (a bug): %v\n%s", v, debug.Stack())
		}
	}()
	return op.read(r)
}
