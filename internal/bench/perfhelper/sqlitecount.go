package main

// count-sqlite: what a finished call costs SQLite, counted by SQLite's own
// hooks in this process (a file-based SQLite has no statistics to read from
// outside): an idemctl server of this source tree on a fresh database,
// distinct-key charge calls through HTTP (bench's load), then the drain;
// every row write seen by the pre-update hook, every write transaction
// seen by the commit hook, and every statement and WAL page seen by the
// statement trace (sqlitetrace.go) of the store's connections, divided by
// the calls that finished.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/idemctl/idemctl/internal/bench"
	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// sqliteIndex is one index: the columns whose change moves its entry (its
// key columns and, for a partial index, the columns its WHERE names), and
// for a partial index the rows it holds.
type sqliteIndex struct {
	name    string
	columns []string
	// where is the partial index's predicate; nil: every row.
	where *predicate
}

// predicate is a partial index's WHERE of the forms this schema uses:
// col = 'v', col IN ('v', …), col IS NOT NULL. Another form is taken as
// true for every row (the count is then an upper bound).
type predicate struct {
	column  string
	values  []string // = or IN; empty with notNull
	notNull bool
}

var (
	whereEq      = regexp.MustCompile(`(?is)^\s*(\w+)\s*=\s*'([^']*)'\s*$`)
	whereIn      = regexp.MustCompile(`(?is)^\s*(\w+)\s+IN\s*\(([^)]*)\)\s*$`)
	whereNotNull = regexp.MustCompile(`(?is)^\s*(\w+)\s+IS\s+NOT\s+NULL\s*$`)
	quoted       = regexp.MustCompile(`'([^']*)'`)
)

func parsePredicate(where string) *predicate {
	if m := whereEq.FindStringSubmatch(where); m != nil {
		return &predicate{column: m[1], values: []string{m[2]}}
	}
	if m := whereIn.FindStringSubmatch(where); m != nil {
		p := &predicate{column: m[1]}
		for _, q := range quoted.FindAllStringSubmatch(m[2], -1) {
			p.values = append(p.values, q[1])
		}
		return p
	}
	if m := whereNotNull.FindStringSubmatch(where); m != nil {
		return &predicate{column: m[1], notNull: true}
	}
	return nil
}

// holds reports whether the index holds a row with these values (by
// column name).
func (ix sqliteIndex) holds(row map[string]any) bool {
	p := ix.where
	if p == nil {
		return true
	}
	v, ok := row[p.column]
	if !ok {
		return true
	}
	if p.notNull {
		return v != nil
	}
	return v != nil && slices.Contains(p.values, fmt.Sprint(v))
}

// entryChanges is how many entries of ix a row write adds or removes: an
// insert adds one where the index holds the new row, a delete removes one,
// an update removes the old and adds the new entry when a column of the
// index changed (2), or adds or removes one when the row enters or leaves a
// partial index.
func entryChanges(ix sqliteIndex, oldRow, newRow map[string]any, changed map[string]bool) int {
	oldIn := oldRow != nil && ix.holds(oldRow)
	newIn := newRow != nil && ix.holds(newRow)
	switch {
	case oldIn && newIn:
		if slices.ContainsFunc(ix.columns, func(c string) bool { return changed[c] }) {
			return 2
		}
		return 0
	case oldIn, newIn:
		return 1
	}
	return 0
}

// sqliteSchema is what the pre-update hook needs to count index entries:
// per table, its column names in order and its indexes.
type sqliteSchema struct {
	columns map[string][]string
	indexes map[string][]sqliteIndex
}

var identRe = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

func readSQLiteSchema(ctx context.Context, db *sql.DB) (*sqliteSchema, error) {
	s := &sqliteSchema{columns: map[string][]string{}, indexes: map[string][]sqliteIndex{}}
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		return nil, err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, t := range tables {
		cols, err := queryStrings(ctx, db, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, t)
		if err != nil {
			return nil, err
		}
		s.columns[t] = cols
		names, err := queryStrings(ctx, db, `SELECT name FROM pragma_index_list(?)`, t)
		if err != nil {
			return nil, err
		}
		for _, ix := range names {
			keyCols, err := queryStrings(ctx, db, `SELECT coalesce(name, '') FROM pragma_index_info(?)`, ix)
			if err != nil {
				return nil, err
			}
			var def sql.NullString
			if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?`, ix).Scan(&def); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, err
			}
			var where *predicate
			if i := strings.Index(strings.ToUpper(def.String), " WHERE "); i >= 0 {
				for _, w := range identRe.FindAllString(def.String[i+7:], -1) {
					if slices.Contains(cols, w) && !slices.Contains(keyCols, w) {
						keyCols = append(keyCols, w)
					}
				}
				where = parsePredicate(def.String[i+7:])
			}
			s.indexes[t] = append(s.indexes[t], sqliteIndex{name: ix, columns: keyCols, where: where})
		}
	}
	return s, nil
}

func queryStrings(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// sqliteCounter accumulates the hooks' counts.
type sqliteCounter struct {
	schema    atomic.Pointer[sqliteSchema]
	rowWrites atomic.Int64
	writeTx   atomic.Int64
	indexes   atomic.Int64
	// writes are the store's writes that changed something, by kind:
	// each is one transaction of its own (a savepoint in a group commit).
	writes  [store.NumWrites]atomic.Int64
	mu      sync.Mutex
	byTable map[string]int64 // "table.op" → row writes
}

// row accounts one row write and the index entries it adds or removes
// (entryChanges), which is what SQLite writes to the indexes.
func (c *sqliteCounter) row(d msqlite.SQLitePreUpdateData) {
	c.rowWrites.Add(1)
	c.mu.Lock()
	if c.byTable == nil {
		c.byTable = map[string]int64{}
	}
	c.byTable[d.TableName+"."+opName(d.Op)]++
	c.mu.Unlock()
	s := c.schema.Load()
	if s == nil {
		return
	}
	cols := s.columns[d.TableName]
	read := func(get func(...any) error) map[string]any {
		vals := make([]any, d.Count())
		if get(vals...) != nil {
			return nil
		}
		row := make(map[string]any, len(vals))
		for i := 0; i < len(vals) && i < len(cols); i++ {
			row[cols[i]] = vals[i]
		}
		return row
	}
	var oldRow, newRow map[string]any
	if d.Op != sqliteInsert {
		oldRow = read(d.Old)
	}
	if d.Op != sqliteDelete {
		newRow = read(d.New)
	}
	changed := map[string]bool{}
	for _, col := range cols {
		if oldRow != nil && newRow != nil && fmt.Sprint(oldRow[col]) != fmt.Sprint(newRow[col]) {
			changed[col] = true
		}
	}
	n := 0
	for _, ix := range s.indexes[d.TableName] {
		n += entryChanges(ix, oldRow, newRow, changed)
	}
	c.indexes.Add(int64(n))
}

// The pre-update hook's ops (SQLITE_INSERT, SQLITE_DELETE, SQLITE_UPDATE).
const (
	sqliteInsert = 18
	sqliteDelete = 9
	sqliteUpdate = 23
)

func opName(op int32) string {
	switch op {
	case sqliteInsert:
		return "insert"
	case sqliteDelete:
		return "delete"
	case sqliteUpdate:
		return "update"
	}
	return fmt.Sprint(op)
}

// breakdown is the row writes per table and op, per finished call.
func (c *sqliteCounter) breakdown(n int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := slices.Sorted(maps.Keys(c.byTable))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.2f", k, float64(c.byTable[k])/float64(n))
	}
	return strings.Join(parts, " ")
}

var registerHooks sync.Once

// hookDriver puts the counting hooks on every connection the driver opens
// from now on: the pre-update and commit hooks, and the statement trace
// (sqlitetrace.go). They feed activeCounter and activeStmts.
func hookDriver() {
	registerHooks.Do(func() {
		msqlite.RegisterConnectionHook(func(conn msqlite.ExecQuerierContext, dsn string) error {
			h, ok := conn.(msqlite.HookRegisterer)
			if !ok {
				return errors.New("count-sqlite: the driver's connections take no hooks")
			}
			h.RegisterPreUpdateHook(func(d msqlite.SQLitePreUpdateData) { activeCounter.Load().row(d) })
			h.RegisterCommitHook(func() int32 { activeCounter.Load().writeTx.Add(1); return 0 })
			return traceConn(conn, dsn)
		})
	})
}

// countSQLite runs n distinct-key charge calls at concurrency c through an
// in-process server and prints the per-call line.
func countSQLite(ctx context.Context, n, c int, w io.Writer) error {
	var cnt sqliteCounter
	hookDriver()
	dir, err := os.MkdirTemp("", "idemctl-count-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idem.db")
	st, err := sqlite.Open(ctx, path, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	schema, err := readSQLiteSchema(ctx, ro)
	ro.Close()
	if err != nil {
		return fmt.Errorf("count-sqlite: reading the schema: %w", err)
	}
	srv, err := server.New(server.Config{
		Config: executor.Config{Workers: executor.DefaultWorkers},
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler),
	}, store.Observe(st, store.Hooks{AfterCommit: func(w store.Write) error {
		activeCounter.Load().writes[w].Add(1)
		return nil
	}}))
	if err != nil {
		return err
	}
	if err := srv.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer srv.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // measurement done
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = bench.Serve(sctx, addr, srv.Handler()) }()
	base := "http://" + addr
	if err := waitHTTP(ctx, base+"/healthz"); err != nil {
		return err
	}
	// Count from here: opening, migrating and the executor's first
	// pass are not a call's cost.
	var stmts stmtCounts
	cnt.schema.Store(schema)
	activeCounter.Store(&cnt)
	activeStmts.Store(&stmts)
	rep, err := bench.Run(ctx, bench.Options{Base: base, N: n, Concurrency: c, DrainTimeout: 30 * time.Second, Output: bench.FormatJSON}, io.Discard)
	activeCounter.Store(&sqliteCounter{})
	activeStmts.Store(&stmtCounts{})
	if err != nil {
		return err
	}
	if !rep.Drained || rep.FinishedDelta <= 0 {
		return fmt.Errorf("count-sqlite: the service did not drain (%d finished)", rep.FinishedDelta)
	}
	f := float64(rep.FinishedDelta)
	var writes int64
	var kinds []string
	for k := range cnt.writes {
		if v := cnt.writes[k].Load(); v > 0 {
			writes += v
			kinds = append(kinds, fmt.Sprintf("%s=%.2f", store.Write(k), float64(v)/f))
		}
	}
	commits := cnt.writeTx.Load()
	perCommit := 0.0
	if commits > 0 {
		perCommit = float64(stmts.walPages.Load()) / float64(commits)
	}
	writeSt, readSt := stmts.statements[roleWrite].Load(), stmts.statements[roleRead].Load()
	_, err = fmt.Fprintf(w, "finished=%d write_tx=%.2f statements=%.2f write_statements=%.2f read_statements=%.2f tx_control=%.2f "+
		"row_writes=%.2f index_entries=%.2f commits=%.2f wal_pages=%.2f wal_pages_per_commit=%.2f "+
		"(writes: %s; rows: %s; write connection: %s; read pool: %s; other connections: %s)\n",
		rep.FinishedDelta, float64(writes)/f, float64(writeSt+readSt)/f, float64(writeSt)/f, float64(readSt)/f,
		float64(stmts.txControl[roleWrite].Load()+stmts.txControl[roleRead].Load())/f,
		float64(cnt.rowWrites.Load())/f, float64(cnt.indexes.Load())/f, float64(commits)/f,
		float64(stmts.walPages.Load())/f, perCommit,
		strings.Join(kinds, " "), cnt.breakdown(rep.FinishedDelta),
		stmts.breakdown(roleWrite, rep.FinishedDelta), stmts.breakdown(roleRead, rep.FinishedDelta),
		stmts.breakdown(roleOther, rep.FinishedDelta))
	return err
}

// activeCounter is the counter the hooks feed: hooks are per driver, for
// every connection it opens, so a run swaps its counter in.
var activeCounter atomic.Pointer[sqliteCounter]

func init() { activeCounter.Store(&sqliteCounter{}) }

func waitHTTP(ctx context.Context, u string) error {
	for range 100 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("count-sqlite: %s did not come up", u)
}
