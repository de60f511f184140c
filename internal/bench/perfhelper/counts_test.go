package main

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// frame is one typed frontend message.
func frame(typ byte, parts ...string) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	out := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(body)+4))
	return append(out, body...)
}

func startup(code uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, 8)
	binary.BigEndian.PutUint32(b[4:], code)
	return b
}

// TestProxyCounts: the proxy counts a pipelined batch as one transaction
// (one Sync) that wrote, an explicit BEGIN … COMMIT as one, a read-only
// query as a transaction that did not write, and FOR UPDATE as no write;
// transaction control is not a statement; every byte is forwarded.
func TestProxyCounts(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	in.Write(startup(sslRequestCode))
	in.Write(startup(196608)) // protocol 3.0, no parameters
	// A pipelined batch: lock, insert (named statement), select; one Sync.
	in.Write(frame('P', "\x00", "SELECT pg_advisory_xact_lock($1)\x00", "\x00\x00"))
	in.Write(frame('B', "\x00", "\x00", "\x00\x00\x00\x00\x00\x00"))
	in.Write(frame('E', "\x00", "\x00\x00\x00\x00"))
	in.Write(frame('P', "s1\x00", "WITH c AS (INSERT INTO calls VALUES ($1) RETURNING *) SELECT * FROM c\x00", "\x00\x00"))
	in.Write(frame('B', "\x00", "s1\x00", "\x00\x00\x00\x00\x00\x00"))
	in.Write(frame('E', "\x00", "\x00\x00\x00\x00"))
	in.Write(frame('B', "\x00", "s1\x00", "\x00\x00\x00\x00\x00\x00")) // the named statement again
	in.Write(frame('E', "\x00", "\x00\x00\x00\x00"))
	in.Write(frame('S'))
	// A read: SELECT … FOR UPDATE SKIP LOCKED is not a write.
	in.Write(frame('P', "\x00", "SELECT id FROM calls FOR UPDATE SKIP LOCKED\x00", "\x00\x00"))
	in.Write(frame('B', "\x00", "\x00", "\x00\x00\x00\x00\x00\x00"))
	in.Write(frame('E', "\x00", "\x00\x00\x00\x00"))
	in.Write(frame('S'))
	// An explicit transaction by simple queries, with a Sync inside.
	in.Write(frame('Q', "begin\x00"))
	in.Write(frame('Q', "UPDATE calls SET status = 'x'\x00"))
	in.Write(frame('S'))
	in.Write(frame('Q', "DELETE FROM audit\x00"))
	in.Write(frame('Q', "commit\x00"))
	var out bytes.Buffer
	var c wireCounter
	sent := in.Bytes()
	if err := readClient(bytes.NewReader(sent), &out, newSession(&c)); err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("readClient: %v, want EOF at the end", err)
	}
	if !bytes.Equal(out.Bytes(), sent) {
		t.Fatalf("forwarded %d bytes, want the %d sent, unchanged", out.Len(), len(sent))
	}
	got := c.snapshot()
	want := wireCounts{Statements: 6, Transactions: 3, WriteTx: 2}
	if got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

func TestProxyURL(t *testing.T) {
	t.Parallel()
	got, err := proxyURL("postgres://u:p@db.example:5432/x?sslmode=prefer&application_name=a", "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if got != "postgres://u:p@127.0.0.1:9/x?application_name=a&sslmode=disable" {
		t.Fatalf("proxy URL %q", got)
	}
	if _, err := proxyURL("host=x dbname=y", "127.0.0.1:9"); err == nil {
		t.Fatal("key=value DSN: want refused (the proxy needs a URL)")
	}
}

func TestStatTicks(t *testing.T) {
	t.Parallel()
	// comm with a space and a parenthesis, utime 123, stime 45.
	line := "4242 (postgres: a) b) S 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 1 0 100 0 0"
	if n, err := statTicks(line); err != nil || n != 168 {
		t.Fatalf("statTicks: %d %v, want 168", n, err)
	}
	if _, err := statTicks("garbage"); err == nil {
		t.Fatal("garbage: want an error")
	}
}

// TestPerCall: row writes are inserts + updates + deletes; index entries are
// (inserts + non-HOT updates) × indexes; backend CPU counts only what a
// backend spent since the first snapshot (a new one all of it).
func TestPerCall(t *testing.T) {
	t.Parallel()
	before := pgSnapshot{Tables: map[string]tableStat{"calls": {Ins: 10, Upd: 5, HotUpd: 1, Indexes: 8}},
		BackendTicks: map[int]int64{1: 100, 2: 50}}
	after := pgSnapshot{Tables: map[string]tableStat{
		"calls": {Ins: 20, Upd: 25, HotUpd: 6, Del: 2, Indexes: 8},
		"audit": {Ins: 30, Indexes: 2},
	}, BackendTicks: map[int]int64{1: 110, 3: 10}}
	c := perCall(before, after, wireCounts{Statements: 40, Transactions: 25, WriteTx: 20}, 10)
	want := pgCost{Statements: 4, WriteTx: 2, Transactions: 2.5, RowWrites: (10 + 20 + 2 + 30) / 10.0,
		IndexEntries: ((10+20-5)*8 + 30*2) / 10.0, BackendCPUms: 20 * 10 / 10.0}
	if c != want {
		t.Fatalf("perCall %+v, want %+v", c, want)
	}
}

// TestEntryChanges: what a row write does to an index: an insert adds the
// entry of a row the index holds, an update of an unindexed column does
// nothing, of an indexed column removes and adds, a row entering or leaving
// a partial index adds or removes one.
func TestEntryChanges(t *testing.T) {
	t.Parallel()
	status := sqliteIndex{name: "status", columns: []string{"status", "lease_until"}}
	pending := sqliteIndex{name: "pending", columns: []string{"created_at", "status"}, where: parsePredicate(" status = 'pending'")}
	final := sqliteIndex{name: "final", columns: []string{"updated_at", "status"}, where: parsePredicate("status IN ('succeeded', 'failed')")}
	intent := sqliteIndex{name: "intent", columns: []string{"intent"}, where: parsePredicate("intent IS NOT NULL")}
	row := func(st string, intent any) map[string]any {
		return map[string]any{"status": st, "intent": intent, "created_at": 1.0}
	}
	for _, tc := range []struct {
		name     string
		ix       sqliteIndex
		old, new map[string]any
		changed  map[string]bool
		want     int
	}{
		{"insert, full index", status, nil, row("pending", nil), nil, 1},
		{"insert into the pending index", pending, nil, row("pending", nil), nil, 1},
		{"insert, not final", final, nil, row("pending", nil), nil, 0},
		{"insert without an intent", intent, nil, row("pending", nil), nil, 0},
		{"insert with an intent", intent, nil, row("pending", "x"), nil, 1},
		{"claim leaves the pending index", pending, row("pending", nil), row("running", nil), map[string]bool{"status": true}, 1},
		{"claim moves the status entry", status, row("pending", nil), row("running", nil), map[string]bool{"status": true}, 2},
		{"success enters the final index", final, row("running", nil), row("succeeded", nil), map[string]bool{"status": true}, 1},
		{"an unindexed column", status, row("running", nil), row("running", nil), map[string]bool{"result_json": true}, 0},
		{"delete from a full index", status, row("succeeded", nil), nil, nil, 1},
	} {
		if got := entryChanges(tc.ix, tc.old, tc.new, tc.changed); got != tc.want {
			t.Errorf("%s: %d entry changes, want %d", tc.name, got, tc.want)
		}
	}
	if p := parsePredicate("status = 'a' OR x > 1"); p != nil {
		t.Errorf("an unknown form parsed as %+v; want nil (every row)", p)
	}
}

// TestCountSQLite: a short run through an in-process server counts each
// finished call's own insert into calls, its effect, and the write
// transactions of the store; the statement trace sees at least the create's
// insert of each call on the write connection, reads on the read pool, and
// at least a page written per commit; every figure is printed.
func TestCountSQLite(t *testing.T) {
	var out bytes.Buffer
	if err := countSQLite(t.Context(), 40, 4, &out); err != nil {
		t.Fatal(err)
	}
	line := out.String()
	for _, want := range []string{"finished=40 ", "calls.insert=1.00", "effects.insert=1.00", "create=1.00", "succeed=1.00"} {
		if !strings.Contains(line, want) {
			t.Fatalf("count-sqlite printed %q, want %q in it", line, want)
		}
	}
	fig := map[string]float64{}
	for _, k := range []string{"write_tx", "statements", "write_statements", "read_statements", "tx_control",
		"row_writes", "index_entries", "commits", "wal_pages", "wal_pages_per_commit"} {
		m := regexp.MustCompile(`(?:^| )` + k + `=([0-9.]+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("count-sqlite printed %q: no %s", line, k)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		if v <= 0 {
			t.Fatalf("%s = %s, want > 0", k, m[1])
		}
		fig[k] = v
	}
	// The create of every call inserts it, on the write connection.
	m := regexp.MustCompile(`write connection: [^;]*\binsert:calls=([0-9.]+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("count-sqlite printed %q: no insert:calls on the write connection", line)
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v < 1 {
		t.Errorf("insert:calls = %s per call on the write connection, want at least 1", m[1])
	}
	// Every store write that changed something ran at least one statement
	// on the write connection.
	if fig["write_statements"] < fig["write_tx"] {
		t.Errorf("write_statements %.2f < write_tx %.2f", fig["write_statements"], fig["write_tx"])
	}
	if d := fig["statements"] - fig["write_statements"] - fig["read_statements"]; d < -0.02 || d > 0.02 {
		t.Errorf("statements %.2f is not write %.2f + read %.2f", fig["statements"], fig["write_statements"], fig["read_statements"])
	}
	if fig["wal_pages_per_commit"] < 1 {
		t.Errorf("wal_pages_per_commit = %.2f, want at least a page per commit", fig["wal_pages_per_commit"])
	}
}

// TestStmtLabel: statements are named by verb and first table, and
// transaction control is told apart.
func TestStmtLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sql, label string
		control    bool
	}{
		{"INSERT INTO calls\n\t(call_id) VALUES (?)", "insert:calls", false},
		{"UPDATE calls SET status = 'x'", "update:calls", false},
		{"SELECT EXISTS (SELECT 1 FROM calls WHERE x)", "select:calls", false},
		{"DELETE FROM audit WHERE ts < ?", "delete:audit", false},
		{"PRAGMA wal_checkpoint(PASSIVE)", "pragma", false},
		{"SAVEPOINT write", "savepoint", true},
		{"RELEASE write", "release", true},
		{"BEGIN IMMEDIATE", "begin", true},
		{"commit", "commit", true},
	} {
		label, control := stmtLabel(tc.sql)
		if label != tc.label || control != tc.control {
			t.Errorf("%q: %q control=%v, want %q control=%v", tc.sql, label, control, tc.label, tc.control)
		}
	}
}

// openTraced opens a pool of one connection on a new file, with the
// counting hooks, as a write connection (the store's write pool's DSN
// parameter) whose WAL is never checkpointed, so the WAL file holds every
// frame written.
func openTraced(t *testing.T) (*sql.DB, string) {
	t.Helper()
	hookDriver()
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db, path
}

// TestTraceCountsStatements: the trace counts each execution of a statement
// on the connection it ran on, once, whether through database/sql or a
// statement prepared once and run again; transaction control apart; a
// statement prepared and never run is not counted. (Not parallel: the
// counts are the process's.)
func TestTraceCountsStatements(t *testing.T) {
	db, _ := openTraced(t)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	var s stmtCounts
	activeStmts.Store(&s)
	defer activeStmts.Store(&stmtCounts{})
	ins, err := db.PrepareContext(ctx, `INSERT INTO t (x) VALUES (?)`)
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	never, err := db.PrepareContext(ctx, `DELETE FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	defer never.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := tx.StmtContext(ctx, ins).ExecContext(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.statements[roleWrite].Load(); got != 7 {
		t.Errorf("%d statements on the write connection, want 7 (5 inserts, 2 selects)", got)
	}
	if got := s.txControl[roleWrite].Load(); got != 2 {
		t.Errorf("%d transaction control statements, want 2 (BEGIN, COMMIT)", got)
	}
	if got := s.statements[roleRead].Load() + s.statements[roleOther].Load(); got != 0 {
		t.Errorf("%d statements on other connections, want 0", got)
	}
	want := "begin=1.00 commit=1.00 insert:t=5.00 select:t=2.00"
	if got := s.breakdown(roleWrite, 1); got != want {
		t.Errorf("breakdown %q, want %q", got, want)
	}
}

// TestTraceCountsWALPages: the pages counted on the write connection are the
// frames in the WAL file (never checkpointed here): 32 bytes of header, then
// per frame 24 bytes and a page.
func TestTraceCountsWALPages(t *testing.T) {
	db, path := openTraced(t)
	ctx := t.Context()
	var s stmtCounts
	activeStmts.Store(&s)
	defer activeStmts.Store(&stmtCounts{})
	for _, q := range []string{
		`CREATE TABLE t (x INTEGER PRIMARY KEY, y TEXT)`,
		`CREATE INDEX t_y ON t (y)`,
		`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 200) INSERT INTO t (y) SELECT printf('%0500d', i) FROM s`,
		`UPDATE t SET y = 'z' WHERE x % 7 = 0`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pageSize int64
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	frames := (fi.Size() - 32) / (24 + pageSize)
	if got := s.walPages.Load(); got != frames || frames < 10 {
		t.Fatalf("%d WAL pages counted, the WAL holds %d frames (want equal, and at least 10)", got, frames)
	}
}
