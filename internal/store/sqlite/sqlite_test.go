package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storetest"
)

// openAt opens a store at path and closes it when the test ends.
func openAt(t *testing.T, path string, opts store.Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func tempPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "idem.db")
}

// TestStore runs the shared behaviour suite on SQLite: each database is a
// file of its own.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Factory{
		NewDB: tempPath,
		Open: func(ctx context.Context, db string, opts store.Options) (store.Store, error) {
			return Open(ctx, db, opts)
		},
		Exec: func(t *testing.T, db, sql string) {
			t.Helper()
			conn, err := openPool(db, rwParams(DefaultBusyTimeout), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(t.Context(), sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		},
		SchemaBefore: func(t *testing.T, path, migration string) {
			t.Helper()
			if migration != storetest.MigrationNotBefore {
				t.Fatalf("SchemaBefore: unknown migration %q", migration)
			}
			prev := slices.Index(migrations, migrationNotBefore)
			old, err := openPool(path, url.Values{}, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			for _, m := range migrations[:prev] {
				if _, err := old.Exec(m); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := old.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, prev)); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestPragmasOnEveryConnection checks the durability and concurrency
// settings hold on every pooled connection, not just the first: the pools
// open connections whenever they like, so the settings must come from the DSN.
func TestPragmasOnEveryConnection(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{BusyTimeout: 1234 * time.Millisecond})

	type want struct {
		journal   string
		sync      int
		busy      int
		fk        int
		queryOnly int
	}
	check := func(t *testing.T, name string, conns []querier, w want) {
		t.Helper()
		for i, c := range conns {
			var got want
			for _, p := range []struct {
				pragma string
				dst    any
			}{
				{"journal_mode", &got.journal}, {"synchronous", &got.sync}, {"busy_timeout", &got.busy},
				{"foreign_keys", &got.fk}, {"query_only", &got.queryOnly},
			} {
				if err := c.QueryRowContext(t.Context(), "PRAGMA "+p.pragma).Scan(p.dst); err != nil {
					t.Fatalf("%s conn %d: PRAGMA %s: %v", name, i, p.pragma, err)
				}
			}
			if got != w {
				t.Errorf("%s conn %d: pragmas %+v, want %+v", name, i, got, w)
			}
		}
	}

	// Hold every connection of each pool at once so each one is a
	// distinct physical connection.
	hold := func(t *testing.T, n int, get func() (querier, func())) []querier {
		var qs []querier
		for range n {
			q, release := get()
			t.Cleanup(release)
			qs = append(qs, q)
		}
		return qs
	}
	reads := hold(t, readConns, func() (querier, func()) {
		c, err := s.r.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return c, func() { c.Close() }
	})
	check(t, "read", reads, want{journal: "wal", sync: 2, busy: 1234, fk: 1, queryOnly: 1})

	writes := hold(t, 1, func() (querier, func()) {
		c, err := s.w.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return c, func() { c.Close() }
	})
	check(t, "write", writes, want{journal: "wal", sync: 2, busy: 1234, fk: 1, queryOnly: 0})
}

// TestBeginImmediate checks that a write transaction holds the write lock
// from BEGIN: a second connection cannot even start writing meanwhile.
func TestBeginImmediate(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	s := openAt(t, path, store.Options{})
	other := openAt(t, path, store.Options{BusyTimeout: 50 * time.Millisecond})

	conn, err := s.w.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(t.Context(), nil) // BEGIN IMMEDIATE, no statement yet
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()

	_, _, err = other.CreateOrGet(t.Context(), store.NewCall{
		CallID: "c_0000000000000001", IdemKey: "k", Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
	})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("write while another transaction holds the lock: err = %v, want ErrUnavailable", err)
	}
	// Readers are not blocked by the writer (WAL).
	if _, err := other.Stats(t.Context()); err != nil {
		t.Fatalf("read during a write transaction: %v", err)
	}
}

// TestReadOnlyWhileWriting reads through a read-only store while a server
// store keeps writing to the same file, as inspect does against a live server.
func TestReadOnlyWhileWriting(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	rw := openAt(t, path, store.Options{})
	ro := openAt(t, path, store.Options{ReadOnly: true})

	const n = 40
	var wg sync.WaitGroup
	writeErr := make(chan error, 1)
	wg.Go(func() {
		for i := range n {
			_, _, err := rw.CreateOrGet(t.Context(), store.NewCall{
				CallID:  "c_" + strings.Repeat("0", 14) + string(rune('a'+i/26)) + string(rune('a'+i%26)),
				IdemKey: "k" + string(rune('a'+i/26)) + string(rune('a'+i%26)), Fingerprint: "f",
				Tool: "charge", ArgsJSON: []byte(`{"amount":1}`),
			})
			if err != nil {
				writeErr <- err
				return
			}
		}
	})
	var last int64
	for range 200 {
		st, err := ro.Stats(t.Context())
		if err != nil {
			t.Fatalf("read-only Stats during writes: %v", err)
		}
		if st.Calls < last {
			t.Fatalf("calls went backwards: %d then %d", last, st.Calls)
		}
		last = st.Calls
		if last == n {
			break
		}
	}
	wg.Wait()
	select {
	case err := <-writeErr:
		t.Fatalf("writer: %v", err)
	default:
	}
	if st, err := ro.Stats(t.Context()); err != nil || st.Calls != n {
		t.Fatalf("read-only Stats after writes = %+v, %v; want %d calls", st, err, n)
	}
	// The read-only store never created or changed anything: writes fail.
	_, err := ro.ClaimNext(t.Context(), "w", time.Second, 1)
	if !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("read-only ClaimNext: %v, want ErrReadOnly", err)
	}
}

// TestReadOnlyAfterWriterClosed opens read-only once no server runs (the
// WAL and shm files are gone after a clean close).
func TestReadOnlyAfterWriterClosed(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	rw, err := Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rw.CreateOrGet(t.Context(), store.NewCall{
		CallID: "c_0000000000000001", IdemKey: "k", Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	ro := openAt(t, path, store.Options{ReadOnly: true})
	if c, err := ro.GetByKey(t.Context(), store.DefaultPrincipal, "k"); err != nil || c.CallID != "c_0000000000000001" {
		t.Fatalf("GetByKey = %+v, %v", c, err)
	}
}

func TestReadOnlyRefusesMissingOrEmptyDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if s, err := Open(t.Context(), missing, store.Options{ReadOnly: true}); err == nil {
		s.Close()
		t.Fatal("read-only open of a missing file succeeded")
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("read-only open created %s (stat err %v)", missing, err)
	}

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), empty, store.Options{ReadOnly: true})
	if err == nil {
		s.Close()
		t.Fatal("read-only open of a file without schema succeeded")
	}
	if !strings.Contains(err.Error(), "not an idemctl database") {
		t.Fatalf("error %q does not say what is wrong", err)
	}
}

// TestSchemaIdempotentOnReopen reopens a database several times: the schema
// is created once, data survives, and the version stays put.
func TestSchemaIdempotentOnReopen(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	for i := range 3 {
		s, err := Open(t.Context(), path, store.Options{})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if _, _, err := s.CreateOrGet(t.Context(), store.NewCall{
			CallID: "c_000000000000000" + string(rune('1'+i)), IdemKey: "k" + string(rune('1'+i)),
			Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
		}); err != nil {
			t.Fatalf("open %d: create: %v", i, err)
		}
		st, err := s.Stats(t.Context())
		if err != nil || st.Calls != int64(i+1) {
			t.Fatalf("open %d: stats %+v, %v; want %d calls", i, st, err, i+1)
		}
		var v int
		if err := s.r.QueryRowContext(t.Context(), "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
			t.Fatalf("open %d: user_version %d (%v), want %d", i, v, err, schemaVersion)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	s := openAt(t, path, store.Options{})
	if _, err := s.w.ExecContext(t.Context(), "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		if s2, err := Open(t.Context(), path, store.Options{ReadOnly: ro}); err == nil {
			s2.Close()
			t.Fatalf("ReadOnly=%v: opened a database with a newer schema", ro)
		} else if !strings.Contains(err.Error(), "newer") {
			t.Fatalf("ReadOnly=%v: error %q does not say the schema is newer", ro, err)
		}
	}
}

// TestAdoptsReferenceSchema opens a database made by the reference
// implementation idemctl grew from (its tables, user_version 0).
func TestAdoptsReferenceSchema(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	ref, err := openPool(path, url.Values{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Exec(`CREATE TABLE calls (call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE,
		fingerprint TEXT NOT NULL, client_id TEXT, seq INTEGER, tool TEXT NOT NULL, args_json TEXT NOT NULL,
		status TEXT NOT NULL, result_json TEXT, error_json TEXT, attempt INTEGER NOT NULL DEFAULT 0,
		lease_until REAL, owner TEXT, effect_id TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL);
		INSERT INTO calls VALUES ('c_00000000000000aa', 'old', 'f', NULL, NULL, 'charge', '{}', 'pending',
		NULL, NULL, 0, NULL, NULL, NULL, 1.0, 1.0)`); err != nil {
		t.Fatal(err)
	}
	ref.Close()
	s := openAt(t, path, store.Options{})
	if c, err := s.GetByKey(t.Context(), store.DefaultPrincipal, "old"); err != nil || c.CallID != "c_00000000000000aa" {
		t.Fatalf("GetByKey(old) = %+v, %v", c, err)
	}
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", ":memory:", "file::memory:?cache=shared"} {
		if s, err := Open(t.Context(), p, store.Options{}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

func TestOpenFileURIAndOddNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// '?', '#' and '%' mean something in a URI; a plain path must not care.
	odd := filepath.Join(dir, "a?b#c%20d.db")
	s := openAt(t, odd, store.Options{})
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(odd); err != nil {
		t.Fatalf("database not at the literal path: %v", err)
	}
	u := openAt(t, "file:"+filepath.Join(dir, "u.db"), store.Options{})
	if err := u.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "u.db")); err != nil {
		t.Fatalf("file: URI database not created: %v", err)
	}
}

func TestErrorsMapToSentinels(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	s := openAt(t, path, store.Options{})
	if _, err := s.GetAny(t.Context(), "c_nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get unknown: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.GetAny(ctx, "c_nope"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with canceled ctx: %v, want context.Canceled", err)
	}
	// The busy case is covered by TestBeginImmediate.
}

// BenchmarkCreateOrGetParallel measures new-key creation from many
// goroutines: every one is a durable (fsynced) write transaction.
func BenchmarkCreateOrGetParallel(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var (
		mu sync.Mutex
		n  int
	)
	b.SetParallelism(10) // 10 × GOMAXPROCS goroutines, like a busy HTTP server
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			n++
			i := n
			mu.Unlock()
			id := fmt.Sprintf("c_%016x", i)
			if _, _, err := s.CreateOrGet(b.Context(), store.NewCall{
				CallID: id, IdemKey: id, Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestWriteConnectionPragmas: the write connection keeps synchronous=FULL
// (every commit fsynced) and holds the savepoints' sub-journal in memory
// (temp_store=MEMORY) with its larger page cache: the settings the group
// commit's cost depends on.
func TestWriteConnectionPragmas(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []struct {
		pragma string
		want   int
	}{{"synchronous", 2}, {"temp_store", 2}, {"cache_size", writeCacheKiB}} {
		var got int
		if err := s.w.QueryRowContext(context.Background(), "PRAGMA "+p.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != p.want {
			t.Errorf("write connection: PRAGMA %s = %d, want %d", p.pragma, got, p.want)
		}
	}
}

// querier is what *sql.DB and *sql.Conn have in common, for the pragma
// checks above.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// callsIndexes are the indexes of calls (besides those of its PRIMARY KEY
// and UNIQUE constraints), by name, with the statement that made each.
var callsIndexes = []string{
	"idx_calls_created: CREATE INDEX idx_calls_created ON calls(created_at)",
	"idx_calls_final_updated: CREATE INDEX idx_calls_final_updated ON calls (updated_at, status) WHERE status IN ('succeeded', 'failed')",
	"idx_calls_intent: CREATE INDEX idx_calls_intent ON calls (principal, intent, created_at) WHERE intent IS NOT NULL",
	"idx_calls_pending: CREATE INDEX idx_calls_pending ON calls(created_at) WHERE status = 'pending'",
	"idx_calls_principal_created: CREATE INDEX idx_calls_principal_created ON calls(principal, created_at, call_id)",
	"idx_calls_running: CREATE INDEX idx_calls_running ON calls (lease_until) WHERE status = 'running'",
}

// indexesOfCalls lists the indexes of calls in the form of callsIndexes.
func indexesOfCalls(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(),
		`SELECT name || ': ' || sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'calls' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCallsIndexes: the indexes of calls are exactly the ones that earn
// their place (docs/design.md, "The indexes of calls"), partial ones with
// their WHERE: each full one is written by every insert, and by every
// change of its columns, so a new one must be added here on purpose, and
// one no statement reads (idx_calls_client_seq) is dropped by the migration.
func TestCallsIndexes(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	if got := indexesOfCalls(t, s); !slices.Equal(got, callsIndexes) {
		t.Fatalf("indexes of calls:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(callsIndexes, "\n"))
	}
}
