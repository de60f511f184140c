package main

// pgstat snapshots what PostgreSQL itself counts for one database, so the
// harness can divide the change over a run by the calls that finished:
// committed transactions (pg_stat_database; reads included), row writes per
// table and the non-HOT ones among the updates (pg_stat_user_tables), and
// the CPU time of the database's backends (/proc, PostgreSQL on this host).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// tableStat is one table's cumulative row writes and its index count.
type tableStat struct {
	Ins     int64 `json:"ins"`
	Upd     int64 `json:"upd"`
	HotUpd  int64 `json:"hot_upd"`
	Del     int64 `json:"del"`
	Indexes int64 `json:"indexes"`
}

// pgSnapshot is one moment's counters.
type pgSnapshot struct {
	XactCommit int64                `json:"xact_commit"`
	Tables     map[string]tableStat `json:"tables"`
	// BackendTicks is each backend's user + system CPU in clock ticks.
	BackendTicks map[int]int64 `json:"backend_ticks"`
}

// clockTicks is USER_HZ, fixed at 100 on Linux whatever the kernel's HZ.
const clockTicks = 100

func takePGSnapshot(ctx context.Context, dsn string) (pgSnapshot, error) {
	snap := pgSnapshot{Tables: map[string]tableStat{}, BackendTicks: map[int]int64{}}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return snap, err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&snap.XactCommit); err != nil {
		return snap, fmt.Errorf("pg_stat_database: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT t.relname, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
		(SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)
		FROM pg_stat_user_tables t`)
	if err != nil {
		return snap, fmt.Errorf("pg_stat_user_tables: %w", err)
	}
	for rows.Next() {
		var name string
		var ts tableStat
		if err := rows.Scan(&name, &ts.Ins, &ts.Upd, &ts.HotUpd, &ts.Del, &ts.Indexes); err != nil {
			return snap, err
		}
		snap.Tables[name] = ts
	}
	if err := rows.Err(); err != nil {
		return snap, err
	}
	rows, err = conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return snap, fmt.Errorf("pg_stat_activity: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return snap, err
	}
	for _, pid := range pids {
		if t, err := procTicks(pid); err == nil {
			snap.BackendTicks[pid] = t
		}
	}
	return snap, nil
}

// procTicks is utime + stime of a process, from /proc/PID/stat.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statTicks(string(b))
}

// statTicks reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line; the command name, in parentheses, may hold spaces.
func statTicks(line string) (int64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("unreadable stat line")
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat line")
	}
	// f[0] is field 3 (state): utime is field 14 = f[11], stime f[12].
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unreadable stat times")
	}
	return u + s, nil
}

// pgCost is a run's cost per finished call on PostgreSQL.
type pgCost struct {
	Statements, WriteTx, Transactions float64
	RowWrites, IndexEntries           float64
	BackendCPUms                      float64
}

// perCall divides the change from before to after (and the proxy's counts)
// by n finished calls. Index entries: an insert enters every index of its
// table, an update that is not HOT enters a new version in every index (a
// partial index only when the row matches it, so this is an upper bound),
// a HOT update none. Backend CPU counts the backends alive at the end; one
// that also existed before contributes only what it spent since.
func perCall(before, after pgSnapshot, w wireCounts, n int64) pgCost {
	var c pgCost
	if n <= 0 {
		return c
	}
	var rows, idx int64
	for name, a := range after.Tables {
		b := before.Tables[name]
		ins, upd, hot, del := a.Ins-b.Ins, a.Upd-b.Upd, a.HotUpd-b.HotUpd, a.Del-b.Del
		rows += ins + upd + del
		idx += (ins + upd - hot) * a.Indexes
	}
	var ticks int64
	for pid, t := range after.BackendTicks {
		ticks += t - before.BackendTicks[pid]
	}
	f := float64(n)
	c.Statements = float64(w.Statements) / f
	c.WriteTx = float64(w.WriteTx) / f
	c.Transactions = float64(w.Transactions) / f
	c.RowWrites = float64(rows) / f
	c.IndexEntries = float64(idx) / f
	c.BackendCPUms = float64(ticks) * 1000 / clockTicks / f
	return c
}

// line is the harness's one-line form (key=value, per finished call).
func (c pgCost) line() string {
	return fmt.Sprintf("statements=%.2f write_tx=%.2f tx=%.2f row_writes=%.2f index_entries=%.2f backend_cpu_ms=%.3f",
		c.Statements, c.WriteTx, c.Transactions, c.RowWrites, c.IndexEntries, c.BackendCPUms)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// pgstatCmd writes a snapshot of dsn's counters as JSON to w.
func pgstatCmd(ctx context.Context, dsn string, w io.Writer) error {
	snap, err := takePGSnapshot(ctx, dsn)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(snap)
}

// pgcostCmd prints the per-call line from the snapshot before the load,
// the one at the end of the drain (the backends' CPU: they exit with the
// server), the one after the server stopped (the row counts: a backend
// reports them when it exits, an idle one only every 10 s), pgproxy's counts
// and the number of finished calls.
func pgcostCmd(beforePath, endPath, afterPath, wirePath, finished string, w io.Writer) error {
	var before, end, after pgSnapshot
	var wc wireCounts
	for p, v := range map[string]any{beforePath: &before, endPath: &end, afterPath: &after, wirePath: &wc} {
		if err := readJSON(p, v); err != nil {
			return err
		}
	}
	n, err := strconv.ParseInt(finished, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("pgcost: finished calls must be > 0, got %q", finished)
	}
	after.BackendTicks = end.BackendTicks
	_, err = fmt.Fprintln(w, perCall(before, after, wc, n).line())
	return err
}
