package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// quiet makes the scheduler tick only at start and when woken, so that a
// test knows when it is not claiming (waitIdle): a reservation is refused
// while it claims (executor.Reserve), and the call would take the usual
// path.
func quiet(c *Config) { c.RecoverInterval = time.Hour }

// waitIdle waits until the scheduler of a quiet server has finished its
// first round: a reservation is granted (and given back).
func waitIdle(t *testing.T, b *bundle) {
	t.Helper()
	// The first round has claimed (the counter) and given its held slots
	// back (a reservation succeeds again); a reservation that succeeds
	// before the round began proves nothing.
	eventually(t, "the scheduler to be idle", func() bool {
		if b.metricValue("idemctl_claim_queries_total") < 1 {
			return false
		}
		r, ok := b.srv.exec.Reserve("charge")
		r.Release()
		return ok
	})
}

// firstRow is the call's first audit row.
func firstRow(t *testing.T, b *bundle, callID string) store.AuditEvent {
	t.Helper()
	rows, err := b.st.Audit(context.Background(), callID, 0)
	if err != nil || len(rows) == 0 {
		t.Fatalf("Audit(%s) = %v, %v", callID, rows, err)
	}
	return rows[0]
}

// TestClaimAtCreation: with a worker free, a new key's POST claims the
// call in its create: the 202 shows it running at attempt 1 under this
// server's owner, its one created row records the claim, the scheduler
// never claims it, and it succeeds at attempt 1. A replay of the key
// claims nothing more.
func TestClaimAtCreation(t *testing.T) {
	t.Parallel()
	b := setup(t, quiet)
	waitIdle(t, b)
	r := b.post("k-claim", `{"tool":"sleep","args":{"seconds":0.2}}`)
	c := r.call(t)
	if r.status != http.StatusAccepted || c.Status != wire.StatusRunning || c.Attempt != 1 {
		t.Fatalf("POST = %d %s attempt %d, want 202 running at attempt 1", r.status, c.Status, c.Attempt)
	}
	if owner, ok := store.ClaimOf(firstRow(t, b, c.CallID)); !ok || owner != b.srv.Owner() {
		t.Fatalf("created row claims %q (%v), want this server's owner %s", owner, ok, b.srv.Owner())
	}
	done := b.waitFinal(c.CallID)
	if done.Status != wire.StatusSucceeded || done.Attempt != 1 {
		t.Fatalf("call = %s at attempt %d, want succeeded at attempt 1", done.Status, done.Attempt)
	}
	if got := b.post("k-claim", `{"tool":"sleep","args":{"seconds":0.2}}`); got.status != http.StatusOK {
		t.Fatalf("replay = %d, want 200", got.status)
	}
	rows, err := b.st.Audit(context.Background(), c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].Event != store.EventSucceeded {
		t.Fatalf("audit %+v, want created (claimed at creation), succeeded", rows)
	}
	if v := b.metricValue("idemctl_claimed_at_creation_total"); v != 1 {
		t.Fatalf("idemctl_claimed_at_creation_total = %v, want 1", v)
	}
}

// TestClaimAtCreationMCP: the MCP door's tools/call shares the create
// path, and claims at creation too.
func TestClaimAtCreationMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, quiet)
	waitIdle(t, b)
	cs := mustMCP(t, b, "")
	res := callTool(t, cs, "charge", map[string]any{"amount": 1}, map[string]any{mcpdoor.MetaKey: "mcp-claim"})
	if res.IsError {
		t.Fatalf("tools/call: %+v", structured(t, res))
	}
	c, err := b.st.GetByKey(context.Background(), store.DefaultPrincipal, "mcp-claim")
	if err != nil {
		t.Fatal(err)
	}
	if owner, ok := store.ClaimOf(firstRow(t, b, c.CallID)); !ok || owner != b.srv.Owner() || c.Via != store.ViaMCP {
		t.Fatalf("call %+v: created row claims %q (%v), want a claim at creation by %s through the MCP door", c, owner, ok, b.srv.Owner())
	}
}

// TestClaimAtCreationOff: with NoClaimAtCreate (serve
// --claim-at-create=false) a new call is created pending and claimed by
// the scheduler, as before.
func TestClaimAtCreationOff(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.NoClaimAtCreate = true })
	r := b.post("k-off", `{"tool":"charge","args":{"amount":1}}`)
	c := r.call(t)
	if r.status != http.StatusAccepted || c.Status != wire.StatusPending || c.Attempt != 0 {
		t.Fatalf("POST = %d %s attempt %d, want 202 pending at attempt 0", r.status, c.Status, c.Attempt)
	}
	if _, ok := store.ClaimOf(firstRow(t, b, c.CallID)); ok {
		t.Fatal("created row claims with claim at creation off")
	}
	b.waitFinal(c.CallID)
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventSucceeded)
	if v := b.metricValue("idemctl_claimed_at_creation_total"); v != 0 {
		t.Fatalf("idemctl_claimed_at_creation_total = %v, want 0", v)
	}
}

// TestClaimAtCreationNoFreeWorker: with every worker busy, a new call is
// created pending and waits; it runs once a worker is free, claimed by
// the scheduler. (That a pending call is not overtaken by a claim at
// creation is TestReservePendingWaits, in package executor.)
func TestClaimAtCreationNoFreeWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, quiet, func(c *Config) { c.Workers = 1 })
	waitIdle(t, b)
	busy := b.post("k-busy", `{"tool":"sleep","args":{"seconds":0.5}}`).call(t)
	if busy.Status != wire.StatusRunning {
		t.Fatalf("first call %s, want running (claimed at creation)", busy.Status)
	}
	waiting := b.post("k-waiting", `{"tool":"charge","args":{"amount":1}}`).call(t)
	if waiting.Status != wire.StatusPending {
		t.Fatalf("second call %s with no worker free, want pending", waiting.Status)
	}
	b.waitFinal(waiting.CallID)
	wantEvents(t, b.events(waiting.CallID), store.EventCreated, store.EventClaimed, store.EventSucceeded)
	if _, ok := store.ClaimOf(firstRow(t, b, waiting.CallID)); ok {
		t.Fatal("the waiting call's created row claims")
	}
}

// TestClaimAtCreationGuardedTool: a tool with a rate limit keeps the
// usual path (admitted through the store, then claimed by the scheduler).
func TestClaimAtCreationGuardedTool(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) {
		c.Policies = func(tool string) executor.ToolPolicy {
			p := executor.DefaultToolPolicy()
			if tool == "charge" {
				p.Rate = &store.Rate{Limit: 100, Per: time.Second, Burst: 100}
			}
			return p
		}
	})
	c := b.post("k-guarded", `{"tool":"charge","args":{"amount":1}}`).call(t)
	if c.Status != wire.StatusPending {
		t.Fatalf("guarded call %s, want pending", c.Status)
	}
	b.waitFinal(c.CallID)
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventSucceeded)
}
