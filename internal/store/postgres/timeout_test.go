package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

// TestLockTimeoutAnswersTheWholeBatch: while another session holds
// LOCK TABLE calls, every create of a group-commit batch fails at the lock
// timeout with ErrUnavailable (503), and none of them is run again alone to
// wait the timeout once more: each write waits about one lock timeout, not
// one per write of its batch (docs/operations.md, "Limits").
func TestLockTimeoutAnswersTheWholeBatch(t *testing.T) {
	u := pgtest.Schema(t)
	const lockTimeout = 300 * time.Millisecond
	s := open(t, u, store.Options{BusyTimeout: lockTimeout})

	conn, err := pgx.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `LOCK TABLE calls IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	// Writes wait for a committer longer than the lock timeout here, so
	// that those arriving while the committers are stuck are taken
	// together, several to a batch, as under real load (with the store's
	// own wait they may give up first, which proves nothing about
	// batches).
	s.writes.stop()
	s.writes = newGroup(s.pool, time.Minute, s.stepTimeout)
	const writes = 4 * committers
	var (
		wg      sync.WaitGroup
		errs    = make([]error, writes)
		elapsed = make([]time.Duration, writes)
	)
	for i := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, _, errs[i] = s.CreateOrGet(context.Background(), newCall(t, fmt.Sprintf("locked-%d", i)))
			elapsed[i] = time.Since(start)
		}()
	}
	wg.Wait()

	for i, err := range errs {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("create %d under LOCK TABLE: err = %v, want ErrUnavailable", i, err)
		}
		// A write waits for a committer (a round or two of lock
		// timeouts here), then its batch waits the lock timeout once.
		// The bound is loose on purpose: it only has to tell that from
		// one wait per write of the batch.
		if elapsed[i] > 10*lockTimeout {
			t.Errorf("create %d answered after %v, want about the lock timeout (%v)", i, elapsed[i], lockTimeout)
		}
	}
	if n := s.writes.reruns.Load(); n != 0 {
		t.Errorf("%d writes were run again alone after a lock timeout; want none (each would wait the timeout again)", n)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM calls`); n != 0 {
		t.Errorf("%d calls stored by creates that were answered 503", n)
	}
	// The lock gone, the store writes again.
	create(t, s, "after-the-lock")
}

// TestBatchWide: the failures that answer a whole batch are those not
// about one write's rows.
func TestBatchWide(t *testing.T) {
	for code, want := range map[string]bool{
		"55P03": true, "57014": true, "40P01": true, "53100": true, "53300": true,
		"08006": true, "57P01": true,
		"23505": false, "22001": false, "40001": false, "42P01": false,
	} {
		if got := batchWide(&pgconn.PgError{Code: code}); got != want {
			t.Errorf("batchWide(%s) = %v, want %v", code, got, want)
		}
	}
}

// TestSessionTimeouts: every pooled connection has the session timeouts
// that keep a frozen instance from holding row locks for long, and the URL
// can set them otherwise.
func TestSessionTimeouts(t *testing.T) {
	u := pgtest.Schema(t)
	set := pgtest.WithParams(t, u, map[string]string{"statement_timeout": "45s", "idle_in_transaction_session_timeout": "0"})
	for _, tc := range []struct {
		url, stmt, idle string
	}{
		{u, "30s", "5s"},
		{set, "45s", "0"},
	} {
		s := open(t, tc.url, store.Options{})
		// Hold several connections at once, so more than one of the pool's
		// is looked at.
		var conns []*pgxpool.Conn
		for range 3 {
			c, err := s.pool.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for i, c := range conns {
			var stmt, idle string
			if err := c.QueryRow(t.Context(), `SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')`).Scan(&stmt, &idle); err != nil {
				t.Fatal(err)
			}
			if stmt != tc.stmt || idle != tc.idle {
				t.Errorf("connection %d: statement_timeout %q, idle_in_transaction_session_timeout %q; want %q, %q", i, stmt, idle, tc.stmt, tc.idle)
			}
			c.Release()
		}
	}
}

// TestIdleTransactionEnded: with idle_in_transaction_session_timeout set
// (short here, through the URL), a transaction left idle past it (an
// instance frozen mid-write) is ended by the server, and its row locks
// with it: another writer then gets the row.
func TestIdleTransactionEnded(t *testing.T) {
	u := pgtest.WithParams(t, pgtest.Schema(t), map[string]string{"idle_in_transaction_session_timeout": "200ms"})
	s := open(t, u, store.Options{BusyTimeout: 10 * time.Second})
	c := create(t, s, "frozen")
	frozen, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = frozen.Rollback(context.Background()) }()
	if _, err := frozen.Exec(t.Context(), `SELECT 1 FROM calls WHERE call_id = $1 FOR UPDATE`, c.CallID); err != nil {
		t.Fatal(err)
	}
	// The frozen transaction never comes back. Without the timeout this
	// claim would wait on the row for the whole lock timeout and fail.
	got, err := s.ClaimNext(t.Context(), "other", time.Minute, 1)
	for deadline := time.Now().Add(10 * time.Second); err == nil && len(got) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // SKIP LOCKED passes over the row while it is held
		got, err = s.ClaimNext(t.Context(), "other", time.Minute, 1)
	}
	if err != nil || len(got) != 1 {
		t.Fatalf("claim after the idle transaction's timeout = %v, %v; want the call", got, err)
	}
	if _, err := frozen.Exec(context.Background(), `SELECT 1`); err == nil {
		t.Errorf("the idle transaction still works after the timeout")
	}
}
