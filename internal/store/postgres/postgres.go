// Package postgres is the PostgreSQL backend of the store seam, for running
// several idemctl instances against one shared database: with calls and
// effects in a shared database the unique constraints still hold across
// instances (docs/operations.md, "Running several instances").
//
// It speaks to PostgreSQL through pgx/v5's pool. The design in one screen:
//
//   - Every write runs at READ COMMITTED, the server default. Each statement
//     is either an INSERT ... ON CONFLICT or an UPDATE whose WHERE clause is
//     the whole precondition (status, owner, attempt, lease), so a concurrent
//     change is never lost: PostgreSQL waits for the other writer's row lock,
//     then re-evaluates the WHERE clause against the committed row version
//     and skips the row if it no longer matches. That is why none of these
//     statements can fail with a serialization error (40001 only exists at
//     REPEATABLE READ and above), and why no retry loop is needed around them.
//   - The idempotency key is guarded by the UNIQUE index on calls (principal, idem_key),
//     and the at-most-one effect by the UNIQUE index on effects.call_id: the
//     same last gates as SQLite, now shared by every instance.
//   - "Now" is always the database server's clock, read inside the statement
//     that uses it (see dbNow); instances never send a timestamp. A lease is
//     db-now + duration, and expiry is tested against db-now, so clock skew
//     between the machines running idemctl cannot make one of them take over
//     another's live lease.
//   - The scheduler's pick uses FOR UPDATE SKIP LOCKED so instances claiming
//     at once divide the runnable calls between them instead of queueing on
//     the same rows.
package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemctl/idemctl/internal/store"
)

var _ store.Store = (*Store)(nil)

// defaultMaxConns is the pool size when the URL does not set pool_max_conns.
// pgxpool's own default (max(4, NumCPU)) is too small for a server whose
// HTTP handlers and workers all touch the database at once.
const defaultMaxConns = 16

// defaultLockTimeout bounds how long a statement waits for a row lock when
// Options.BusyTimeout is zero; it plays the role of SQLite's busy timeout.
const defaultLockTimeout = 5 * time.Second

// Session timeouts, set on every connection unless the URL sets them
// (docs/operations.md, "Limits"). An instance frozen in the middle of a
// transaction (stopped, swapped out, cut off from its clients) keeps its
// row locks for as long as its session lives, and every other instance's
// write to those rows waits on it, then fails at its lock timeout: the
// server ends a transaction left idle for defaultIdleInTxTimeout, which
// releases the locks, so a frozen instance blocks the others about one
// lock timeout, not for as long as it is frozen. No statement of this
// package legitimately runs for defaultStatementTimeout (a lock wait is
// bounded by lock_timeout first); one that does is ended, rather than
// holding a connection and its locks for ever.
const (
	defaultIdleInTxTimeout  = 5 * time.Second
	defaultStatementTimeout = 30 * time.Second
)

// answerMargin is what a deadline of this package adds to the database's
// own timeout: long enough for the database's answer at its timeout
// (55P03, 57014) to arrive first, so a slow database is reported by the
// database and its connection kept, and the client-side deadline fires
// only when nothing answers at all.
const answerMargin = time.Second

// Client-side deadlines. The database's timeouts (lock_timeout,
// statement_timeout) bound only what the database runs; they cannot end a
// wait for a database that no longer answers (a partition: no reset, no
// byte back), and pgx waits on such a connection for as long as its
// context lets it. So every operation runs under a deadline of its own:
// a row's read or write (one statement, or one short transaction) under
// the lock timeout + answerMargin (stepTimeout), a listing or an
// aggregate, which may legitimately run for a while, under the statement
// timeout + answerMargin (scanTimeout). pgx's answer to a context that
// ends mid-read is to set the connection's deadline, so the read returns
// and the connection is closed; the pool's acquire honours the context
// too, and a connection being opened gives up after stepTimeout
// (connect_timeout), so no goroutine holds a pool slot for longer.

// Store is a store.Store on a PostgreSQL database. It is safe for
// concurrent use; several Stores (in one process or many) may share one
// database.
type Store struct {
	pool     *pgxpool.Pool
	readOnly bool
	// writes commits the one-round-trip creates and completions in groups
	// (commit.go); nil on a read-only store.
	writes *group
	// before is store.Options.BeforeCommit (failpoint.go); nil in
	// production.
	before    func(w store.Write) error
	closeOnce sync.Once
	// stepTimeout and scanTimeout are the client-side deadlines (above);
	// scanTimeout is 0 when statement_timeout is off.
	stepTimeout, scanTimeout time.Duration
}

// Open connects to the PostgreSQL database at url (a postgres:// URL or a
// key=value connection string; pgxpool's pool_* parameters are honoured)
// and, unless opts.ReadOnly, creates or migrates the schema. Opening
// read-only migrates nothing, requires the schema to exist, and makes every
// transaction read-only.
func Open(ctx context.Context, url string, opts store.Options) (*Store, error) {
	return openWith(ctx, url, opts, nil)
}

// openWith is Open, with configure (if not nil) called on the pool's
// configuration last: tests trace the statements sent with it.
func openWith(ctx context.Context, url string, opts store.Options, configure func(*pgxpool.Config)) (*Store, error) {
	url = lowerScheme(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, ok := params["application_name"]; !ok {
		params["application_name"] = "idemctl"
	}
	// Every statement, including the single-statement writes that run
	// outside an explicit transaction, runs at READ COMMITTED whatever the
	// server's default: the package's correctness argument is made for it
	// (see the package comment), and a stricter level would only add
	// serialization failures.
	params["default_transaction_isolation"] = "read committed"
	// A write that waits longer than this for another transaction's lock
	// fails with 55P03, which we report as ErrUnavailable (503), the same
	// contract as SQLite's busy timeout. Options win over the URL, the URL
	// over the default.
	if opts.BusyTimeout > 0 {
		params["lock_timeout"] = fmt.Sprintf("%dms", opts.BusyTimeout.Milliseconds())
	} else if _, ok := params["lock_timeout"]; !ok {
		params["lock_timeout"] = fmt.Sprintf("%dms", defaultLockTimeout.Milliseconds())
	}
	for name, d := range map[string]time.Duration{
		"idle_in_transaction_session_timeout": defaultIdleInTxTimeout,
		"statement_timeout":                   defaultStatementTimeout,
	} {
		if _, ok := params[name]; !ok {
			params[name] = fmt.Sprintf("%dms", d.Milliseconds())
		}
	}
	// The lock timeout the database applies, wherever it was set: the
	// client-side deadlines are derived from the database's own.
	lockTimeout, ok := pgDuration(params["lock_timeout"])
	if !ok || lockTimeout <= 0 {
		lockTimeout = defaultLockTimeout
	}
	statementTimeout, ok := pgDuration(params["statement_timeout"])
	if !ok {
		statementTimeout = defaultStatementTimeout
	}
	stepTimeout := lockTimeout + answerMargin
	scanTimeout := time.Duration(0)
	if statementTimeout > 0 {
		scanTimeout = statementTimeout + answerMargin
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// Without it, a connection being opened to a database that
		// accepts and then says nothing waits for ever, and pgxpool
		// counts it against pool_max_conns meanwhile.
		cfg.ConnConfig.ConnectTimeout = stepTimeout
	}
	if opts.ReadOnly {
		// Sent in the startup packet, so every transaction on every pooled
		// connection is read-only; a write that slips past the ErrReadOnly
		// guard fails in the server with 25006.
		params["default_transaction_read_only"] = "on"
	}

	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", interpret(ctx, err))
	}
	s := &Store{pool: pool, readOnly: opts.ReadOnly, before: opts.BeforeCommit,
		stepTimeout: stepTimeout, scanTimeout: scanTimeout}
	// pgxpool connects lazily; fail at Open, not at the first request.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", interpret(ctx, err))
	}
	if opts.ReadOnly {
		err = s.checkSchema(ctx)
	} else {
		err = s.migrate(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	if !opts.ReadOnly {
		s.writes = newGroup(pool, lockTimeout, stepTimeout)
	}
	return s, nil
}

// lowerScheme lower-cases a URL's postgres:// or postgresql:// scheme:
// schemes are case-insensitive (RFC 3986) but pgx recognises only the
// lower-case spelling and would read "POSTGRES://..." as key=value pairs.
func lowerScheme(url string) string {
	for _, scheme := range []string{"postgresql://", "postgres://"} {
		if len(url) >= len(scheme) && strings.EqualFold(url[:len(scheme)], scheme) {
			return scheme + url[len(scheme):]
		}
	}
	return url
}

// pgDuration reads a PostgreSQL time setting as the server does: a bare
// number is milliseconds, a unit may follow (ms, s, min, h, d; us). ok is
// false for a value it cannot read.
func pgDuration(v string) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
		i++
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil || n < 0 {
		return 0, false
	}
	units := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	unit, ok := units[strings.TrimSpace(v[i:])]
	if !ok {
		return 0, false
	}
	return time.Duration(n * float64(unit)), true
}

// errNoAnswer is the cause of a client-side deadline (see stepTimeout):
// the database did not answer in time. It is ErrUnavailable (503): the
// operation may or may not have taken effect, and a same-key retry is
// safe either way.
type errNoAnswer struct{ after time.Duration }

func (e errNoAnswer) Error() string {
	return fmt.Sprintf("postgres: %v: no answer from the database within %v", store.ErrUnavailable, e.after)
}

func (e errNoAnswer) Unwrap() error { return store.ErrUnavailable }

// step bounds one read or write of a few rows (stepTimeout); a ctx that
// ends sooner ends it sooner.
func (s *Store) step(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.stepTimeout, errNoAnswer{s.stepTimeout})
}

// scan bounds a listing or an aggregate (scanTimeout; none when the
// statement timeout is off).
func (s *Store) scan(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.scanTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, s.scanTimeout, errNoAnswer{s.scanTimeout})
}

// Ping checks the database is reachable.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.step(ctx)
	defer cancel()
	return interpret(ctx, s.pool.Ping(ctx))
}

// Close closes the pool, waiting for connections in use to be returned.
// It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.writes != nil {
			s.writes.stop()
		}
		s.pool.Close()
	})
	return nil
}

// writable returns ErrReadOnly on a store opened read-only, before any
// round trip to the database.
func (s *Store) writable() error {
	if s.readOnly {
		return store.ErrReadOnly
	}
	return nil
}

// inTx runs fn in a READ COMMITTED transaction, committing if fn returns nil
// and rolling back otherwise. Errors are translated into the store's
// sentinels.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	// READ COMMITTED is also the connection default (see Open); naming it
	// here keeps the transaction's level visible where it matters.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return interpret(ctx, err)
	}
	if err := fn(tx); err != nil {
		// Rollback under WithoutCancel: the caller's ctx may be the reason
		// fn failed, and the connection must still be returned clean; but
		// bounded, as every round trip: the database may not answer.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.stepTimeout)
		_ = tx.Rollback(rctx)
		cancel()
		return interpret(ctx, err)
	}
	return interpret(ctx, tx.Commit(ctx))
}
