package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// The writer's hot statements, run on the driver connection itself.
//
// Every write runs on the committer goroutine, which is SQLite's throughput
// limit: whatever it spends per statement outside SQLite is lost to every
// call. Through database/sql, a statement inside the batch's transaction
// costs a tx.StmtContext (a new *sql.Stmt, registered in the pool's
// dependency map and released at the end of the transaction), the
// conversion of each argument by reflection, and for a query a *sql.Rows
// with its own goroutine (a transaction's context can be cancelled, so
// database/sql watches every query in one), then convertAssign for each
// column of each row. A CPU profile of create, claim and succeed
// (BenchmarkWriterCycle) put database/sql's own share at about an eighth
// of the writer.
//
// So the statements every call runs through the writer (the savepoints of
// the group commit, the audit row, the completions, the claim) are
// prepared once on the write connection's driver connection and run there
// through sql.Conn.Raw, which database/sql allows while the batch's
// transaction is open on that connection: SQLite's transaction state is
// the connection's, so they run inside it exactly as through the *sql.Tx.
// Arguments are bound and columns read as the driver gives them, without
// reflection. Rarely run writes stay on database/sql.

// driverStmt is a statement prepared on the driver connection.
type driverStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// hotStmts are the hot statements, prepared on the driver connection dc.
// Only the committer uses them (and Open and Close, when it is not
// running), so they need no lock.
type hotStmts struct {
	dc any // the driver connection they were prepared on; nil before

	savepoint, release, rollbackTo driverStmt
	insertAudit, insertAudits      driverStmt
	insertEffect, insertDelivery   driverStmt
	succeed, fail, scheduleRetry   driverStmt
	callByID, leaseOf              driverStmt
	callByKey, callByIntent        driverStmt
	insertCall, retryReset         driverStmt
	insertNewCall                  driverStmt
	aliasByKey, tombstoneByKey     driverStmt
	pickPending, pickExpired       driverStmt
	claim                          driverStmt

	// Buffers reused by every statement: the arguments and a row.
	args []driver.NamedValue
	row  []driver.Value
}

func (h *hotStmts) list() []struct {
	dst   *driverStmt
	query string
} {
	return []struct {
		dst   *driverStmt
		query string
	}{
		{&h.savepoint, `SAVEPOINT write`},
		{&h.release, `RELEASE write`},
		{&h.rollbackTo, `ROLLBACK TO write`},
		{&h.insertAudit, sqlInsertAudit},
		{&h.insertAudits, sqlInsertAudits},
		{&h.insertEffect, sqlInsertEffect},
		{&h.insertDelivery, sqlInsertDelivery},
		{&h.succeed, sqlSucceed},
		{&h.fail, sqlFail},
		{&h.scheduleRetry, sqlScheduleRetry},
		{&h.callByID, sqlCallByID},
		{&h.callByKey, sqlCallByKey},
		{&h.callByIntent, sqlCallByIntent},
		{&h.insertCall, sqlInsertCall},
		{&h.insertNewCall, sqlInsertNewCall},
		{&h.retryReset, sqlRetryReset},
		{&h.aliasByKey, sqlAliasByKey},
		{&h.tombstoneByKey, sqlTombstoneByKey},
		{&h.leaseOf, sqlLeaseOf},
		{&h.pickPending, sqlPickPending},
		{&h.pickExpired, sqlPickExpired},
		{&h.claim, sqlClaim},
	}
}

// on makes sure the statements are prepared on dc: database/sql replaces a
// connection only when the driver reports it unusable, and then the
// statements are prepared again on the new one.
func (h *hotStmts) on(dc any) error {
	if h.dc == dc {
		return nil
	}
	// The old connection, if any, is closed: its statements went with it.
	h.dc = nil
	pc, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return fmt.Errorf("driver connection %T cannot prepare statements", dc)
	}
	for _, p := range h.list() {
		st, err := pc.PrepareContext(context.Background(), p.query)
		if err != nil {
			h.closeAll()
			return fmt.Errorf("%w\n%s", err, p.query)
		}
		ds, ok := st.(driverStmt)
		if !ok {
			st.Close()
			h.closeAll()
			return fmt.Errorf("driver statement %T cannot run with a context", st)
		}
		*p.dst = ds
	}
	h.dc = dc
	return nil
}

// closeAll finalizes the statements prepared so far. It must run before the
// connection closes: SQLite keeps a connection with unfinalized statements
// open (sqlite3_close_v2), and its file with it.
func (h *hotStmts) closeAll() error {
	var errs []error
	for _, p := range h.list() {
		if *p.dst != nil {
			errs = append(errs, (*p.dst).Close())
			*p.dst = nil
		}
	}
	h.dc = nil
	return errors.Join(errs...)
}

// bind sets h.args to args as the driver takes them. The values are those
// the hot statements bind (strings, numbers, bool, nil, and pointers to
// them for nullable columns); anything else goes through database/sql's own
// conversion.
func (h *hotStmts) bind(args []any) ([]driver.NamedValue, error) {
	h.args = h.args[:0]
	for i, a := range args {
		var v driver.Value
		switch x := a.(type) {
		case nil, string, int64, float64, bool, []byte:
			v = x
		case int:
			v = int64(x)
		case *string:
			if x != nil {
				v = *x
			}
		case *int64:
			if x != nil {
				v = *x
			}
		case json.RawMessage:
			v = jsonArg(x)
		default:
			var err error
			if v, err = driver.DefaultParameterConverter.ConvertValue(a); err != nil {
				return nil, fmt.Errorf("argument %d: %w", i+1, err)
			}
		}
		h.args = append(h.args, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	return h.args, nil
}

// exec runs a statement that returns no rows.
func (h *hotStmts) exec(st driverStmt, args ...any) error {
	nv, err := h.bind(args)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(context.Background(), nv)
	return err
}

// query runs a statement and calls each for every row it returns (the
// slice is reused: each must copy what it keeps).
func (h *hotStmts) query(st driverStmt, each func(row []driver.Value) error, args ...any) (err error) {
	nv, err := h.bind(args)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(context.Background(), nv)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}()
	n := len(rows.Columns())
	if cap(h.row) < n {
		h.row = make([]driver.Value, n)
	}
	row := h.row[:n]
	for {
		switch err := rows.Next(row); {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		if err := each(row); err != nil {
			return err
		}
	}
}

// queryCall runs a statement that returns at most one call (callColumns);
// sql.ErrNoRows when it returns none.
func (h *hotStmts) queryCall(st driverStmt, args ...any) (store.Call, error) {
	var (
		c     store.Call
		found bool
	)
	err := h.query(st, func(row []driver.Value) error {
		if found {
			return nil // one call: the statement names it by its key
		}
		found = true
		var err error
		c, err = callFromRow(row)
		return err
	}, args...)
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	return c, err
}

// hot runs f with the hot statements on the connection of the batch being
// committed. Only a write's function (or the committer) may call it: the
// connection is the committer's. Inside f, hot runs its f directly (Raw
// holds the connection until f returns), and f must not use the batch's
// *sql.Tx: database/sql would wait for the connection Raw holds. A panic in f is carried out of
// Raw and raised again: Raw would take a panic, or driver.ErrBadConn, for
// a broken connection and close it under the open transaction, which
// waits for the transaction for ever.
func (s *Store) hot(f func(h *hotStmts) error) error {
	if s.inHot {
		return f(&s.hs)
	}
	if s.batchConn == nil {
		return errors.New("sqlite: hot statement outside the committer (a bug)")
	}
	var (
		panicked bool
		value    any
		stack    []byte
	)
	err := s.batchConn.Raw(func(dc any) (err error) {
		s.inHot = true
		defer func() {
			s.inHot = false
			if v := recover(); v != nil {
				panicked, value, stack = true, v, debug.Stack()
				err = nil
			}
			if errors.Is(err, driver.ErrBadConn) {
				err = fmt.Errorf("%w: %s", store.ErrUnavailable, err.Error())
			}
		}()
		if err := s.hs.on(dc); err != nil {
			return err
		}
		return f(&s.hs)
	})
	if panicked {
		panic(fmt.Sprintf("%v\n%s", value, stack))
	}
	return err
}

// twins maps the write statements that return a call (writeStmts, for
// queryCall) to the hot statements of the same SQL (Store.queryCallHot).
func (s *Store) twins() map[*sql.Stmt]*driverStmt {
	return map[*sql.Stmt]*driverStmt{
		s.wq.callByID:     &s.hs.callByID,
		s.wq.callByKey:    &s.hs.callByKey,
		s.wq.callByIntent: &s.hs.callByIntent,
		s.wq.retryReset:   &s.hs.retryReset,
	}
}

// queryCallHot is queryCall for a write's function, run on the driver
// connection (hot) when st has a hot twin: a write that reads or returns a
// call through database/sql pays its costs (see the top of this file) on
// every column.
func (s *Store) queryCallHot(ctx context.Context, tx *sql.Tx, st *sql.Stmt, args ...any) (store.Call, error) {
	p, ok := s.twin[st]
	if !ok {
		return queryCall(ctx, tx, st, args...)
	}
	var c store.Call
	err := s.hot(func(h *hotStmts) error {
		var err error
		c, err = h.queryCall(*p, args...)
		return err
	})
	return c, err
}

// insertNewCallHot runs sqlInsertNewCall for c, the row newCallRow built,
// inside a write: whether it inserted c. retention is the tombstones'
// retention (0: none), now the write's time.
func (s *Store) insertNewCallHot(c store.Call, intent *string, retention time.Duration, now float64) (inserted bool, err error) {
	err = s.hot(func(h *hotStmts) error {
		nv, err := h.bind([]any{c.CallID, c.Principal, c.IdemKey, c.Fingerprint, c.ClientID, c.Seq, c.Tool,
			string(c.ArgsJSON), string(c.Status), c.Attempt, c.LeaseUntil, c.Owner, now, now, intent, c.Via,
			c.NotifyURL, nullIfEmpty(c.TraceParent), retention > 0, now - retention.Seconds()})
		if err != nil {
			return err
		}
		res, err := h.insertNewCall.ExecContext(context.Background(), nv)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		inserted = n == 1
		return err
	})
	return inserted, err
}

// aliasByKeyHot reads an alias key's call id and fingerprint inside a
// write (sqlAliasByKey) on the driver connection; sql.ErrNoRows when the
// key is no alias.
func (s *Store) aliasByKeyHot(principal, key string) (callID, fingerprint string, err error) {
	found := false
	err = s.hot(func(h *hotStmts) error {
		return h.query(h.aliasByKey, func(row []driver.Value) error {
			found = true
			var err error
			if callID, err = asString(row[0], 0); err != nil {
				return err
			}
			fingerprint, err = asString(row[1], 1)
			return err
		}, principal, key)
	})
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	return callID, fingerprint, err
}

// tombstoneByKeyHot reads a key's tombstone purged at or after since
// inside a write (sqlTombstoneByKey) on the driver connection;
// sql.ErrNoRows when there is none.
func (s *Store) tombstoneByKeyHot(principal, key string, since float64) (store.Tombstone, error) {
	var (
		t     store.Tombstone
		found bool
	)
	err := s.hot(func(h *hotStmts) error {
		return h.query(h.tombstoneByKey, func(row []driver.Value) error {
			found = true
			var err error
			for i, dst := range []*string{&t.Principal, &t.IdemKey, &t.Fingerprint, &t.CallID, &t.Tool} {
				if *dst, err = asString(row[i], i); err != nil {
					return err
				}
			}
			t.PurgedAt, err = asFloat64(row[5], 5)
			return err
		}, principal, key, since)
	})
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	return t, err
}

// prepareHot prepares the hot statements on the write connection (Open: a
// statement that does not compile fails Open, as prepareAll's do).
func (s *Store) prepareHot(ctx context.Context) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error { return s.hs.on(dc) })
}

// closeHot finalizes the hot statements (Close, once the committer has
// stopped).
func (s *Store) closeHot() error {
	if s.w == nil || s.hs.dc == nil {
		return nil
	}
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		if dc != s.hs.dc {
			return nil // not the connection they were prepared on (it is closed)
		}
		return s.hs.closeAll()
	})
}

// callFromRow is scanCall for a row read from the driver (callColumns, in
// that order), converting each column as database/sql's Scan would into
// scanCall's destinations.
func callFromRow(v []driver.Value) (c store.Call, err error) {
	if len(v) != callColumnCount {
		return store.Call{}, fmt.Errorf("call row: %d columns, want %d", len(v), callColumnCount)
	}
	col := 0
	str := func() string {
		if err != nil {
			return ""
		}
		var s string
		s, err = asString(v[col], col)
		col++
		return s
	}
	nstr := func() *string {
		if err != nil || v[col] == nil {
			col++
			return nil
		}
		s := str()
		return &s
	}
	i64 := func() int64 {
		if err != nil {
			return 0
		}
		var n int64
		n, err = asInt64(v[col], col)
		col++
		return n
	}
	nf64 := func() *float64 {
		if err != nil || v[col] == nil {
			col++
			return nil
		}
		var f float64
		f, err = asFloat64(v[col], col)
		col++
		return &f
	}
	f64 := func() float64 {
		if v[col] == nil && err == nil {
			err = fmt.Errorf("call row: column %d: converting NULL to float64 is unsupported", col)
		}
		if p := nf64(); p != nil {
			return *p
		}
		return 0
	}
	c.CallID = str()
	c.Principal = str()
	c.IdemKey = str()
	c.Fingerprint = str()
	c.ClientID = nstr()
	if v[col] != nil {
		n := i64()
		c.Seq = &n
	} else {
		col++
	}
	c.Tool = str()
	c.ArgsJSON = json.RawMessage(str())
	c.Status = store.Status(str())
	c.ResultJSON = rawJSON(nstr())
	c.ErrorJSON = rawJSON(nstr())
	c.Attempt = i64()
	c.LeaseUntil = nf64()
	c.Owner = nstr()
	c.EffectID = nstr()
	c.CreatedAt = f64()
	c.UpdatedAt = f64()
	if err == nil {
		var b driver.Value
		if b, err = driver.Bool.ConvertValue(v[col]); err == nil {
			c.CancelRequested = b.(bool)
		} else {
			err = fmt.Errorf("call row: column %d: %w", col, err)
		}
		col++
	}
	c.NotBefore = nf64()
	c.Via = str()
	if p := nstr(); p != nil {
		c.Unknown = *p
	}
	c.NotifyURL = nstr()
	if p := nstr(); p != nil {
		c.TraceParent = *p
	}
	if err != nil {
		return store.Call{}, err
	}
	return c, nil
}

// callColumnCount is the number of columns in callColumns.
const callColumnCount = 23

func rawJSON(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// asString converts a column to a string as database/sql's Scan does.
func asString(v driver.Value, col int) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case nil:
		return "", fmt.Errorf("call row: column %d: converting NULL to string is unsupported", col)
	}
	return "", fmt.Errorf("call row: column %d: unsupported type %T", col, v)
}

// asInt64 converts a column to an int64 as database/sql's Scan does.
func asInt64(v driver.Value, col int) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	s, err := asString(v, col)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("call row: column %d: %w", col, err)
	}
	return n, nil
}

// asFloat64 converts a column to a float64 as database/sql's Scan does.
func asFloat64(v driver.Value, col int) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	}
	s, err := asString(v, col)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("call row: column %d: %w", col, err)
	}
	return f, nil
}
