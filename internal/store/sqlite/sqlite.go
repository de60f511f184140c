// Package sqlite is the embedded, default store.Store backend, on
// modernc.org/sqlite (pure Go, driver name "sqlite").
//
// Layout of the design (docs/design.md, "Group commit"):
//   - one file, WAL journal, synchronous=FULL: every commit is fsynced, so a
//     2xx the server sent survives kill -9;
//   - two pools on that file: a write pool of exactly one connection, whose
//     transactions all begin IMMEDIATE, and a read pool of several
//     connections that never write (WAL lets them read while the writer
//     writes);
//   - one committer goroutine owns the write connection and commits the
//     writes waiting for it together, each in a savepoint, with one fsync
//     (group commit, commit.go);
//   - the schema is created or migrated on open, tracked in PRAGMA
//     user_version;
//   - the local clock is the database's clock: SQLite lives on one host.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	// Registers the pure-Go driver under the name "sqlite".

	_ "modernc.org/sqlite"

	"github.com/idemctl/idemctl/internal/store"
)

// DefaultBusyTimeout is how long a write waits for the write lock when
// store.Options.BusyTimeout is zero: wait 5 seconds, then fail with
// store.ErrUnavailable.
const DefaultBusyTimeout = 5 * time.Second

// readConns is the size of the read pool. Reads in WAL mode do not block
// the writer or each other; a few connections let HTTP GETs, /stats and
// ClaimNext's pre-check run side by side on a 2-core machine.
const readConns = 4

// Store is the SQLite backend. It is safe for concurrent use.
type Store struct {
	path     string
	readOnly bool
	busy     time.Duration
	// beforeCommit is Options.BeforeCommit (nil: none).
	beforeCommit func(w store.Write) error
	// w is the write pool: nil when read-only. MaxOpenConns(1): SQLite
	// admits one writer at a time anyway, and queueing writers in Go
	// instead of letting several connections spin on SQLITE_BUSY avoids
	// busy-retry storms and their latency tail (SQLite's busy handler
	// sleeps in growing steps); more writer connections would not help,
	// since commits are fsync-bound either way. That is what the group
	// commit addresses (commit.go; numbers in BENCHMARKS.md, "Notes moved
	// from the code"). Only the committer uses w, after Open has migrated
	// and prepared on it.
	w *sql.DB
	// r is the read pool; its connections are query_only.
	r *sql.DB
	// ckpt is the checkpointer's connection (checkpoint.go); ckptDone is
	// closed when its goroutine has returned (it stops on quit). Both nil
	// when read-only.
	ckpt     *sql.DB
	ckptDone chan struct{}
	// now is the clock. The local clock is the database's clock here.
	now func() float64
	// rq and wq are the hot statements, prepared once (stmts.go); wq is
	// empty when read-only.
	rq readStmts
	wq writeStmts
	// recent holds the keys CreateOrGet saw lately (recent.go).
	recent *recentKeys
	// writes is the group commit's queue (commit.go); quit stops its
	// committer, which closes commitDone when it has returned. All nil
	// when read-only.
	writes     chan *writeOp
	quit       chan struct{}
	commitDone chan struct{}
	closeOnce  sync.Once
	// closed is set by Close; every method then fails with
	// store.ErrUnavailable instead of database/sql's "closed" errors.
	closed atomic.Bool

	// batchConn is the write connection while the committer commits a
	// batch (nil otherwise), hs the hot statements prepared on it, and
	// inHot whether a write is inside Store.hot (hot.go). The committer's
	// alone.
	batchConn *sql.Conn
	hs        hotStmts
	inHot     bool
	// guarded counts down the batches that take savepoints from the start
	// after an optimistic one failed (commit.go); the committer's alone.
	guarded int
	// savepointBatches counts the batches run with savepoints (tests).
	savepointBatches atomic.Int64
	// twin is twins(), set by Open.
	twin map[*sql.Stmt]*driverStmt
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path and brings its
// schema up to date. path is a file path or a "file:" URI. With
// opts.ReadOnly the file is opened with mode=ro, must already hold an
// idemctl schema, and is never written, so it is safe to point at the
// database of a running server.
func Open(ctx context.Context, path string, opts store.Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if isMemory(path) {
		// Each pooled connection would get its own private in-memory
		// database, so writes would be invisible to reads.
		return nil, fmt.Errorf("sqlite: in-memory database %q is not supported; use a file (t.TempDir() in tests)", path)
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	s := &Store{path: path, readOnly: opts.ReadOnly, busy: busy, now: unixNow, beforeCommit: opts.BeforeCommit,
		recent: newRecentKeys()}

	if opts.ReadOnly {
		r, err := openPool(path, roParams(busy), readConns)
		if err != nil {
			return nil, err
		}
		s.r = r
		if err := checkVersion(ctx, r, path); err != nil {
			r.Close()
			return nil, err
		}
		if err := prepareAll(ctx, r, s.rq.list()); err != nil {
			r.Close()
			return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
		}
		return s, nil
	}

	w, err := openPool(path, rwParams(busy), 1)
	if err != nil {
		return nil, err
	}
	s.w = w
	// The write pool's first connection converts the file to WAL and
	// creates the schema before any reader connects.
	if err := migrate(ctx, w, path); err != nil {
		w.Close()
		return nil, err
	}
	r, err := openPool(path, readParams(busy), readConns)
	if err != nil {
		w.Close()
		return nil, err
	}
	s.r = r
	s.rq.withQueue = true
	if err := r.PingContext(ctx); err != nil {
		s.Close()
		return nil, interpret(ctx, "open read pool", err)
	}
	if err := prepareAll(ctx, r, s.rq.list()); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := prepareAll(ctx, w, s.wq.list()); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	ckpt, err := openPool(path, checkpointParams(busy), 1)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.ckpt = ckpt
	if err := s.prepareHot(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, interpret(ctx, "prepare", err))
	}
	s.twin = s.twins()
	s.writes = make(chan *writeOp) // unbuffered: writers queue FIFO on the send
	s.quit = make(chan struct{})
	s.commitDone = make(chan struct{})
	s.ckptDone = make(chan struct{})
	go s.commitLoop()
	go checkpointer(ckpt, s.quit, s.ckptDone)
	return s, nil
}

// Path returns the path or URI the store was opened with.
func (s *Store) Path() string { return s.path }

// Ping checks that the database file can be read (/readyz).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.closedErr("ping"); err != nil {
		return err
	}
	var n int
	// Touch the calls table, not just the connection: a deleted or
	// unreadable file must make /readyz fail.
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM calls LIMIT 1)`).Scan(&n)
	return interpret(ctx, "ping", err)
}

// Close stops the committer (a batch in progress is finished and answered;
// writes still waiting fail with store.ErrUnavailable), then closes the
// prepared statements and both pools.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil // closed already
	}
	if s.quit != nil {
		s.closeOnce.Do(func() { close(s.quit) })
		<-s.commitDone
		<-s.ckptDone
	}
	errs := []error{s.closeHot(), closeAll(s.rq.list()), closeAll(s.wq.list())}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.Close())
	}
	return errors.Join(errs...)
}

// closedErr is store.ErrUnavailable once the store is closed, else nil.
func (s *Store) closedErr(op string) error {
	if s.closed.Load() {
		return closedErr(op)
	}
	return nil
}

// unixNow is the wall clock as Unix seconds, the unit of every time column
// (REAL).
func unixNow() float64 {
	return float64(time.Now().UnixNano()) / 1e9
}

// ----------------------------------------------------------------- DSNs

// rwParams are the write pool's connection parameters. They are DSN
// parameters, not statements run after Open, so that every connection the
// pool ever opens gets them (a pool may replace a connection at any time).
func rwParams(busy time.Duration) url.Values {
	q := commonParams(busy)
	// WAL: readers do not block the writer and the writer does not block
	// readers; crash recovery replays the WAL.
	q.Add("_pragma", "journal_mode(WAL)")
	// FULL: fsync the WAL on every commit. NORMAL would be faster but may
	// lose the last commits on power loss; a 2xx must be durable.
	q.Add("_pragma", "synchronous(FULL)")
	// BEGIN IMMEDIATE for every transaction: the write lock is
	// taken when the transaction starts, not at its first write. With
	// DEFERRED, two transactions could both read "key absent" and then
	// race to upgrade to the write lock; one would fail with SQLITE_BUSY
	// (busy_timeout cannot help a deadlocked upgrade). IMMEDIATE makes
	// every read-then-write (CreateOrGet's select+insert, ClaimNext's
	// select+update) serial, across processes too.
	q.Set("_txlock", "immediate")
	// The group commit runs each write in a SAVEPOINT (commit.go), so SQLite
	// copies every page a write first changes into a sub-journal, to roll
	// that write back alone. With the default temp_store that sub-journal is
	// a temporary file: a pwrite per page, the largest cost of a commit in a
	// CPU profile. In memory it costs a copy. Durability
	// is unchanged: the sub-journal only ever serves ROLLBACK TO inside an
	// open transaction; crash recovery uses the WAL.
	q.Add("_pragma", "temp_store(MEMORY)")
	// A larger page cache for the one connection that writes (the default
	// is 2 MB): the index pages a write touches stay cached on a large
	// database instead of being read again through the OS.
	q.Add("_pragma", "cache_size("+strconv.Itoa(writeCacheKiB)+")")
	// The writer checkpoints only when the checkpointer has fallen far
	// behind (checkpoint.go).
	q.Add("_pragma", "wal_autocheckpoint("+strconv.Itoa(walBackstopPages)+")")
	return q
}

// checkpointParams are the checkpointer's connection's: it reads and
// writes only the WAL and the main file's checkpointed pages, never a
// table, so it needs no transaction settings.
func checkpointParams(busy time.Duration) url.Values {
	q := commonParams(busy)
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	return q
}

// writeCacheKiB is the write connection's page cache, as cache_size
// takes it: negative, in KiB. It is an upper bound, filled only as pages are
// used.
const writeCacheKiB = -32 * 1024

// readParams are the read pool's parameters for a read-write store: the same
// pragmas (so a reader never sees a connection configured differently), and
// query_only so a read connection can never write by mistake.
func readParams(busy time.Duration) url.Values {
	q := commonParams(busy)
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_query_only", "1")
	return q
}

// roParams open the file read-only (mode=ro is SQLite's own URI parameter)
// for inspect. No journal_mode pragma: changing it needs a write, and a WAL
// database stays WAL.
func roParams(busy time.Duration) url.Values {
	q := commonParams(busy)
	q.Set("mode", "ro")
	q.Set("_query_only", "1")
	return q
}

func commonParams(busy time.Duration) url.Values {
	q := url.Values{}
	// busy_timeout: wait this long for a lock held by another connection
	// (another process) before SQLITE_BUSY → store.ErrUnavailable.
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "foreign_keys(1)")
	return q
}

// dsn turns a path or file: URI plus parameters into a file: URI. The file:
// form keeps the query intact for SQLite itself (mode=ro) as well as for
// the driver (_pragma, _txlock).
func dsn(path string, q url.Values) string {
	base := path
	if !strings.HasPrefix(base, "file:") {
		// In a URI, '?' starts the query, '#' the fragment and '%' an escape:
		// escape those so any file name works.
		base = "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + q.Encode()
}

func isMemory(path string) bool {
	return path == ":memory:" || strings.HasPrefix(path, "file::memory:") ||
		(strings.HasPrefix(path, "file:") && strings.Contains(path, "mode=memory"))
}

// openPool opens a pool of at most n connections that are kept open (a
// fresh connection would have to redo the pragmas and re-read the schema).
func openPool(path string, q url.Values, n int) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, q))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

// -------------------------------------------------------- transactions

// readTx runs fn in one read transaction on the read pool, so multi-query
// reads (Stats) see one consistent snapshot.
func (s *Store) readTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return interpret(ctx, op+": begin", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	return interpret(ctx, op, fn(tx))
}
