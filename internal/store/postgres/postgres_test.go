package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/store/storetest"
)

// TestStoreSuite runs the shared behaviour suite, the same one SQLite
// passes, on PostgreSQL: each database is a schema of its own.
func TestStoreSuite(t *testing.T) {
	pgtest.BaseURL(t)
	storetest.Run(t, storetest.Factory{
		NewDB: func(t *testing.T) string { return pgtest.Schema(t) },
		Open: func(ctx context.Context, db string, opts store.Options) (store.Store, error) {
			return Open(ctx, db, opts)
		},
		Exec: func(t *testing.T, db, sql string) { pgtest.Exec(t, db, sql) },
		SchemaBefore: func(t *testing.T, db, migration string) {
			if migration != storetest.MigrationNotBefore {
				t.Fatalf("SchemaBefore: unknown migration %q", migration)
			}
			prev := slices.Index(migrations, migrationNotBefore)
			pgtest.Exec(t, db, `CREATE TABLE schema_version (version integer NOT NULL, applied_at double precision NOT NULL)`)
			for v, m := range migrations[:prev] {
				pgtest.Exec(t, db, m)
				pgtest.Exec(t, db, `INSERT INTO schema_version (version, applied_at) VALUES ($1, 0)`, v+1)
			}
		},
	})
}

// TestClaimSkipsLockedRows: while another transaction holds the oldest
// pending call's row lock (as another instance's claim does mid-statement),
// ClaimNext takes the next call at once instead of queueing behind it.
func TestClaimSkipsLockedRows(t *testing.T) {
	u := pgtest.Schema(t)
	// A lock timeout far below the test's patience: without SKIP LOCKED the
	// claim would wait on the row and fail with ErrUnavailable.
	s := open(t, u, store.Options{BusyTimeout: 200 * time.Millisecond})
	first := create(t, s, "first")
	second := create(t, s, "second")

	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM calls WHERE call_id = $1 FOR UPDATE`, first.CallID); err != nil {
		t.Fatal(err)
	}

	got, err := s.ClaimNext(t.Context(), "other-instance", time.Minute, 2)
	if err != nil {
		t.Fatalf("ClaimNext while a row is locked: %v", err)
	}
	if len(got) != 1 || got[0].CallID != second.CallID {
		t.Fatalf("claimed %v, want only %s (the unlocked one)", got, second.CallID)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err = s.ClaimNext(t.Context(), "other-instance", time.Minute, 2)
	if err != nil || len(got) != 1 || got[0].CallID != first.CallID {
		t.Fatalf("ClaimNext after the lock went = %v, %v; want %s", got, err, first.CallID)
	}
}

// TestConcurrentMigrations: four instances starting at once on an empty
// database all open; the schema is created exactly once.
func TestConcurrentMigrations(t *testing.T) {
	u := pgtest.Schema(t)
	const n = 4
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		stores = make([]*Store, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(t.Context(), u, store.Options{})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	s := stores[0]
	if rows := scalar[int64](t, s, `SELECT count(*) FROM schema_version`); rows != int64(schemaVersion) {
		t.Fatalf("schema_version rows = %d, want %d (each migration applied once)", rows, schemaVersion)
	}
	if v := scalar[int](t, s, `SELECT max(version) FROM schema_version`); v != schemaVersion {
		t.Fatalf("schema version = %d, want %d", v, schemaVersion)
	}
	// Every instance works on the one schema.
	for i, st := range stores {
		create(t, st, fmt.Sprintf("k%d", i))
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM calls`); n != int64(len(stores)) {
		t.Fatalf("calls = %d, want %d", n, len(stores))
	}
	// A later start finds the schema current and changes nothing.
	open(t, u, store.Options{})
	if rows := scalar[int64](t, s, `SELECT count(*) FROM schema_version`); rows != int64(schemaVersion) {
		t.Fatalf("schema_version rows after reopen = %d, want %d", rows, schemaVersion)
	}
}

// TestNewerSchemaRefused: an older binary does not write to a schema a
// newer one migrated.
func TestNewerSchemaRefused(t *testing.T) {
	u := pgtest.Schema(t)
	s := open(t, u, store.Options{})
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_version (version, applied_at) VALUES ($1, 0)`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		if _, err := Open(t.Context(), u, store.Options{ReadOnly: ro}); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("Open (read-only %v) on a newer schema: err = %v, want a refusal", ro, err)
		}
	}
}

// TestLeaseUsesDatabaseClock: the lease deadline is the database's now plus
// the lease, and expiry is judged by the database's clock.
func TestLeaseUsesDatabaseClock(t *testing.T) {
	u := pgtest.Schema(t)
	s := open(t, u, store.Options{})
	const lease = 90 * time.Second
	c := create(t, s, "k")
	got, err := s.ClaimNext(t.Context(), "w", lease, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	claimed := got[0]
	// Set from one "now": lease_until - updated_at is the lease exactly.
	if d := *claimed.LeaseUntil - claimed.UpdatedAt; math.Abs(d-lease.Seconds()) > 1e-6 {
		t.Fatalf("lease_until - updated_at = %.9f, want %v", d, lease.Seconds())
	}
	// And that now is the database's: measured against the server's clock
	// right after, the lease has at most a few seconds less to run.
	left := scalar[float64](t, s, `SELECT lease_until - `+dbNow+` FROM calls WHERE call_id = $1`, c.CallID)
	if left > lease.Seconds() || left < lease.Seconds()-5 {
		t.Fatalf("lease left by the database clock = %.3fs, want just under %v", left, lease)
	}

	// Expiry is judged by the database clock alone: a deadline one second
	// in the database's past is expired, one second in its future is live.
	setLease := func(offset float64) {
		t.Helper()
		if _, err := s.pool.Exec(t.Context(), `UPDATE calls SET lease_until = `+dbNow+` + $2 WHERE call_id = $1`, c.CallID, offset); err != nil {
			t.Fatal(err)
		}
	}
	setLease(+60)
	if rec, err := s.RecoverExpired(t.Context()); err != nil || len(rec) != 0 {
		t.Fatalf("RecoverExpired of a lease live by the db clock = %v, %v", rec, err)
	}
	setLease(-1)
	if rec, err := s.RecoverExpired(t.Context()); err != nil || len(rec) != 1 {
		t.Fatalf("RecoverExpired of a lease expired by the db clock = %v, %v", rec, err)
	}
}

// TestSucceedKeepsExistingEffect: if a call somehow already has an effect
// row (planted here by hand; the fencing makes it impossible otherwise),
// Succeed adds none and points the call at the one that exists.
func TestSucceedKeepsExistingEffect(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	c := createClaimed(t, s, "k", time.Minute)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
VALUES ('eff_planted', $1, 'charge', 1, 0)`, c.CallID); err != nil {
		t.Fatal(err)
	}
	done, err := s.Succeed(t.Context(), success(c))
	if err != nil {
		t.Fatal(err)
	}
	if done.EffectID == nil || *done.EffectID != "eff_planted" {
		t.Fatalf("call's effect_id = %v, want eff_planted", done.EffectID)
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM effects WHERE call_id = $1`, c.CallID); n != 1 {
		t.Fatalf("effects of the call = %d, want 1", n)
	}
}

// TestSessionSettings: every pooled connection runs at READ COMMITTED even
// when the URL asks for more, with the lock timeout from the options, and a
// read-only store's connections are read-only.
func TestSessionSettings(t *testing.T) {
	u := pgtest.WithParams(t, pgtest.Schema(t), map[string]string{"default_transaction_isolation": "serializable"})
	rw := open(t, u, store.Options{BusyTimeout: 1234 * time.Millisecond})
	ro := open(t, u, store.Options{ReadOnly: true})
	for _, tc := range []struct {
		s          *Store
		name, want string
	}{
		{rw, "transaction_isolation", "read committed"},
		{rw, "lock_timeout", "1234ms"},
		{rw, "default_transaction_read_only", "off"},
		{ro, "transaction_isolation", "read committed"},
		{ro, "lock_timeout", "5s"},
		{ro, "default_transaction_read_only", "on"},
	} {
		if got := scalar[string](t, tc.s, "SHOW "+tc.name); got != tc.want {
			t.Errorf("%s (read-only %v) = %q, want %q", tc.name, tc.s.readOnly, got, tc.want)
		}
	}
}

// TestReadOnlyNeedsSchema: a read-only store never creates the schema, and
// says so when it is missing.
func TestReadOnlyNeedsSchema(t *testing.T) {
	u := pgtest.Schema(t)
	if _, err := Open(t.Context(), u, store.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "no idemctl schema") {
		t.Fatalf("read-only Open on an empty database: err = %v, want a missing-schema error", err)
	}
	rw := open(t, u, store.Options{})
	if n := scalar[int64](t, rw, `SELECT count(*) FROM schema_version`); n != int64(schemaVersion) {
		t.Fatalf("schema_version rows = %d: the read-only Open must not have created anything", n)
	}
	ro := open(t, u, store.Options{ReadOnly: true})
	// Even a write that bypassed the guard is refused by the server.
	_, err := ro.pool.Exec(t.Context(), `INSERT INTO audit (ts, event) VALUES (0, 'x')`)
	if err = interpret(t.Context(), err); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("raw write on a read-only pool: err = %v, want ErrReadOnly", err)
	}
}

// TestLockWaitPastTimeoutIsUnavailable: a write stuck behind another
// transaction's row lock longer than BusyTimeout reports ErrUnavailable
// (503), like SQLite's busy timeout, and the call is untouched.
func TestLockWaitPastTimeoutIsUnavailable(t *testing.T) {
	u := pgtest.Schema(t)
	s := open(t, u, store.Options{BusyTimeout: 100 * time.Millisecond})
	c := createClaimed(t, s, "k", time.Minute)

	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM calls WHERE call_id = $1 FOR UPDATE`, c.CallID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Succeed(t.Context(), success(c)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Succeed behind a held row lock: err = %v, want ErrUnavailable", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Succeed(t.Context(), success(c)); err != nil || done.Status != store.StatusSucceeded {
		t.Fatalf("Succeed once the lock is gone = %+v, %v", done, err)
	}
}

// TestOpenUnreachableIsUnavailable needs no server: nothing listens on
// port 1 of loopback.
func TestOpenUnreachableIsUnavailable(t *testing.T) {
	_, err := Open(t.Context(), "postgres://postgres@127.0.0.1:1/idemctl?sslmode=disable&connect_timeout=5", store.Options{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open of an unreachable server: err = %v, want ErrUnavailable", err)
	}
}

// TestLowerScheme: an upper-case scheme is still a URL to pgx.
func TestLowerScheme(t *testing.T) {
	for in, want := range map[string]string{
		"POSTGRES://u@h/db":       "postgres://u@h/db",
		"PostgreSQL://u@h/db?x=Y": "postgresql://u@h/db?x=Y",
		"postgres://u@h/DB":       "postgres://u@h/DB",
		"host=h dbname=DB":        "host=h dbname=DB",
	} {
		if got := lowerScheme(in); got != want {
			t.Errorf("lowerScheme(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestInterpret maps driver and server errors to the store's sentinels.
func TestInterpret(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("exec: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name string
		err  error
		want error // nil: passed through, no sentinel
	}{
		{"no rows", pgx.ErrNoRows, store.ErrNotFound},
		{"connection failure", pg("08006"), store.ErrUnavailable},
		{"too many connections", pg("53300"), store.ErrUnavailable},
		{"disk full", pg("53100"), store.ErrUnavailable},
		{"admin shutdown", pg("57P01"), store.ErrUnavailable},
		{"cannot connect now", pg("57P03"), store.ErrUnavailable},
		{"lock timeout", pg("55P03"), store.ErrUnavailable},
		{"serialization failure", pg("40001"), store.ErrUnavailable},
		{"read-only transaction", pg("25006"), store.ErrReadOnly},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), store.ErrUnavailable},
		{"already a sentinel", fmt.Errorf("x: %w", store.ErrFenced), store.ErrFenced},
		{"unique violation is a refusal", pg("23505"), store.ErrRefused},
		{"untranslatable character is a refusal", pg("22P05"), store.ErrRefused},
		{"value too long is a refusal", pg("22001"), store.ErrRefused},
		{"row too big is a refusal", pg("54000"), store.ErrRefused},
		{"undefined table is a bug, not a sentinel", pg("42P01"), nil},
		{"canceled", context.Canceled, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := interpret(t.Context(), tc.err)
			if !errors.Is(got, tc.err) {
				t.Fatalf("interpret lost the original error: %v", got)
			}
			if tc.want != nil && !errors.Is(got, tc.want) {
				t.Fatalf("interpret(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if tc.want == nil {
				if store.IsSentinel(got) {
					t.Fatalf("interpret(%v) = %v, want no sentinel", tc.err, got)
				}
			}
		})
	}
	// A refusal names its SQLSTATE, never the driver's message.
	var refused *store.RefusedError
	if err := interpret(t.Context(), pg("23505")); !errors.As(err, &refused) || refused.Code != "SQLSTATE 23505" {
		t.Fatalf("interpret(23505) = %#v, want a *store.RefusedError with code SQLSTATE 23505", err)
	}
	if interpret(t.Context(), nil) != nil {
		t.Fatal("interpret(nil) != nil")
	}
	// With the caller's context done, its error is the cause reported.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := interpret(ctx, fmt.Errorf("read: %w", io.ErrUnexpectedEOF)); !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("interpret with a canceled context = %v, want context.Canceled", err)
	}
}

// callsIndexes are the indexes of calls as PostgreSQL describes them
// (pg_indexes.indexdef, the schema's name left out), by name.
var callsIndexes = []string{
	"CREATE UNIQUE INDEX calls_pkey ON calls USING btree (call_id)",
	"CREATE UNIQUE INDEX calls_principal_idem_key_key ON calls USING btree (principal, idem_key)",
	"CREATE INDEX idx_calls_created ON calls USING btree (created_at)",
	"CREATE INDEX idx_calls_final_updated ON calls USING btree (updated_at, status) WHERE (status = ANY (ARRAY['succeeded'::text, 'failed'::text]))",
	"CREATE INDEX idx_calls_intent ON calls USING btree (principal, intent, created_at) WHERE (intent IS NOT NULL)",
	"CREATE INDEX idx_calls_pending ON calls USING btree (created_at, call_id) WHERE (status = 'pending'::text)",
	"CREATE INDEX idx_calls_principal_created ON calls USING btree (principal, created_at, call_id)",
	"CREATE INDEX idx_calls_running ON calls USING btree (lease_until) WHERE (status = 'running'::text)",
}

// indexesOfCalls lists the indexes of calls in the form of callsIndexes.
func indexesOfCalls(t *testing.T, s *Store) []string {
	t.Helper()
	return scalar[[]string](t, s, `SELECT array_agg(replace(indexdef, current_schema() || '.', '') ORDER BY indexname)
		FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'calls'`)
}

// TestCallsIndexes: the indexes of calls are exactly the ones that earn
// their place (docs/design.md, "The indexes of calls"), partial ones with
// their WHERE: every insert and every update that is not HOT writes an
// entry into each full one, and into a partial one when the row version
// matches its WHERE, so a new one must be added here on purpose, and one no
// statement reads (idx_calls_client_seq) is dropped by the migration.
func TestCallsIndexes(t *testing.T) {
	s := open(t, pgtest.Schema(t), store.Options{})
	if got := indexesOfCalls(t, s); !slices.Equal(got, callsIndexes) {
		t.Fatalf("indexes of calls:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(callsIndexes, "\n"))
	}
}
