package main

// The durable floor (BENCHMARKS.md, "The performance harness"): the least a
// service whose every 2xx is durable can do. POST /v1/tool-calls reads the
// body and the Idempotency-Key, inserts (key, body, now) with ON CONFLICT
// DO NOTHING, and answers 202 only after that row is committed; requests
// waiting at the same time share one commit. Same drivers and durability
// settings as idemctl's stores, so idemctl's rate divided by the floor's is
// what idemctl's own work costs.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemctl/idemctl/internal/bench"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/wire"
)

const (
	// floorBatch bounds one commit group: "up to a few hundred".
	floorBatch = 256
	// floorPGWriters is the PostgreSQL floor's writer count: each sends
	// its waiting inserts as one pipelined batch (one implicit transaction).
	floorPGWriters = 4
	// floorMaxBody bounds a request body, as the service bounds its own.
	floorMaxBody = 1 << 20
)

// floorInsert is one request's row, waiting for its commit.
type floorInsert struct {
	key  string
	body []byte
	done chan error
}

// floorHandler answers POST /v1/tool-calls once its row is committed by
// whatever drains queue; 400 without a key, 404 elsewhere, 503 when the
// commit failed.
func floorHandler(queue chan<- *floorInsert) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+wire.PathCalls, func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(wire.HeaderIdempotencyKey)
		if key == "" {
			http.Error(w, `{"error":"missing Idempotency-Key"}`, http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, floorMaxBody))
		if err != nil {
			http.Error(w, `{"error":"reading the body"}`, http.StatusBadRequest)
			return
		}
		in := &floorInsert{key: key, body: body, done: make(chan error, 1)}
		select {
		case queue <- in:
		case <-r.Context().Done():
			return
		}
		if err := <-in.done; err != nil {
			http.Error(w, `{"error":"commit failed"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	})
	// GET / answers so scripts/perf can wait for the server to come up.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {})
	return mux
}

// gather blocks for one waiting insert, then takes every other one already
// waiting, up to floorBatch: one commit group.
func gather(ctx context.Context, queue <-chan *floorInsert) []*floorInsert {
	var group []*floorInsert
	select {
	case in := <-queue:
		group = append(group, in)
	case <-ctx.Done():
		return nil
	}
	for len(group) < floorBatch {
		select {
		case in := <-queue:
			group = append(group, in)
		default:
			return group
		}
	}
	return group
}

func finish(group []*floorInsert, err error) {
	for _, in := range group {
		in.done <- err
	}
}

// sqliteFloor is the floor on modernc.org/sqlite: WAL, synchronous=FULL,
// one writer connection that commits every waiting request together.
type sqliteFloor struct {
	db    *sql.DB
	queue chan *floorInsert
}

func openSQLiteFloor(ctx context.Context, path string) (*sqliteFloor, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS floor (key TEXT PRIMARY KEY, body BLOB NOT NULL, at REAL NOT NULL)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("floor: create table: %w", err)
	}
	return &sqliteFloor{db: db, queue: make(chan *floorInsert, floorBatch)}, nil
}

// run is the one writer: a transaction per group, one fsync per commit.
func (f *sqliteFloor) run(ctx context.Context) {
	for {
		group := gather(ctx, f.queue)
		if group == nil {
			return
		}
		finish(group, f.commit(ctx, group))
	}
}

func (f *sqliteFloor) commit(ctx context.Context, group []*floorInsert) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO floor (key, body, at) VALUES (?, ?, unixepoch('subsec')) ON CONFLICT DO NOTHING`)
	if err != nil {
		return err
	}
	for _, in := range group {
		if _, err := stmt.ExecContext(ctx, in.key, in.body); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// pgFloor is the floor on pgx: floorPGWriters writers, each sending the
// inserts waiting for it as one batch, which PostgreSQL runs as one implicit
// transaction (one Sync at the end).
type pgFloor struct {
	pool  *pgxpool.Pool
	queue chan *floorInsert
}

func openPGFloor(ctx context.Context, url string) (*pgFloor, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS floor (key text PRIMARY KEY, body bytea NOT NULL, at timestamptz NOT NULL)`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("floor: create table: %w", err)
	}
	return &pgFloor{pool: pool, queue: make(chan *floorInsert, floorBatch)}, nil
}

func (f *pgFloor) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range floorPGWriters {
		wg.Go(func() {
			for {
				group := gather(ctx, f.queue)
				if group == nil {
					return
				}
				finish(group, f.commit(ctx, group))
			}
		})
	}
	wg.Wait()
}

func (f *pgFloor) commit(ctx context.Context, group []*floorInsert) error {
	b := &pgx.Batch{}
	for _, in := range group {
		b.Queue(`INSERT INTO floor (key, body, at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, in.key, in.body)
	}
	// Close reads every result; the batch commits at its Sync.
	return f.pool.SendBatch(ctx, b).Close()
}

// serveFloor serves the floor on addr over the database dsn names (as
// idemctl serve's --db: a postgres:// URL or a SQLite path) until ctx ends.
func serveFloor(ctx context.Context, addr, dsn string) error {
	kind, target, err := backend.Parse(dsn)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		queue   chan *floorInsert
		run     func(context.Context)
		closeDB func()
	)
	if kind == backend.Postgres {
		f, err := openPGFloor(ctx, target)
		if err != nil {
			return err
		}
		queue, run, closeDB = f.queue, f.run, f.pool.Close
	} else {
		f, err := openSQLiteFloor(ctx, target)
		if err != nil {
			return err
		}
		queue, run, closeDB = f.queue, f.run, func() { _ = f.db.Close() }
	}
	defer closeDB()
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	err = bench.Serve(ctx, addr, floorHandler(queue))
	cancel()
	<-done
	return err
}
