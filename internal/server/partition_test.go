package server

// A PostgreSQL database that stops answering (a partition: no reset, no
// byte back) must cost answers, not hangs: every request that needs the
// database is answered 503 unavailable within the documented bound, and
// the server acknowledges new keys again once the network heals
// (docs/reliability.md, promise 11; docs/operations.md, "Limits"). The
// server reaches its database through internal/blackhole, the proxy that
// idemctl soak --pg-partition uses. Needs IDEMCTL_TEST_POSTGRES_URL.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/blackhole"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/wire"
)

// partitionAnswerBound is how long a request may take to be answered while
// the database is cut off: the documented bound (lock timeout + 1 s, 6 s
// by default) with generous slack for a loaded test machine. Today's code
// before the fix answered only after the heal.
const partitionAnswerBound = 10 * time.Second

type partitionAnswer struct {
	what    string
	status  int
	code    string
	elapsed time.Duration
	err     error
}

func TestPartitionAnsweredInBound(t *testing.T) {
	if testing.Short() {
		t.Skip("a 12 s partition")
	}
	db := pgtest.New(t)
	u, err := url.Parse(db.URL)
	if err != nil || u.Host == "" {
		t.Skipf("%s is not a postgres:// URL with a host: %v", pgtest.URLEnv, err)
	}
	px, err := blackhole.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = px.Addr()
	st, err := postgres.Open(context.Background(), u.String(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := setupStore(t, st, true)
	// Registered after setupStore, so it runs first: the server and the store
	// shut down on a healed network.
	t.Cleanup(func() { px.Heal(); _ = px.Close() })

	client := &http.Client{Timeout: 30 * time.Second}
	send := func(what, method, path, key, body string) partitionAnswer {
		req, err := http.NewRequest(method, b.ts.URL+path, bytes.NewReader([]byte(body)))
		if err != nil {
			return partitionAnswer{what: what, err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(wire.HeaderIdempotencyKey, key)
		}
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			return partitionAnswer{what: what, elapsed: time.Since(start), err: err}
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		a := partitionAnswer{what: what, status: res.StatusCode, elapsed: time.Since(start)}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil {
			a.code = e.Error.Code
		}
		return a
	}
	const create = `{"tool":"sleep","args":{"seconds":0}}`

	// Before: the pool holds live connections, the executor runs calls.
	var known wire.Call
	for i := range 8 {
		a := send("warm-up", http.MethodPost, "/v1/tool-calls", fmt.Sprintf("warm-%d", i), create)
		if a.err != nil || a.status != http.StatusAccepted {
			t.Fatalf("create before the partition: %d %v", a.status, a.err)
		}
		if i == 0 {
			known = doURL(t, b.ts.URL, http.MethodGet, "/v1/tool-calls/by-key/warm-0", nil, nil).call(t)
		}
	}

	// Two waves of requests, 0.5 s and 4 s into a 13 s partition: each
	// must be answered before the heal. The second wave meets whatever the
	// first left behind (committers, pool connections, executor workers
	// stuck on the silent connections).
	const partition = 13 * time.Second
	px.Partition()
	cut := time.Now()
	var (
		mu      sync.Mutex
		answers []partitionAnswer
		wg      sync.WaitGroup
	)
	for wave, at := range []time.Duration{500 * time.Millisecond, 4 * time.Second} {
		reqs := []struct{ what, method, path, key, body string }{
			{"GET by id", http.MethodGet, wire.CallPath(known.CallID), "", ""},
			{"GET by key", http.MethodGet, "/v1/tool-calls/by-key/warm-1", "", ""},
		}
		for i := range 8 {
			reqs = append(reqs, struct{ what, method, path, key, body string }{
				"create", http.MethodPost, "/v1/tool-calls", fmt.Sprintf("cut-%d-%d", wave, i), create})
		}
		for _, r := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(cut.Add(at)))
				a := send(fmt.Sprintf("wave %d %s %s", wave, r.what, r.key), r.method, r.path, r.key, r.body)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}()
		}
	}
	time.Sleep(time.Until(cut.Add(partition)))
	px.Heal()
	wg.Wait()

	if len(answers) != 20 {
		t.Fatalf("%d answers, want 20", len(answers))
	}
	var slowest time.Duration
	for _, a := range answers {
		slowest = max(slowest, a.elapsed)
		switch {
		case a.err != nil:
			t.Errorf("%s: no answer after %v: %v", a.what, a.elapsed.Round(time.Millisecond), a.err)
		case a.elapsed > partitionAnswerBound:
			t.Errorf("%s: answered %d after %v, want within %v", a.what, a.status, a.elapsed.Round(time.Millisecond), partitionAnswerBound)
		case a.status != http.StatusServiceUnavailable || a.code != wire.CodeUnavailable:
			t.Errorf("%s: answered %d %q, want 503 %s (the database is cut off)", a.what, a.status, a.code, wire.CodeUnavailable)
		}
	}

	t.Logf("slowest answer while partitioned: %v", slowest.Round(time.Millisecond))

	// After the heal, new keys are acknowledged again, without a restart.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		a := send("after the heal", http.MethodPost, "/v1/tool-calls", fmt.Sprintf("healed-%d", i), create)
		if a.err == nil && a.status == http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new key acknowledged within 30 s of the heal; last: %d %q %v", a.status, a.code, a.err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// And the calls the partition interrupted all finish.
	waitFinalURL(t, b.ts.URL, known.CallID)
}
