package main

// The statements SQLite ran and the WAL pages it wrote, for count-sqlite.
//
// modernc.org/sqlite exports a connection hook but no statement hook, and
// the store runs its hot statements on the driver connection (sql.Conn.Raw),
// past anything a wrapper of database/sql would see. So the count comes from
// SQLite itself: sqlite3_trace_v2 with SQLITE_TRACE_PROFILE on every
// connection the driver opens, which SQLite calls once for every statement
// execution that ran (stepped at least once), when it ends. The driver keeps
// the connection's sqlite3* unexported; it is read by reflection (a field
// read, never a write), and a driver without that field fails count-sqlite
// instead of counting nothing.
//
// WAL pages: SQLite's pager counts the pages it writes, which in WAL mode are
// the frames a commit appends (SQLITE_DBSTATUS_CACHE_WRITE, the driver's
// Status); it is read at the end of each statement of the write connection,
// inside the callback, so the pages a COMMIT wrote are its own.
// sqlite3_wal_hook would give the WAL's size after each commit instead, but
// installing it replaces the write connection's wal_autocheckpoint backstop
// (store/sqlite/checkpoint.go), which would change what is measured.

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// connRole is which of the store's connections a statement ran on.
type connRole int

const (
	// roleWrite is the write pool's one connection (the committer's).
	roleWrite connRole = iota
	// roleRead is a connection of the read pool.
	roleRead
	// roleOther is any other connection: the checkpointer's, whose PRAGMA
	// wal_checkpoint runs on a timer and not per call.
	roleOther
	numRoles
)

func (r connRole) String() string {
	return [...]string{"write", "read", "other"}[r]
}

// roleOf tells a connection's role from its DSN: the store opens its write
// pool with _txlock=immediate and its read pool with _query_only=1
// (store/sqlite/sqlite.go, rwParams and readParams).
func roleOf(dsn string) connRole {
	switch {
	case strings.Contains(dsn, "_query_only=1"):
		return roleRead
	case strings.Contains(dsn, "_txlock=immediate"):
		return roleWrite
	}
	return roleOther
}

// tracedConn is one connection the trace callback reports for.
type tracedConn struct {
	role   connRole
	status msqlite.DBStatus
	// pagesWritten is the connection's SQLITE_DBSTATUS_CACHE_WRITE at its
	// last statement's end. Only the connection's own callback uses it,
	// under the connection's mutex.
	pagesWritten int
}

// traced maps a connection's sqlite3* (the callback's context argument) to
// its tracedConn. A new connection at a freed connection's address replaces
// the entry: every connection is registered when it opens.
var traced sync.Map

// stmtCounts is what the callback adds up for one count-sqlite run.
type stmtCounts struct {
	// statements by role, transaction control excluded; txControl by role.
	statements [numRoles]atomic.Int64
	txControl  [numRoles]atomic.Int64
	// walPages are the pages the write connection's statements wrote.
	walPages atomic.Int64
	mu       sync.Mutex
	byLabel  [numRoles]map[string]int64 // stmtLabel → executions
}

func (s *stmtCounts) add(role connRole, sql string) {
	label, control := stmtLabel(sql)
	if control {
		s.txControl[role].Add(1)
	} else {
		s.statements[role].Add(1)
	}
	s.mu.Lock()
	if s.byLabel[role] == nil {
		s.byLabel[role] = map[string]int64{}
	}
	s.byLabel[role][label]++
	s.mu.Unlock()
}

// breakdown is the executions of role's connections by label, per finished
// call.
func (s *stmtCounts) breakdown(role connRole, n int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byLabel[role]
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.2f", k, float64(m[k])/float64(n))
	}
	return strings.Join(parts, " ")
}

// stmtLabel names a statement by its verb and the table it names first
// ("insert:calls", "update:calls", "select:calls", "savepoint"), and tells
// transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE),
// which the statement counts leave out, as perfhelper pgproxy does.
func stmtLabel(sql string) (label string, control bool) {
	if len(sql) > 400 {
		sql = sql[:400]
	}
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "empty", false
	}
	verb := strings.ToLower(f[0])
	after := func(word string) string {
		for i := 1; i+1 < len(f); i++ {
			if strings.EqualFold(f[i], word) {
				return strings.ToLower(strings.Trim(f[i+1], "()`\"'[];,"))
			}
		}
		return ""
	}
	var table string
	switch verb {
	case "begin", "commit", "end", "rollback", "savepoint", "release":
		return verb, true
	case "insert", "replace":
		table = after("into")
	case "update":
		if len(f) > 1 {
			table = strings.ToLower(f[1])
		}
	case "delete", "select", "with":
		table = after("from")
	}
	if table == "" {
		return verb, false
	}
	return verb + ":" + table, false
}

// activeStmts is the run's stmtCounts: the trace is per connection, for the
// whole process, so a run swaps its counts in (like activeCounter).
var activeStmts atomic.Pointer[stmtCounts]

func init() { activeStmts.Store(&stmtCounts{}) }

// traceConn turns the trace on for a new connection of the driver.
func traceConn(conn any, dsn string) error {
	db, err := rawDB(conn)
	if err != nil {
		return err
	}
	status, ok := conn.(msqlite.DBStatus)
	if !ok {
		return fmt.Errorf("count-sqlite: the driver's connection %T has no Status", conn)
	}
	traced.Store(db, &tracedConn{role: roleOf(dsn), status: status})
	tls := libc.NewTLS()
	defer tls.Close()
	if rc := sqlite3.Xsqlite3_trace_v2(tls, db, sqlite3.SQLITE_TRACE_PROFILE, cFunc(traceCallback), db); rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("count-sqlite: sqlite3_trace_v2: code %d", rc)
	}
	return nil
}

// rawDB is the sqlite3* of a modernc.org/sqlite driver connection (its
// unexported field db).
func rawDB(conn any) (uintptr, error) {
	v := reflect.ValueOf(conn)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("db"); f.IsValid() && f.Kind() == reflect.Uintptr && f.Uint() != 0 {
			return uintptr(f.Uint()), nil
		}
	}
	return 0, fmt.Errorf("count-sqlite: the driver's connection %T has no sqlite3* to trace", conn)
}

// cFunc is a Go function as the C function pointer the transpiled SQLite
// calls (the driver's own cFuncPointer: a top-level function's value is a
// pointer to its code pointer, which does not move).
func cFunc[T any](f T) uintptr {
	return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f}))
}

// traceCallback is SQLite's xCallback for SQLITE_TRACE_PROFILE: p is the
// statement that ended, ctx the connection's sqlite3*. It runs on the
// goroutine that ran the statement, inside the connection's mutex.
func traceCallback(tls *libc.TLS, mask uint32, ctx, p, _ uintptr) int32 {
	if mask != sqlite3.SQLITE_TRACE_PROFILE {
		return 0
	}
	v, ok := traced.Load(ctx)
	if !ok {
		return 0
	}
	c := v.(*tracedConn)
	s := activeStmts.Load()
	s.add(c.role, libc.GoString(sqlite3.Xsqlite3_sql(tls, p)))
	if c.role == roleWrite {
		// The statement runs on this connection now, so its Status (which
		// allocates on the connection's TLS, tls here) is ours to call.
		if n, _, err := c.status.Status(msqlite.DBStatusCacheWrite, false); err == nil {
			s.walPages.Add(int64(n - c.pagesWritten))
			c.pagesWritten = n
		}
	}
	return 0
}
