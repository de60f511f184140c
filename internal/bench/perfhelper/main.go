// Command perfhelper is the Go half of scripts/perf (BENCHMARKS.md,
// "The performance harness"): things a shell script cannot do quickly.
//
//	perfhelper bare ADDR          serve the bare ceiling handler on ADDR until killed
//	perfhelper floor ADDR DB      serve the durable floor on ADDR over DB (a SQLite path
//	                              or a postgres:// URL, as serve's --db) until killed
//	perfhelper pgproxy ADDR URL OUT
//	                              forward ADDR to the database URL names, print the URL
//	                              to give the server, and at SIGTERM write to OUT the
//	                              statements, transactions and write transactions seen
//	perfhelper pgstat URL         print a JSON snapshot of the database's counters
//	                              (transactions, row writes per table, backends' CPU)
//	perfhelper pgcost BEFORE END AFTER WIRE FINISHED
//	                              print the cost per finished call from pgstat snapshots
//	                              (before the load, at the drain's end for the backends'
//	                              CPU, after the server stopped for the row counts) and
//	                              pgproxy's counts
//	perfhelper count-sqlite N C   run N distinct-key calls at concurrency C through an
//	                              in-process server of this tree on a fresh SQLite file;
//	                              print per finished call the write transactions,
//	                              statements (write connection, read pool), row
//	                              writes, index entries, commits and WAL pages
//	                              (SQLite's hooks and statement trace)
//	perfhelper gen-sqlite PATH N  create PATH as an idemctl SQLite database holding N
//	                              succeeded calls, each with its effect and audit rows
//
// gen-sqlite writes through SQL in one transaction (about a minute for a
// million calls here), not through HTTP. The rows look like the service's: random
// call ids (c_ + 16 hex), effect ids derived from them, three audit rows
// per call; the schema is the store's own (sqlite.Open migrates the file first).
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/idemctl/idemctl/internal/bench"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "perfhelper:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case len(args) == 2 && args[0] == "bare":
		return bench.ServeBare(ctx, args[1])
	case len(args) == 3 && args[0] == "floor":
		return serveFloor(ctx, args[1], args[2])
	case len(args) == 4 && args[0] == "pgproxy":
		return runProxy(ctx, args[1], args[2], os.Stdout, args[3])
	case len(args) == 2 && args[0] == "pgstat":
		return pgstatCmd(ctx, args[1], os.Stdout)
	case len(args) == 6 && args[0] == "pgcost":
		return pgcostCmd(args[1], args[2], args[3], args[4], args[5], os.Stdout)
	case len(args) == 3 && args[0] == "count-sqlite":
		n, err1 := strconv.Atoi(args[1])
		c, err2 := strconv.Atoi(args[2])
		if err1 != nil || err2 != nil || n < 1 || c < 1 {
			return fmt.Errorf("count-sqlite: N and C must be positive counts")
		}
		return countSQLite(ctx, n, c, os.Stdout)
	case len(args) == 3 && args[0] == "gen-sqlite":
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 0 {
			return fmt.Errorf("gen-sqlite: N must be a count, got %q", args[2])
		}
		return genSQLite(ctx, args[1], n)
	}
	return fmt.Errorf("usage: perfhelper bare ADDR | floor ADDR DB | pgproxy ADDR URL OUT | pgstat URL | pgcost BEFORE END AFTER WIRE FINISHED | count-sqlite N C | gen-sqlite PATH N")
}

// genSQLite fills a new database at path with n succeeded calls.
func genSQLite(ctx context.Context, path string, n int) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("gen-sqlite: %s exists; give a new path", path)
	}
	st, err := sqlite.Open(ctx, path, store.Options{})
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	// Generation only: no fsync per statement; the file is checkpointed
	// and synced once at the end.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=cache_size(-262144)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	start := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	// t0 puts the history in the past (one call per millisecond, ending
	// now), so the service's new calls sort after it, as in a real database.
	t0 := float64(time.Now().UnixMilli())/1000 - float64(n)/1000
	steps := []string{
		`CREATE TEMP TABLE gen AS
		   WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		   SELECT i, 'c_' || lower(hex(randomblob(8))) AS call_id, ? + i / 1000.0 AS ts FROM seq`,
		`INSERT INTO calls (call_id, principal, idem_key, fingerprint, tool, args_json, status, result_json,
		                    attempt, owner, effect_id, created_at, updated_at)
		   SELECT call_id, '', 'gen-' || i, lower(hex(randomblob(32))), 'charge', '{"amount":1}', 'succeeded',
		          '{"charged":1,"effect_id":"eff_' || substr(call_id, 3) || '"}', 1, 'gen', 'eff_' || substr(call_id, 3), ts, ts
		   FROM gen ORDER BY i`,
		`INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
		   SELECT 'eff_' || substr(call_id, 3), call_id, 'charge', 1, ts FROM gen ORDER BY i`,
		`INSERT INTO audit (ts, call_id, event, detail)
		   SELECT ts, call_id, e.event, e.detail FROM gen,
		     (SELECT 1 AS o, 'created' AS event, 'tool=charge' AS detail
		      UNION ALL SELECT 2, 'claimed', 'owner=gen'
		      UNION ALL SELECT 3, 'succeeded', 'effect') AS e
		   ORDER BY i, e.o`,
		`DROP TABLE gen`,
	}
	for i, q := range steps {
		var qargs []any
		if i == 0 {
			qargs = []any{n, t0}
		}
		if _, err := tx.ExecContext(ctx, q, qargs...); err != nil {
			return fmt.Errorf("gen-sqlite step %d: %w", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("gen-sqlite: %d calls in %s, %s is %d MB\n", n, time.Since(start).Round(time.Millisecond), path, fi.Size()>>20)
	return nil
}
