package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestPendingPerPrincipal: alice at her limit of pending calls gets 503
// overloaded for a new key, stores nothing, is counted; her pending key is
// still served; and bob, with the queue far from full, is still accepted.
func TestPendingPerPrincipal(t *testing.T) {
	ctx := context.Background()
	b, _ := setupAuth(t, func(c *Config) {
		c.Workers = 1 // busy with the sleep below, so the next calls stay pending
		c.MaxPending = 100
		c.ShutdownGrace = 50 * time.Millisecond // the sleep need not finish
		c.MaxPendingPerPrincipal = 3
	})
	alice, bob := []string{"Authorization", bearer(aliceToken)}, []string{"Authorization", bearer(bobToken)}
	busy := b.post("k-busy", `{"tool":"sleep","args":{"seconds":5}}`, bob...).call(t)
	eventually(t, "the worker runs k-busy", func() bool {
		g, err := b.st.GetAny(ctx, busy.CallID)
		return err == nil && g.Status == store.StatusRunning
	})
	for _, k := range []string{"a1", "a2", "a3"} {
		if r := b.post(k, `{"tool":"charge","args":{"amount":1}}`, alice...); r.status != http.StatusAccepted {
			t.Fatalf("alice %s below her limit: %d %s, want 202", k, r.status, r.body)
		}
	}

	before := b.snapshot()
	r := b.post("a4", `{"tool":"charge","args":{"amount":1}}`, alice...)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeOverloaded || r.header.Get("Retry-After") == "" {
		t.Fatalf("alice's new key at her limit: %d %s, want 503 overloaded with Retry-After", r.status, r.body)
	}
	if !b.snapshot().equal(before) {
		t.Fatal("the refused request changed the database")
	}
	if v := authMetric(b, `idemctl_limit_refusals_total{limit="pending_principal"}`); v != 1 {
		t.Fatalf("pending_principal refusals = %v, want 1", v)
	}
	if r := b.post("a1", `{"tool":"charge","args":{"amount":1}}`, alice...); r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("alice's pending key again: %d %s, want 202 replayed", r.status, r.body)
	}
	for _, k := range []string{"b1", "b2"} {
		if r := b.post(k, `{"tool":"charge","args":{"amount":1}}`, bob...); r.status != http.StatusAccepted {
			t.Fatalf("bob's new key %s while alice is at her limit: %d %s, want 202", k, r.status, r.body)
		}
	}
	if _, err := b.st.GetByKey(ctx, "alice", "a4"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused key recorded: %v", err)
	}
}

// TestPendingPerPrincipalReadsStore: the per-principal count comes from
// the store, not from this server's own creates only: calls of alice made
// pending by another instance (here: written to the store directly) count
// against her limit once the queue is long enough to matter.
func TestPendingPerPrincipalReadsStore(t *testing.T) {
	b, _ := setupAuth(t, func(c *Config) {
		c.Workers = 1
		c.MaxPending = 100
		c.ShutdownGrace = 50 * time.Millisecond // the sleep need not finish
		c.MaxPendingPerPrincipal = 2
		c.RecoverInterval = 20 * time.Millisecond
	})
	ctx := context.Background()
	busy := b.post("k-busy", `{"tool":"sleep","args":{"seconds":5}}`, "Authorization", bearer(bobToken)).call(t)
	eventually(t, "the worker runs k-busy", func() bool {
		g, err := b.st.GetAny(ctx, busy.CallID)
		return err == nil && g.Status == store.StatusRunning
	})
	for i, k := range []string{"other-1", "other-2"} {
		req, aerr := parseCreate([]byte(`{"tool":"charge","args":{"amount":1}}`), false, b.srv.cfg.Tools, "")
		if aerr != nil {
			t.Fatal(aerr)
		}
		id, _ := newCallID()
		if _, _, err := b.st.CreateOrGet(ctx, req.newCall(id, "alice", k)); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	eventually(t, "the scheduler counts the two pending calls", func() bool { return b.srv.exec.Pending() >= 2 })
	if r := b.post("a-new", `{"tool":"charge","args":{"amount":1}}`, "Authorization", bearer(aliceToken)); r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeOverloaded {
		t.Fatalf("alice with 2 pending calls made elsewhere: %d %s, want 503 overloaded", r.status, r.body)
	}
	if r := b.post("b-new", `{"tool":"charge","args":{"amount":1}}`, "Authorization", bearer(bobToken)); r.status != http.StatusAccepted {
		t.Fatalf("bob: %d %s, want 202", r.status, r.body)
	}
}

// TestHeldWaitsPerPrincipal: alice holding her limit of waits gets her
// next Prefer: wait answered at once, without Preference-Applied, while
// bob's wait is still held (applied) with global slots to spare.
func TestHeldWaitsPerPrincipal(t *testing.T) {
	b, _ := setupAuth(t, func(c *Config) {
		c.MaxHeldWaits = 10
		c.MaxHeldWaitsPerPrincipal = 1
		c.ShutdownGrace = 50 * time.Millisecond // the sleeps need not finish
	})
	alice, bob := []string{"Authorization", bearer(aliceToken)}, []string{"Authorization", bearer(bobToken)}
	held := b.post("a-held", `{"tool":"sleep","args":{"seconds":5}}`, alice...).call(t)
	var wg sync.WaitGroup
	wg.Go(func() { b.get(wire.CallPath(held.CallID), append([]string{"Prefer", "wait=3"}, alice...)...) })
	eventually(t, "alice's wait is held", func() bool { return authMetric(b, "idemctl_http_waits_held") == 1 })

	r := b.get(wire.CallPath(held.CallID), append([]string{"Prefer", "wait=3"}, alice...)...)
	if r.status != http.StatusOK || r.header.Get("Preference-Applied") != "" {
		t.Fatalf("alice's second wait: %d, Preference-Applied %q; want 200 at once without it", r.status, r.header.Get("Preference-Applied"))
	}
	if v := authMetric(b, `idemctl_limit_refusals_total{limit="waits_principal"}`); v != 1 {
		t.Fatalf("waits_principal refusals = %v, want 1", v)
	}
	bc := b.post("b-held", `{"tool":"sleep","args":{"seconds":5}}`, bob...).call(t)
	r = b.get(wire.CallPath(bc.CallID), append([]string{"Prefer", "wait=1"}, bob...)...)
	if r.header.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("bob's wait while alice is at her limit: Preference-Applied %q, want wait=1", r.header.Get("Preference-Applied"))
	}
	wg.Wait()
}

// authMetric is bundle.metricValue on a server with auth (as alice).
func authMetric(b *bundle, series string) float64 {
	b.t.Helper()
	r := b.get("/metrics", "Authorization", bearer(aliceToken))
	if r.status != http.StatusOK {
		b.t.Fatalf("GET /metrics: %d", r.status)
	}
	return metricSample(b.t, r.body, series)
}
