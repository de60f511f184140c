package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestUnknownOutcomeRetriedWithSameKey: the downstream performs the first
// attempt's charge and drops the connection before answering. The attempt
// is outcome_unknown (audited with its case before retry_scheduled), and
// on_unknown's default, retry, runs the next attempt with the same
// Idempotency-Key: a downstream that honours keys charges once, and the
// call succeeds with that charge (docs/lifecycle.md, "Unknown outcomes").
func TestUnknownOutcomeRetriedWithSameKey(t *testing.T) {
	ds := downstream.New(false)
	var (
		n    atomic.Int64
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(wire.HeaderIdempotencyKey))
		mu.Unlock()
		if n.Add(1) > 1 {
			ds.Handler().ServeHTTP(w, r)
			return
		}
		ds.Handler().ServeHTTP(httptest.NewRecorder(), r) // the effect happens; its answer is lost
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: create_charge
    kind: http
    url: `+srv.URL+`/charges
    retry: {max_attempts: 3, initial_backoff: 1s, max_backoff: 1s}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	c := b.post("k-unknown", `{"tool":"create_charge","args":{"amount":5}}`).call(t)
	eventually(t, "the call succeeds", func() bool {
		return b.get(wire.CallPath(c.CallID)).call(t).Status == store.StatusSucceeded
	})
	got := b.get(wire.CallPath(c.CallID)).call(t)
	if got.Attempt != 2 {
		t.Fatalf("succeeded at attempt %d, want 2", got.Attempt)
	}
	if l := ds.Ledger(); len(l) != 1 {
		t.Fatalf("downstream ledger has %d charges, want 1", len(l))
	}
	mu.Lock()
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] == "" {
		t.Fatalf("Idempotency-Keys sent %q, want the same key twice", keys)
	}
	mu.Unlock()

	rows, err := b.st.Audit(t.Context(), c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Event == store.EventOutcomeUnknown && !strings.HasPrefix(r.Detail,
			"reset_after_send: the request was sent, then the connection to the downstream closed before a complete answer") {
			t.Fatalf("outcome_unknown detail %q", r.Detail)
		}
	}
	want := []string{store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventRetryScheduled,
		store.EventClaimed, store.EventSucceeded}
	if got := story(rows); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("audit %v, want %v", got, want)
	}
}
