package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

// TestCreateWaitsForAliasWriter: the one-round-trip create (createFast)
// takes the key's advisory lock before it checks the aliases, like the
// full transaction. While another transaction holds the lock and has
// inserted the key as an alias (a dedup in flight), a create of that key
// waits, and once the alias commits it answers with the aliased call: the
// key never becomes both an alias and a call's own key.
func TestCreateWaitsForAliasWriter(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	target := create(t, s, "target")

	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	n := newCall(t, "alias")
	if _, err := tx.Exec(t.Context(), lockKeySQL, n.Principal, n.IdemKey); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `INSERT INTO key_aliases (principal, idem_key, call_id, fingerprint, created_at)
VALUES ($1, $2, $3, $4, 0)`, n.Principal, n.IdemKey, target.CallID, n.Fingerprint); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		call store.Call
		out  store.Outcome
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		c, out, err := s.CreateOrGet(context.Background(), n)
		done <- answer{c, out, err}
	}()
	// The create must be waiting on the lock; give it time to get there
	// (if it did not wait, it has already answered Created).
	waitUntil(t, func() bool {
		return scalar[int64](t, s, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND pid <> pg_backend_pid()
  AND application_name = current_setting('application_name')`) > 0
	}, func() string {
		select {
		case a := <-done:
			return "the create did not wait for the alias writer's lock: " + a.out.String()
		default:
			return "no session waits on the advisory lock"
		}
	})
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.out != store.Existing || a.call.CallID != target.CallID {
		t.Fatalf("CreateOrGet of the alias key = %s %v, %v; want Existing %s", a.call.CallID, a.out, a.err, target.CallID)
	}
	if k := scalar[int64](t, s, `SELECT count(*) FROM calls WHERE idem_key = $1`, n.IdemKey); k != 0 {
		t.Fatalf("calls with the alias key as their own key = %d, want 0", k)
	}
}

// waitUntil polls cond every 20 ms for up to 30 s (a generous deadline for
// a loaded machine), failing with why() if it never holds.
func waitUntil(t *testing.T, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(why())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGroupFailsOnlyTheBadWrite: creates committed as one batch, one of
// which fails (its call id is another key's: a unique violation, which
// rolls back PostgreSQL's implicit transaction for the whole batch). The
// bad write alone is refused; every other write of the batch is answered
// Created and its call and audit row are stored.
func TestGroupFailsOnlyTheBadWrite(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	taken := create(t, s, "taken")

	type answer struct {
		call store.Call
		out  store.Outcome
		err  error
	}
	const n = 5
	ops := make([]*groupOp, n)
	answers := make([]answer, n)
	calls := make([]store.NewCall, n)
	for i := range n {
		calls[i] = newCall(t, fmt.Sprintf("k%d", i))
		if i == 2 {
			calls[i].CallID = taken.CallID // the bad write, mid-batch
		}
		ops[i] = s.createOp(calls[i], string(calls[i].ArgsJSON), nil, &answers[i].call, &answers[i].out)
		ops[i].Prepare()
	}
	// One batch, as a committer takes waiting writes.
	s.writes.commit(ops)
	for i, op := range ops {
		answers[i].err = <-op.Answered()
	}
	for i, a := range answers {
		if i == 2 {
			if !errors.Is(interpret(t.Context(), a.err), store.ErrRefused) {
				t.Errorf("the bad write: err = %v, want ErrRefused", a.err)
			}
			continue
		}
		if a.err != nil || a.out != store.Created || a.call.CallID != calls[i].CallID {
			t.Errorf("write %d: %s %v, %v; want Created %s", i, a.call.CallID, a.out, a.err, calls[i].CallID)
		}
	}
	if got := scalar[int64](t, s, `SELECT count(*) FROM calls`); got != n {
		t.Errorf("calls stored = %d, want %d (the first and the four good writes)", got, n)
	}
	if got := scalar[int64](t, s, `SELECT count(*) FROM audit WHERE event = 'created'`); got != n {
		t.Errorf("created audit rows = %d, want %d", got, n)
	}
}

// TestGroupMixesCreatesAndCompletions: creates and completions share one
// group, so one batch may hold both: here a completion between two
// creates (in key order the completion's call id comes first). Each write
// is answered from its own statement's result, and all of them commit in
// one transaction: the rows they wrote carry one xmin.
func TestGroupMixesCreatesAndCompletions(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	done := success(createClaimed(t, s, "running", time.Minute))
	result := string(done.Result)

	var (
		created  [2]store.Call
		outs     [2]store.Outcome
		finished store.Call
	)
	calls := [2]store.NewCall{newCall(t, "a"), newCall(t, "b")}
	ops := []*groupOp{
		s.createOp(calls[0], string(calls[0].ArgsJSON), nil, &created[0], &outs[0]),
		s.completeOp(done, store.StatusSucceeded, &result, nil, &done.Effect.EffectID, store.EventSucceeded,
			done.Effect.Tool, done.Effect.Amount, &finished),
		s.createOp(calls[1], string(calls[1].ArgsJSON), nil, &created[1], &outs[1]),
	}
	for _, op := range ops {
		op.Prepare()
	}
	s.writes.commit(ops)
	for i, op := range ops {
		if err := <-op.Answered(); err != nil {
			t.Fatalf("write %d of the mixed batch: %v", i, err)
		}
	}
	for i := range calls {
		if outs[i] != store.Created || created[i].CallID != calls[i].CallID {
			t.Errorf("create %d: %s %v; want Created %s", i, created[i].CallID, outs[i], calls[i].CallID)
		}
	}
	if finished.Status != store.StatusSucceeded || finished.CallID != done.CallID || finished.EffectID == nil {
		t.Errorf("completion: %+v; want %s succeeded with its effect", finished, done.CallID)
	}
	if n := scalar[int64](t, s, `SELECT count(DISTINCT xmin::text) FROM calls WHERE call_id = ANY($1)`,
		[]string{calls[0].CallID, calls[1].CallID, done.CallID}); n != 1 {
		t.Errorf("the batch's rows were written by %d transactions, want 1", n)
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM effects WHERE call_id = $1`, done.CallID); n != 1 {
		t.Errorf("effects of the completed call = %d, want 1", n)
	}
}

// stuckPool is a SendBatch that blocks until release is closed, then
// fails: committers busy for as long as a test wants.
type stuckPool struct{ entered, release chan struct{} }

var errStuck = errors.New("stuck pool")

func (p stuckPool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	p.entered <- struct{}{}
	<-p.release
	return pgx.FailedBatchResults(b, errStuck)
}

// stuckGroup is a group on a stuckPool, and ops whose reads count the
// writes that ran.
type stuckGroup struct {
	*group
	pool    stuckPool
	ran     chan struct{}
	release func()
}

// newStuckGroup: wait is the group's wait for a committer, gather how long
// a batch waits for the one in flight (gatherWait).
func newStuckGroup(t *testing.T, wait, gather time.Duration) *stuckGroup {
	pool := stuckPool{entered: make(chan struct{}, committers), release: make(chan struct{})}
	g := &stuckGroup{group: newGroup(pool, wait, time.Minute), pool: pool, ran: make(chan struct{}, 1024)}
	g.gatherWait = gather // before any write: the committers read it when gathering
	var once sync.Once
	g.release = func() { once.Do(func() { close(pool.release) }) }
	// Release before stop: a failing test must not leave the committers
	// stuck.
	t.Cleanup(g.stop)
	t.Cleanup(g.release)
	return g
}

func (g *stuckGroup) op() *groupOp {
	return &groupOp{queue: func(*pgx.Batch) {}, read: func(r *results) error {
		g.ran <- struct{}{}
		_, err := r.Exec()
		return err
	}}
}

// submit runs n writes at once, answering each on the channel returned.
func (g *stuckGroup) submit(ctx context.Context, n int) <-chan error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- g.run(ctx, g.op()) }()
	}
	return errs
}

// refused runs one more write and wants it refused with ErrUnavailable
// (a write that a committer took instead would block until release).
func (g *stuckGroup) refused(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case err := <-g.submit(ctx, 1):
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s: err = %v, want ErrUnavailable", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10s: a committer took it", what)
	}
}

// entered waits for the next batch to enter SendBatch.
func (g *stuckGroup) entered(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.pool.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no batch was sent", what)
	}
}

// answered wants every write of answers answered with the stuck batch's
// error, and want writes to have run.
func (g *stuckGroup) answered(t *testing.T, answers []<-chan error, want int) {
	t.Helper()
	g.release()
	for _, errs := range answers {
		for range cap(errs) {
			if err := <-errs; !errors.Is(err, errStuck) {
				t.Errorf("a write taken before: err = %v, want its batch's error", err)
			}
		}
	}
	if n := len(g.ran); n != want {
		t.Errorf("writes that ran = %d, want %d (a refused one must not run)", n, want)
	}
}

// TestGroupSmallBatchWaitsForTheOneInFlight: while a batch is in flight, a
// lone write is not sent beside it at once: it waits for that batch, here
// stuck, for the group's gatherWait, and then goes out.
func TestGroupSmallBatchWaitsForTheOneInFlight(t *testing.T) {
	const gather = 200 * time.Millisecond
	g := newStuckGroup(t, time.Minute, gather)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	answers := []<-chan error{g.submit(ctx, 1)}
	g.entered(t, "the first write")

	start := time.Now()
	answers = append(answers, g.submit(ctx, 1))
	g.entered(t, "a lone write beside a stuck batch")
	if waited := time.Since(start); waited < gather {
		t.Errorf("a lone write went out beside the batch in flight after %v, want it held for %v", waited, gather)
	}
	g.answered(t, answers, 2)
}

// TestGroupFullBatchRunsAlongside: writes waiting while a batch is in
// flight go out in a batch of their own as soon as they are parallelMin,
// without waiting for it (gatherWait is longer than the test).
func TestGroupFullBatchRunsAlongside(t *testing.T) {
	g := newStuckGroup(t, time.Minute, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	answers := []<-chan error{g.submit(ctx, 1)}
	g.entered(t, "the first write")
	for i := 1; i < committers; i++ {
		answers = append(answers, g.submit(ctx, parallelMin))
		g.entered(t, fmt.Sprintf("%d writes beside %d batches in flight", parallelMin, i))
	}
	g.answered(t, answers, 1+(committers-1)*parallelMin)
}

// TestGroupWaitIsBounded: while every committer is busy, a write waits for
// one at most the group's wait (the lock timeout), then fails with
// ErrUnavailable without running; the writes already taken are answered
// once their batches end.
func TestGroupWaitIsBounded(t *testing.T) {
	g := newStuckGroup(t, 100*time.Millisecond, time.Millisecond)
	// A generous context: the bound under test is g.wait, not this.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Each committer takes one write and blocks in SendBatch. One write at
	// a time: writes sent together may share a batch, and then fewer
	// committers would enter than this waits for.
	var answers []<-chan error
	for i := range committers {
		answers = append(answers, g.submit(ctx, 1))
		g.entered(t, fmt.Sprintf("write %d", i))
	}
	g.refused(t, ctx, "a write with every committer busy")
	g.answered(t, answers, committers)
}

// TestGroupAlignsResults: a write that answers before reading all of its
// statements' results (an early decision, or a panic) does not shift the
// results the next write of its batch reads.
func TestGroupAlignsResults(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	early := &groupOp{
		queue: func(b *pgx.Batch) {
			b.Queue(`SELECT 'not a call'`)
			b.Queue(`SELECT 'nor this'`)
		},
		read: func(r *results) error { return nil }, // reads none of them
	}
	early.Prepare()
	var (
		call store.Call
		out  store.Outcome
	)
	n := newCall(t, "k")
	next := s.createOp(n, string(n.ArgsJSON), nil, &call, &out)
	next.key = "z" // after early, in key order
	next.Prepare()
	s.writes.commit([]*groupOp{early, next})
	if err := <-early.Answered(); err != nil {
		t.Fatalf("early write: %v", err)
	}
	if err := <-next.Answered(); err != nil || out != store.Created || call.CallID != n.CallID {
		t.Fatalf("the write after it = %s %v, %v; want Created %s", call.CallID, out, err, n.CallID)
	}
}

// TestCreateFastAnswersReplay: the one-round-trip create answers a known
// key itself, from the statement that tried the insert (the key's call, not
// a second read): Existing for the same request, a conflict for another;
// only an unknown key is created. None of them falls back to the full
// transaction.
func TestCreateFastAnswersReplay(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	first := newCall(t, "k")
	c, out, err := s.createFast(t.Context(), first, "{}", nil)
	if err != nil || out != store.Created || c.CallID != first.CallID {
		t.Fatalf("first create: %+v %v %v, want Created with its call id", c, out, err)
	}
	again := newCall(t, "k") // a fresh call id, as the server makes per request
	again.Fingerprint = first.Fingerprint
	c, out, err = s.createFast(t.Context(), again, "{}", nil)
	if err != nil || out != store.Existing || c.CallID != first.CallID {
		t.Fatalf("replay: %+v %v %v, want Existing with the first call (no slow path)", c, out, err)
	}
	other := newCall(t, "k")
	other.Fingerprint = "another request"
	var ce *store.ConflictError
	if _, _, err := s.createFast(t.Context(), other, "{}", nil); !errors.As(err, &ce) || ce.CallID != first.CallID {
		t.Fatalf("same key, other request: %v, want a conflict naming %s", err, first.CallID)
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM calls`); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}
