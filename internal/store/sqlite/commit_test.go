package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/idemctl/idemctl/internal/store"
)

// auditOp is a write that appends one audit row with event name and then
// returns fail (nil for success).
func auditOp(s *Store, name string, fail error) *writeOp {
	op := &writeOp{ctx: context.Background(), name: name,
		fn: func(ctx context.Context, tx *sql.Tx) error {
			if err := s.insertAudit(ctx, tx, 1, "c_batch", name, ""); err != nil {
				return err
			}
			return fail
		}}
	op.Prepare()
	return op
}

// batchEvents returns the audit events of call c_batch, in order.
func batchEvents(t *testing.T, s *Store) []string {
	t.Helper()
	evs, err := s.Audit(t.Context(), "c_batch", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

// countCommits counts the commits of the write connection.
func countCommits(t *testing.T, s *Store) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	conn, err := s.w.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Raw(func(dc any) error {
		dc.(interface{ RegisterCommitHook(sqlite.CommitHookFn) }).RegisterCommitHook(func() int32 {
			n.Add(1)
			return 0 // 0: let the commit proceed
		})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestBatchIsolatesFailedWrite commits three writes as one batch, the middle
// one failing: the other two are committed, with one commit, and nothing of
// the failed one remains. Each write gets its own answer.
func TestBatchIsolatesFailedWrite(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	commits := countCommits(t, s)
	boom := errors.New("boom")
	ops := []*writeOp{auditOp(s, "a", nil), auditOp(s, "b", boom), auditOp(s, "c", nil)}
	s.commitBatch(ops)

	for i, want := range []error{nil, boom, nil} {
		if got := <-ops[i].Answered(); !errors.Is(got, want) || (want == nil && got != nil) {
			t.Errorf("op %s answered %v, want %v", ops[i].name, got, want)
		}
	}
	if got := batchEvents(t, s); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("audit after the batch = %v, want [a c]: the failed write rolled back alone", got)
	}
	if n := commits.Load(); n != 1 {
		t.Fatalf("%d commits for one batch, want 1", n)
	}
}

// TestBatchLostTransactionRetriesTheOthers makes a write end the batch's
// whole transaction, as SQLite does itself on some errors (disk full, I/O).
// That write fails; the innocent writes of the batch, the one before it
// (rolled back with the batch) and the one after it (never run), are tried
// again each on its own and committed exactly once. Nobody is told
// "committed" for a write that is not in the database.
func TestBatchLostTransactionRetriesTheOthers(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	killer := &writeOp{ctx: context.Background(), name: "killer",
		fn: func(ctx context.Context, tx *sql.Tx) error {
			if err := s.insertAudit(ctx, tx, 1, "c_batch", "killer", ""); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `ROLLBACK`); err != nil {
				t.Errorf("ROLLBACK inside the batch: %v", err)
			}
			return errors.New("transaction lost")
		}}
	killer.Prepare()
	ops := []*writeOp{auditOp(s, "before", nil), killer, auditOp(s, "after", nil)}
	s.commitBatch(ops)
	for _, op := range ops {
		err := <-op.Answered()
		if op == killer && err == nil {
			t.Errorf("the write that lost the batch answered success")
		}
		if op != killer && err != nil {
			t.Errorf("innocent op %s answered %v, want it committed on its own", op.name, err)
		}
	}
	if got := batchEvents(t, s); len(got) != 2 || got[0] != "before" || got[1] != "after" {
		t.Fatalf("audit after a lost batch = %v, want [before after], each once", got)
	}
	// The committer goes on with a fresh transaction.
	if _, _, err := s.CreateOrGet(t.Context(), store.NewCall{
		CallID: "c_0000000000000001", IdemKey: "k", Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
	}); err != nil {
		t.Fatalf("write after a lost batch: %v", err)
	}
}

// stopCommitter stops s's committer and gives s a queue nobody serves, so a
// test can play the committer's part step by step.
func stopCommitter(t *testing.T, s *Store) {
	t.Helper()
	s.closeOnce.Do(func() { close(s.quit) })
	<-s.commitDone
	s.quit = make(chan struct{})
	s.writes = make(chan *writeOp)
	// commitDone stays closed: Close finds the committer already gone.
}

// TestWriteAbandonedWhileQueuedNeverRuns: a write that is still waiting
// when the busy timeout passes (or its context ends) fails with
// ErrUnavailable (or the context's error) and never runs afterwards, even
// though the committer had already received it.
func TestWriteAbandonedWhileQueuedNeverRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cancel bool
		want   error
	}{
		{"busy timeout", false, store.ErrUnavailable},
		{"context cancelled", true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openAt(t, tempPath(t), store.Options{BusyTimeout: 20 * time.Millisecond})
			if tc.cancel {
				s.busy = time.Hour
			}
			stopCommitter(t, s)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var ran atomic.Bool
			res := make(chan error, 1)
			go func() {
				res <- s.sideTx(ctx, "t", func(context.Context, *sql.Tx) error { ran.Store(true); return nil })
			}()
			op := <-s.writes // received, not yet taken
			if tc.cancel {
				cancel()
			}
			if err := <-res; !errors.Is(err, tc.want) {
				t.Fatalf("writeTx = %v, want %v", err, tc.want)
			}
			s.commitBatch([]*writeOp{op})
			if ran.Load() {
				t.Fatal("an abandoned write ran")
			}
		})
	}
}

// TestWriteTakenRunsToTheEnd: once the committer has taken a write, its
// writer waits for the real outcome even past the busy timeout, so a
// committed write is never reported as failed.
func TestWriteTakenRunsToTheEnd(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{BusyTimeout: 10 * time.Millisecond})
	stopCommitter(t, s)
	res := make(chan error, 1)
	go func() {
		res <- s.sideTx(t.Context(), "slow", func(ctx context.Context, tx *sql.Tx) error {
			time.Sleep(50 * time.Millisecond) // longer than the busy timeout
			return s.insertAudit(ctx, tx, 1, "c_batch", "slow", "")
		})
	}()
	op := <-s.writes
	s.commitBatch([]*writeOp{op})
	if err := <-res; err != nil {
		t.Fatalf("writeTx of a taken write = %v, want its own result (nil)", err)
	}
	if got := batchEvents(t, s); len(got) != 1 {
		t.Fatalf("audit = %v, want the slow write committed", got)
	}
}

// TestBatchPanicRollsBackAndAnswersAll injects a write that panics into a
// batch of three. The committer must not wedge on the open transaction:
// the batch is rolled back, every write is answered with an error (none is
// told "committed"), the panicking one's error says it panicked, and the
// store goes on: a later write commits and Close returns. The write panics
// either between its statements or inside one run on the driver connection
// (Store.hot), where sql.Conn.Raw would take the panic for a broken
// connection and close it under the open transaction.
func TestBatchPanicRollsBackAndAnswersAll(t *testing.T) {
	t.Parallel()
	for _, inHot := range []bool{false, true} {
		t.Run(fmt.Sprintf("inHot=%v", inHot), func(t *testing.T) {
			t.Parallel()
			testBatchPanic(t, inHot)
		})
	}
}

func testBatchPanic(t *testing.T, inHot bool) {
	s := openAt(t, tempPath(t), store.Options{})
	bomb := &writeOp{ctx: context.Background(), name: "bomb",
		fn: func(ctx context.Context, tx *sql.Tx) error {
			if err := s.insertAudit(ctx, tx, 1, "c_batch", "bomb", ""); err != nil {
				return err
			}
			if inHot {
				return s.hot(func(h *hotStmts) error {
					if err := h.exec(h.insertAudit, 1.0, "c_batch", "bomb in hot", ""); err != nil {
						return err
					}
					panic("kaboom")
				})
			}
			panic("kaboom")
		}}
	bomb.Prepare()
	ops := []*writeOp{auditOp(s, "before", nil), bomb, auditOp(s, "after", nil)}
	returned := make(chan any, 1)
	go func() {
		defer func() { returned <- recover() }()
		s.commitBatch(ops)
	}()
	select {
	case p := <-returned:
		if p != nil {
			t.Fatalf("commitBatch let the panic through: %v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("commitBatch never returned after a write panicked: the committer is wedged")
	}
	for _, op := range ops {
		select {
		case err := <-op.Answered():
			if err == nil {
				t.Errorf("op %s answered success, but its batch held a panicking write", op.name)
			}
			if op == bomb && (err == nil || !strings.Contains(err.Error(), "kaboom")) {
				t.Errorf("the panicking write's error = %v, want it to carry the panic value", err)
			}
		default:
			t.Errorf("op %s was never answered", op.name)
		}
	}
	if got := batchEvents(t, s); len(got) != 0 {
		t.Fatalf("audit after a panicked batch = %v, want nothing committed", got)
	}
	// The store is usable: a later write (through the real committer)
	// commits, and Close returns.
	if _, _, err := s.CreateOrGet(t.Context(), store.NewCall{
		CallID: "c_0000000000000002", IdemKey: "k", Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
	}); err != nil {
		t.Fatalf("write after a panicked batch: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs after a panicked batch")
	}
}

// TestCancelledWriterGetsItsOwnOutcome: a completion whose caller's
// context is cancelled after the committer took it still reports what the
// write itself did. A fenced completion is ErrFenced and leaves its fenced
// audit row, not "context canceled" and no trace.
func TestCancelledWriterGetsItsOwnOutcome(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	ctx := t.Context()
	if _, _, err := s.CreateOrGet(ctx, store.NewCall{
		CallID: "c_0000000000000003", IdemKey: "k", Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	// A lease of zero lapses at once, so "new" takes the call over.
	stale, err := s.ClaimNext(ctx, "old", 0, 1)
	if err != nil || len(stale) != 1 {
		t.Fatalf("claim = %v, %v", stale, err)
	}
	if fresh, err := s.ClaimNext(ctx, "new", time.Minute, 1); err != nil || len(fresh) != 1 {
		t.Fatalf("takeover = %v, %v", fresh, err)
	}

	stopCommitter(t, s)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := s.Succeed(wctx, store.Completion{Lease: store.Lease{CallID: stale[0].CallID, Owner: "old", Attempt: stale[0].Attempt},
			Result: []byte(`{}`)})
		res <- err
	}()
	op := <-s.writes
	// The caller gives up while its write runs: once taken, not before.
	inner := op.fn
	op.fn = func(ctx context.Context, tx *sql.Tx) error { cancel(); return inner(ctx, tx) }
	s.commitBatch([]*writeOp{op})
	select {
	case audit := <-s.writes: // the fenced audit, in a write of its own
		s.commitBatch([]*writeOp{audit})
		err = <-res
	case err = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("Succeed never returned")
	}
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale Succeed with a cancelled context = %v, want ErrFenced", err)
	}
	evs, aerr := s.Audit(ctx, stale[0].CallID, 0)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if last := evs[len(evs)-1]; last.Event != store.EventFenced {
		t.Fatalf("last audit = %+v, want the fenced row", last)
	}
}

// TestBatchWithoutFailureTakesNoSavepoint: a batch whose writes all
// succeed runs them without savepoints (optimistic), all committed with one
// commit, in order.
func TestBatchWithoutFailureTakesNoSavepoint(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	stopCommitter(t, s)
	commits := countCommits(t, s)
	ops := []*writeOp{auditOp(s, "a", nil), auditOp(s, "b", nil), auditOp(s, "c", nil)}
	s.commitBatch(ops)
	for _, op := range ops {
		if err := <-op.Answered(); err != nil {
			t.Fatalf("op %s: %v", op.name, err)
		}
	}
	if got := batchEvents(t, s); strings.Join(got, " ") != "a b c" {
		t.Fatalf("audit after the batch = %v, want [a b c]", got)
	}
	if n := s.savepointBatches.Load(); n != 0 {
		t.Fatalf("%d batches took savepoints, want 0: no write failed", n)
	}
	if n := commits.Load(); n != 1 {
		t.Fatalf("%d commits for one batch, want 1", n)
	}
}

// TestBatchAfterAFailureTakesSavepoints: a failing write sends its batch
// back to be run with savepoints (TestBatchIsolatesFailedWrite checks the
// outcome), and the next guardedBatches batches take savepoints from the
// start, so a run of failing writes does not make every batch run twice;
// after them, batches are optimistic again.
func TestBatchAfterAFailureTakesSavepoints(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	stopCommitter(t, s)
	batch := func(fail error) {
		ops := []*writeOp{auditOp(s, "ok", nil), auditOp(s, "maybe", fail)}
		s.commitBatch(ops)
		for _, op := range ops {
			<-op.Answered()
		}
	}
	batch(errors.New("boom"))
	if n := s.savepointBatches.Load(); n != 1 {
		t.Fatalf("after a failing write: %d batches with savepoints, want 1 (its batch run again)", n)
	}
	for range guardedBatches {
		batch(nil)
	}
	if n := s.savepointBatches.Load(); n != 1+guardedBatches {
		t.Fatalf("%d batches with savepoints, want %d: the %d after a failure take them from the start",
			n, 1+guardedBatches, guardedBatches)
	}
	batch(nil)
	if n := s.savepointBatches.Load(); n != 1+guardedBatches {
		t.Fatalf("%d batches with savepoints, want %d: optimistic again after the guarded ones", n, 1+guardedBatches)
	}
}

// TestBatchWithFailpointsTakesSavepoints: with a before-commit hook (the
// failpoints) every batch takes savepoints, so a failure injected into a
// write fires once, for that write, and the batch is not run twice.
func TestBatchWithFailpointsTakesSavepoints(t *testing.T) {
	t.Parallel()
	var hooked atomic.Int64
	s := openAt(t, tempPath(t), store.Options{BeforeCommit: func(store.Write) error { hooked.Add(1); return nil }})
	stopCommitter(t, s)
	ops := []*writeOp{auditOp(s, "a", nil), auditOp(s, "b", nil)}
	s.commitBatch(ops)
	for _, op := range ops {
		if err := <-op.Answered(); err != nil {
			t.Fatalf("op %s: %v", op.name, err)
		}
	}
	if n := s.savepointBatches.Load(); n != 1 {
		t.Fatalf("%d batches with savepoints, want 1: failpoints armed", n)
	}
}
