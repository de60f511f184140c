package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// reserving is an executor that takes reservations with no scheduler
// running: nothing but the test moves its slots, so every answer of
// Reserve is the one its state decides.
func reserving(t *testing.T, opts ...func(*testConfig)) *Executor {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	tc := testConfig{Logger: testLogger(t)}
	for _, o := range opts {
		o(&tc)
	}
	e, err := New(tc.Config, Deps{Store: st, Logger: tc.Logger})
	if err != nil {
		t.Fatal(err)
	}
	e.reserving = true
	return e
}

func mustReserve(t *testing.T, e *Executor, tool string) *Reservation {
	t.Helper()
	r, ok := e.Reserve(tool)
	if !ok || r == nil {
		t.Fatalf("Reserve(%s) refused; running %d", tool, e.limit.running())
	}
	return r
}

func refused(t *testing.T, e *Executor, tool, why string) {
	t.Helper()
	if r, ok := e.Reserve(tool); ok || r != nil {
		t.Fatalf("Reserve(%s) granted %s", tool, why)
	}
}

// TestReserveFreeSlots: a reservation takes a slot under --workers;
// without a free slot Reserve refuses, and Release gives the slot back
// once, however often it is called.
func TestReserveFreeSlots(t *testing.T) {
	t.Parallel()
	e := reserving(t, func(c *testConfig) { c.Workers = 2 })
	a := mustReserve(t, e, builtin.Charge)
	b := mustReserve(t, e, builtin.Charge)
	refused(t, e, builtin.Charge, "with every worker reserved")
	refused(t, e, builtin.SendEmail, "with every worker reserved, for another tool")
	a.Release()
	a.Release()
	if n := e.limit.running(); n != 1 {
		t.Fatalf("slots taken after a double Release = %d, want 1", n)
	}
	c := mustReserve(t, e, builtin.SendEmail)
	refused(t, e, builtin.Charge, "with every worker reserved again")
	b.Release()
	c.Release()
	if n := e.limit.running(); n != 0 {
		t.Fatalf("slots taken after every Release = %d, want 0", n)
	}
}

// TestReserveToolCap: a tool at its concurrency cap is refused while
// other tools are not.
func TestReserveToolCap(t *testing.T) {
	t.Parallel()
	e := reserving(t, withPolicy(builtin.Sleep, ToolPolicy{MaxAttempts: 1, Concurrency: 1}))
	s := mustReserve(t, e, builtin.Sleep)
	refused(t, e, builtin.Sleep, "past the tool's concurrency cap")
	mustReserve(t, e, builtin.Charge).Release()
	s.Release()
	mustReserve(t, e, builtin.Sleep).Release()
}

// TestReserveGuardedTool: a tool with a rate limit or a breaker is never
// reserved: its calls are admitted through the store before a claim.
func TestReserveGuardedTool(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]ToolPolicy{
		"rate":    {MaxAttempts: 1, Rate: &store.Rate{Limit: 100, Per: time.Second, Burst: 100}},
		"breaker": {MaxAttempts: 1, Breaker: &store.Breaker{Failures: 5, Cooldown: time.Second}},
	} {
		e := reserving(t, withPolicy(builtin.Charge, p))
		refused(t, e, builtin.Charge, "for a tool with a "+name)
		mustReserve(t, e, builtin.SendEmail).Release()
	}
}

// TestReservePendingWaits: while a pending call waits (this instance's
// view of the queue), a new call does not jump it.
func TestReservePendingWaits(t *testing.T) {
	t.Parallel()
	e := reserving(t)
	e.Added()
	refused(t, e, builtin.Charge, "while a call is pending")
	e.queue.claimed(1)
	mustReserve(t, e, builtin.Charge).Release()
}

// TestReserveWhileClaiming: a claim round in flight holds the slots it
// may fill and its capped tools' quotas: a reservation takes only the
// headroom the round left out, and none of a capped tool; the pending
// calls the round covers do not count as waiting, those beyond it do.
// Once the round ended, the slots it did not fill are free again.
func TestReserveWhileClaiming(t *testing.T) {
	t.Parallel()
	e := reserving(t, func(c *testConfig) { c.Workers = 8 }, withPolicy(builtin.Sleep, ToolPolicy{MaxAttempts: 1, Concurrency: 3}))
	limit, quotas := e.limit.beginRound()
	if limit != 6 || len(quotas) != 1 || quotas[0] != (store.ToolQuota{Tool: builtin.Sleep, Max: 3}) {
		t.Fatalf("beginRound = %d, %v; want 6 of 8 free (a quarter left out) and sleep's quota 3", limit, quotas)
	}
	e.queue.cover(limit)
	for range 6 {
		e.Added() // pending calls the round covers
	}
	a := mustReserve(t, e, builtin.Charge)
	b := mustReserve(t, e, builtin.Charge)
	refused(t, e, builtin.Charge, "out of the slots the round holds")
	a.Release()
	refused(t, e, builtin.Sleep, "of a capped tool whose quota the round holds")
	e.Added() // one pending call more than the round covers
	refused(t, e, builtin.Charge, "while a pending call waits beyond the round")

	e.limit.endRound([]store.Call{{Tool: builtin.Charge}, {Tool: builtin.Sleep}})
	e.queue.claimed(7)
	e.queue.cover(0)
	if n := e.limit.running(); n != 3 {
		t.Fatalf("slots taken after the round = %d, want 3 (two claimed, one reserved)", n)
	}
	s := mustReserve(t, e, builtin.Sleep)
	s2 := mustReserve(t, e, builtin.Sleep)
	refused(t, e, builtin.Sleep, "past sleep's cap of 3")
	for _, r := range []*Reservation{b, s, s2} {
		r.Release()
	}
}

// TestReserveStopped: an executor that has not started, or is stopping,
// reserves nothing.
func TestReserveStopped(t *testing.T) {
	t.Parallel()
	e := reserving(t)
	e.reserving = false
	refused(t, e, builtin.Charge, "before Start")

	b := setup(t)
	eventually(t, "a reservation on a started executor", func() bool {
		r, ok := b.ex.Reserve(builtin.Charge)
		r.Release()
		return ok
	})
	if err := b.ex.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	refused(t, b.ex, builtin.Charge, "after Shutdown")
}

// TestReservationStart: a call created with a reservation's claim runs on
// it at once, as a claimed call does (no claim by the scheduler: the
// audit is created, succeeded), counted busy while it runs, observed as
// attempt 1 and as claimed at creation; the slot comes back when it ends.
// A second Start, or a Release after it, does nothing.
func TestReservationStart(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *testConfig) { c.Workers = 1 })
	var r *Reservation
	eventually(t, "a reservation", func() bool {
		var ok bool
		r, ok = b.ex.Reserve(builtin.Charge)
		return ok
	})
	c := submitWith(t, b.st, nil, "k1", `{"tool":"charge","args":{"amount":5}}`, func(n *store.NewCall) { n.Claim = r.Claim() })
	if c.Status != store.StatusRunning || c.Owner == nil || *c.Owner != b.ex.Owner() {
		t.Fatalf("created %+v, want running under %s", c, b.ex.Owner())
	}
	if !r.Start(c) {
		t.Fatal("Start refused a call claimed on its reservation")
	}
	if r.Start(c) {
		t.Fatal("a second Start ran the call again")
	}
	r.Release()
	done := b.waitFinal(c.CallID)
	if done.Status != store.StatusSucceeded || done.Attempt != 1 {
		t.Fatalf("call = %+v, want succeeded at attempt 1", done)
	}
	if got, want := b.events(c.CallID), []string{store.EventCreated, store.EventSucceeded}; !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	eventually(t, "the slot to come back", func() bool { return b.ex.limit.running() == 0 })
	if v := b.metricValue("idemctl_claimed_at_creation_total"); v != 1 {
		t.Fatalf("idemctl_claimed_at_creation_total = %v, want 1", v)
	}
	if v := b.metricValue("idemctl_execution_attempt_count"); v != 1 {
		t.Fatalf("idemctl_execution_attempt_count = %v, want 1", v)
	}
	if v := b.metricValue("idemctl_workers_busy"); v != 0 {
		t.Fatalf("idemctl_workers_busy = %v, want 0", v)
	}
}

// TestReservationStartUnclaimed: Start of a call the create did not claim
// on the reservation (a replay's pending call) runs nothing and gives the
// slot back.
func TestReservationStartUnclaimed(t *testing.T) {
	t.Parallel()
	e := reserving(t, func(c *testConfig) { c.Workers = 1 })
	other, own := "someone-else", e.owner
	for _, c := range []store.Call{
		{CallID: "c_1", Tool: builtin.Charge, Status: store.StatusPending},
		{CallID: "c_1", Tool: builtin.Charge, Status: store.StatusSucceeded, Attempt: 1, Owner: &own},
		{CallID: "c_1", Tool: builtin.Charge, Status: store.StatusRunning, Attempt: 1, Owner: &other},
		{CallID: "c_1", Tool: builtin.Charge, Status: store.StatusRunning, Attempt: 2, Owner: &own},
		{CallID: "c_1", Tool: builtin.SendEmail, Status: store.StatusRunning, Attempt: 1, Owner: &own},
	} {
		r := mustReserve(t, e, builtin.Charge)
		if r.Start(c) {
			t.Fatalf("Start ran %+v", c)
		}
		if n := e.limit.running(); n != 0 {
			t.Fatalf("slots taken after Start of %+v = %d, want 0", c, n)
		}
	}
}

// TestReserveAndSchedulerShareTheLimits: calls submitted as the server
// submits them (Reserve, create with the claim, Start, or else Release
// and pending for the scheduler), their tools held running until all are
// in, never run more than --workers at once, nor more sleeps than
// sleep's cap; the first ones start at creation, the rest wait for the
// scheduler, and every call ends.
func TestReserveAndSchedulerShareTheLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		workers    int
		want       int64 // the most that may run at once
	}{
		{"workers", `{"tool":"charge","args":{"amount":1}}`, 4, 4},
		{"tool cap", `{"tool":"sleep","args":{"seconds":0}}`, 8, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := &concurrencyProbe{gate: make(chan struct{})}
			b := setup(t, withPolicy(builtin.Sleep, ToolPolicy{MaxAttempts: 1, Concurrency: 2}), func(c *testConfig) {
				c.Workers = tc.workers
				// The scheduler claims only at start and when woken, so
				// no claim round of its own holds slots while the first
				// calls are reserved.
				c.RecoverInterval = time.Hour
				c.runTool = func(ctx context.Context, inv tool.Invocation) (tool.Outcome, error) {
					probe.run(ctx)
					return builtin.Run(ctx, inv)
				}
			})
			t.Cleanup(probe.open)
			var tl struct{ Tool string }
			if err := json.Unmarshal([]byte(tc.body), &tl); err != nil {
				t.Fatal(err)
			}
			// The first round has claimed (the counter) and given its held
			// slots back (a reservation succeeds again); a reservation
			// that succeeds before the round began proves nothing.
			eventually(t, "the scheduler's first round to end", func() bool {
				if counterValue(t, b.ex.m.claimQueries) < 1 {
					return false
				}
				r, ok := b.ex.Reserve(tl.Tool)
				r.Release()
				return ok
			})
			var ids []string
			atCreation := int64(0)
			for i := range 2 * tc.workers {
				r, ok := b.ex.Reserve(tl.Tool)
				c := submitWith(t, b.st, nil, fmt.Sprintf("k-%d", i), tc.body, func(nc *store.NewCall) { nc.Claim = r.Claim() })
				if ok && r.Start(c) {
					atCreation++
				} else {
					b.ex.Added()
					b.ex.Wake()
				}
				ids = append(ids, c.CallID)
			}
			eventually(t, "the first calls to run", func() bool { return probe.cur.Load() == tc.want })
			if atCreation != tc.want {
				t.Fatalf("%d calls claimed at creation, want the first %d", atCreation, tc.want)
			}
			probe.open()
			for _, id := range ids {
				if c := b.waitFinal(id); c.Status != store.StatusSucceeded {
					t.Fatalf("call %s: %s", id, c.Status)
				}
			}
			if m := probe.max.Load(); m > tc.want {
				t.Fatalf("%d calls ran at once, want at most %d", m, tc.want)
			}
		})
	}
}

// TestWakeWithNothingPending: a wake-up with no call pending by the
// instance's count claims nothing (no claim query); one with a call
// pending claims it. Calls claimed at creation end with nothing pending,
// and their runs' wake-ups cost no statement.
func TestWakeWithNothingPending(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *testConfig) { c.RecoverInterval = time.Hour })
	eventually(t, "the first round", func() bool { return b.metricValue("idemctl_claim_queries_total") == 1 })
	for i := range 5 {
		r, ok := b.ex.Reserve(builtin.Charge)
		if !ok {
			t.Fatal("Reserve refused with every worker free")
		}
		c := submitWith(t, b.st, nil, fmt.Sprintf("k-%d", i), `{"tool":"charge","args":{"amount":1}}`, func(n *store.NewCall) { n.Claim = r.Claim() })
		r.Start(c)
		b.waitFinal(c.CallID)
		b.ex.Wake()
	}
	// A pending call: its wake-up claims, after every earlier one was
	// taken (the channel holds one).
	p := b.submit("k-pending", `{"tool":"charge","args":{"amount":1}}`)
	b.waitFinal(p.CallID)
	eventually(t, "the pending call's claim to be counted", func() bool { return b.metricValue("idemctl_claim_queries_total") >= 2 })
	if v := b.metricValue("idemctl_claim_queries_total"); v != 2 {
		t.Fatalf("idemctl_claim_queries_total = %v, want 2: the first round and the pending call's", v)
	}
}

// TestClaimAtCreationLeaseCountsFromTheCreate: the lease of a call
// claimed at creation counts, by this process's clock, from before the
// create was sent: a server frozen between its create and the start of
// the run (here: a reservation taken a lease ago) starts with no lease to
// send under, and its tool is told so before any request (LeaseHeld
// false, cancelled with errLeaseLost).
func TestClaimAtCreationLeaseCountsFromTheCreate(t *testing.T) {
	t.Parallel()
	type answer struct {
		held  bool
		cause error
	}
	got := make(chan answer, 1)
	b := setup(t, func(c *testConfig) {
		c.Lease = MinLease
		c.RecoverInterval = time.Hour
		c.runTool = func(ctx context.Context, _ tool.Invocation) (tool.Outcome, error) {
			a := answer{held: tool.LeaseHeld(ctx)}
			a.cause = context.Cause(ctx)
			got <- a
			return tool.Outcome{}, ctx.Err()
		}
	})
	var r *Reservation
	eventually(t, "a reservation", func() bool {
		var ok bool
		r, ok = b.ex.Reserve(builtin.Charge)
		return ok
	})
	r.at = r.at.Add(-MinLease) // the freeze, a whole lease long
	c := submitWith(t, b.st, nil, "k-frozen", `{"tool":"charge","args":{"amount":1}}`, func(n *store.NewCall) { n.Claim = r.Claim() })
	if !r.Start(c) {
		t.Fatal("Start refused the call claimed on its reservation")
	}
	if a := <-got; a.held || !errors.Is(a.cause, errLeaseLost) {
		t.Fatalf("LeaseHeld %v (cause %v) a lease after the create was sent; want false with errLeaseLost", a.held, a.cause)
	}
}

// counterValue reads a counter through a registry of its own.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v (%d families)", err, len(mfs))
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

// TestWorkerRunsTheNextCall: a call claimed while a worker is idle runs on
// that worker, not on a new goroutine, and Shutdown returns with every
// worker ended.
func TestWorkerRunsTheNextCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.ex.workers
	first := b.submit("k-worker-1", `{"tool":"charge","args":{"amount":1}}`)
	if done := b.waitFinal(first.CallID); done.Status != store.StatusSucceeded {
		t.Fatalf("first call %s", done.Status)
	}
	deadline := time.Now().Add(waitDeadline)
	for p.idle.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("idle workers %d, want the first call's", p.idle.Load())
		}
		time.Sleep(time.Millisecond)
	}
	second := b.submit("k-worker-2", `{"tool":"charge","args":{"amount":1}}`)
	if done := b.waitFinal(second.CallID); done.Status != store.StatusSucceeded {
		t.Fatalf("second call %s", done.Status)
	}
	if n := p.live.Load(); n != 1 {
		t.Fatalf("%d worker goroutines ran two calls one after the other, want 1", n)
	}
	if err := b.ex.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := p.live.Load(); n != 0 {
		t.Fatalf("%d worker goroutines left after Shutdown", n)
	}
}
