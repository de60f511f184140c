package sqlite

import (
	"database/sql"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/idemctl/idemctl/internal/store"
)

// compileCounter counts, through SQLite's authorizer, which runs while a
// statement is compiled and never while it runs, every table access SQLite
// compiles on the connections it is installed on.
type compileCounter struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *compileCounter) fn(action sqlite.AuthorizerActionCode, arg1, arg2, _, _ string) sqlite.AuthorizerReturnCode {
	switch action {
	case sqlite.AuthRead, sqlite.AuthInsert, sqlite.AuthUpdate, sqlite.AuthDelete:
		c.mu.Lock()
		c.seen[fmt.Sprintf("%d %s.%s", action, arg1, arg2)]++
		c.mu.Unlock()
	}
	return sqlite.AuthorizerOK
}

func (c *compileCounter) reset() {
	c.mu.Lock()
	c.seen = map[string]int{}
	c.mu.Unlock()
}

func (c *compileCounter) report() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, n := range c.seen {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(out)
	return out
}

// install puts the counter on n connections of db at once (all of the pool).
func (c *compileCounter) install(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	var conns []*sql.Conn
	for range n {
		conn, err := db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		if err := conn.Raw(func(dc any) error {
			return dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(c.fn)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, conn := range conns {
		conn.Close()
	}
}

// TestNoReprepare runs the executor's and the HTTP handlers' store calls
// over and over, with the limits, clocks, keys and owners changing as they do
// in service, and checks SQLite compiles none of their statements again after
// the first round: the statements are prepared once per Store, and none of
// them is one that SQLite 3.54 expires when a parameter changes (a LIMIT
// going to or from 1, a "col = ?" in an ORDER BY query).
func TestNoReprepare(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	counter := &compileCounter{seen: map[string]int{}}
	// Installing an authorizer expires the connection's statements: the
	// first round below compiles them once more, under the counter.
	counter.install(t, s.w, 1)
	counter.install(t, s.r, readConns)

	n := 0
	round := func(limit int) {
		t.Helper()
		ctx := t.Context()
		for range limit + 1 {
			n++
			id := fmt.Sprintf("c_%016x", n)
			if _, _, err := s.CreateOrGet(ctx, store.NewCall{
				CallID: id, IdemKey: id, Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`),
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetByKey(ctx, store.DefaultPrincipal, id); err != nil {
				t.Fatal(err)
			}
		}
		owner := fmt.Sprintf("w%d", limit)
		got, err := s.ClaimNext(ctx, owner, time.Minute, limit)
		if err != nil || len(got) != limit {
			t.Fatalf("ClaimNext(%d) = %d calls, %v", limit, len(got), err)
		}
		if _, err := s.ListCalls(ctx, store.ListFilter{Status: store.StatusRunning}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecoverExpired(ctx); err != nil {
			t.Fatal(err)
		}
		amount := int64(1)
		for i, c := range got {
			if _, err := s.GetAny(ctx, c.CallID); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				_, err = s.Succeed(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: owner, Attempt: c.Attempt},
					Result: []byte(`{}`), Effect: &store.Effect{EffectID: "e" + c.CallID, Tool: "charge", Amount: &amount}})
			} else {
				_, err = s.Fail(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: owner, Attempt: c.Attempt},
					Error: []byte(`{"code":"x","retryable":false}`)})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// Warm up with both kinds of limit, so each statement has been
	// compiled (once) under the counter.
	round(1)
	round(3)
	counter.reset()
	for _, limit := range []int{1, 3, 1, 2, 1, 5, 1} {
		round(limit)
	}
	if r := counter.report(); len(r) > 0 {
		t.Fatalf("statements compiled again in service (action table.column × times):\n%v", r)
	}
}
