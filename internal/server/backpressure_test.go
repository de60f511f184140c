package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestBackPressureRefusesNewKeysOnly: with MaxPending calls pending, a
// request for a new key is answered 503 overloaded with Retry-After and
// stores nothing; a replay of a pending key and a retry reset of a failed
// one are served as always, reads too; the refusal is counted in /metrics
// and /stats, and the queue gauges show the depth.
func TestBackPressureRefusesNewKeysOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(c *Config) {
		c.Workers = 1 // busy with the sleep below, so the next calls stay pending
		c.MaxPending = 2
	})
	failed := b.post("k-fail", `{"tool":"fail","args":{"message":"try again","retryable":true}}`).call(t)
	if f := b.waitFinal(failed.CallID); f.Status != "failed" {
		t.Fatalf("k-fail: %s, want failed", f.Status)
	}
	busy := b.post("k-busy", `{"tool":"sleep","args":{"seconds":5}}`).call(t)
	eventually(t, "the worker runs k-busy", func() bool {
		g, err := b.st.GetAny(ctx, busy.CallID)
		return err == nil && g.Status == store.StatusRunning
	})
	p1 := b.post("k-p1", `{"tool":"charge","args":{"amount":1}}`)
	p2 := b.post("k-p2", `{"tool":"charge","args":{"amount":2}}`)
	if p1.status != http.StatusAccepted || p2.status != http.StatusAccepted {
		t.Fatalf("below the limit: %d and %d, want 202", p1.status, p2.status)
	}

	// Two pending: the queue is full.
	before := b.snapshot()
	r := b.post("k-new", `{"tool":"charge","args":{"amount":3}}`)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeOverloaded || r.header.Get("Retry-After") == "" {
		t.Fatalf("new key over the limit: %d %q Retry-After %q, want 503 overloaded with Retry-After",
			r.status, r.body, r.header.Get("Retry-After"))
	}
	if !b.snapshot().equal(before) {
		t.Fatal("the refused request changed the database")
	}
	if _, err := b.st.GetByKey(ctx, store.DefaultPrincipal, "k-new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused key recorded: %v", err)
	}
	if v := b.metricValue(`idemctl_limit_refusals_total{limit="pending"}`); v != 1 {
		t.Fatalf("pending refusals = %v, want 1", v)
	}
	for _, lim := range []string{"bodies", "waits"} {
		if v := b.metricValue(`idemctl_limit_refusals_total{limit="` + lim + `"}`); v != 0 {
			t.Fatalf("%s refusals = %v, want 0", lim, v)
		}
	}

	// Existing keys are served: a replay, and a retry reset (which makes a
	// third call pending: the limit bounds new keys, not what clients are
	// already owed).
	if r := b.post("k-p1", `{"tool":"charge","args":{"amount":1}}`); r.status != http.StatusAccepted ||
		r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay over the limit: %d %s", r.status, r.body)
	}
	if r := b.post("k-fail", `{"tool":"fail","args":{"message":"try again","retryable":true}}`); r.status != http.StatusAccepted ||
		r.call(t).Status != "pending" {
		t.Fatalf("retry reset over the limit: %d %s", r.status, r.body)
	}
	// Reads are served.
	if r := b.get("/v1/tool-calls/by-key/k-p2"); r.status != http.StatusOK {
		t.Fatalf("read over the limit: %d", r.status)
	}

	if v := b.metricValue("idemctl_queue_depth"); v != 3 {
		t.Fatalf("queue depth = %v, want 3", v)
	}
	if v := b.metricValue("idemctl_queue_oldest_pending_age_seconds"); !(v > 0) {
		t.Fatalf("oldest pending age = %v, want > 0", v)
	}
	var st wire.Stats
	if err := json.Unmarshal(b.get("/stats").body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Queue.Depth != 3 || st.Queue.MaxPending != 2 || st.Queue.Refused != 1 || !(st.Queue.OldestPendingAgeSeconds > 0) {
		t.Fatalf("/stats queue = %+v, want depth 3, max_pending 2, refused 1, an age", st.Queue)
	}
}

// TestBackPressureOff: NoPendingLimit accepts new keys whatever the queue.
func TestBackPressureOff(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) {
		c.Workers = 1
		c.MaxPending = NoPendingLimit
	})
	b.post("k-busy", `{"tool":"sleep","args":{"seconds":5}}`)
	for _, k := range []string{"k1", "k2", "k3"} {
		if r := b.post(k, `{"tool":"charge","args":{"amount":1}}`); r.status != http.StatusAccepted {
			t.Fatalf("%s without a limit: %d %s", k, r.status, r.body)
		}
	}
	var st wire.Stats
	if err := json.Unmarshal(b.get("/stats").body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Queue.MaxPending != 0 || st.Queue.Refused != 0 {
		t.Fatalf("/stats queue = %+v, want max_pending 0 (unlimited), refused 0", st.Queue)
	}
}
