package main

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestSQLiteFloor: a POST is answered 202 only once its row is committed
// (the test is the writer here, so it holds the commit); the same key
// again adds nothing (ON CONFLICT DO NOTHING); no key is a 400 that writes
// nothing.
func TestSQLiteFloor(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "floor.db")
	f, err := openSQLiteFloor(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.db.Close()
	ts := httptest.NewServer(floorHandler(f.queue))
	defer ts.Close()
	post := func(key, body string) int {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+wire.PathCalls, strings.NewReader(body))
		if key != "" {
			req.Header.Set(wire.HeaderIdempotencyKey, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	other, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	count := func() (n int) {
		if err := other.QueryRow(`SELECT count(*) FROM floor`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	answered := make(chan int, 1)
	go func() { answered <- post("k1", `{"a":1}`) }()
	in := <-f.queue // the request is waiting for its commit
	select {
	case c := <-answered:
		t.Fatalf("answered %d before its row was committed", c)
	default:
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows before the commit", n)
	}
	finish([]*floorInsert{in}, f.commit(t.Context(), []*floorInsert{in}))
	if c := <-answered; c != http.StatusAccepted {
		t.Fatalf("first POST: %d, want 202", c)
	}
	var body string
	if err := other.QueryRow(`SELECT body FROM floor WHERE key = 'k1'`).Scan(&body); err != nil || body != `{"a":1}` {
		t.Fatalf("row of k1: %q %v", body, err)
	}

	go f.run(t.Context())
	if c := post("k1", `{"a":2}`); c != http.StatusAccepted || count() != 1 {
		t.Fatalf("same key again: %d, %d rows; want 202 and still 1 row", c, count())
	}
	if c := post("", `{}`); c != http.StatusBadRequest || count() != 1 {
		t.Fatalf("no key: %d, %d rows; want 400 and nothing written", c, count())
	}
	if c := post("k2", `{}`); c != http.StatusAccepted || count() != 2 {
		t.Fatalf("a second key: %d, %d rows; want 202 and 2 rows", c, count())
	}
}

// TestPGFloor: the same on PostgreSQL (IDEMCTL_TEST_POSTGRES_URL; a schema
// of the test's own), through the batched writers.
func TestPGFloor(t *testing.T) {
	url := pgtest.Schema(t)
	f, err := openPGFloor(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer f.pool.Close()
	go f.run(t.Context())
	ts := httptest.NewServer(floorHandler(f.queue))
	defer ts.Close()
	for i, key := range []string{"a", "b", "a"} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+wire.PathCalls, strings.NewReader(`{}`))
		req.Header.Set(wire.HeaderIdempotencyKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %d: %d, want 202", i, resp.StatusCode)
		}
	}
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM floor`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows: %d %v, want 2 (one per key)", n, err)
	}
}
