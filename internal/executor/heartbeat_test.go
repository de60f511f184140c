package executor

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/tool"
)

// lastDetail returns the detail of the last audit row of event for a call,
// failing the test when there is none.
func lastDetail(t *testing.T, st store.Store, callID, event string) string {
	t.Helper()
	rows, err := st.Audit(context.Background(), callID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].Event == event {
			return rows[i].Detail
		}
	}
	t.Fatalf("no %s row in the audit of %s: %+v", event, callID, rows)
	return ""
}

// TestHeartbeatKeepsLongToolOnOneAttempt: a tool that runs three times as
// long as the lease (1 s lease, 3 s sleep) is not re-run: its heartbeats
// keep the lease alive, so it succeeds at attempt 1, nothing is recovered
// or fenced, and the completion's audit row counts the extensions (no row
// per heartbeat). Without heartbeats the lease would expire after 1 s, the
// same server would recover and run the call again, and the first
// attempt's commit would be fenced.
func TestHeartbeatKeepsLongToolOnOneAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *testConfig) { c.Lease = MinLease })
	c := b.submit("k-long", `{"tool":"sleep","args":{"seconds":3}}`)
	done := b.waitFinal(c.CallID)
	if done.Status != "succeeded" || done.Attempt != 1 {
		t.Fatalf("status %s attempt %d, want succeeded at attempt 1", done.Status, done.Attempt)
	}
	want := []string{store.EventCreated, store.EventClaimed, store.EventSucceeded}
	if ev := b.events(c.CallID); strings.Join(ev, ",") != strings.Join(want, ",") {
		t.Fatalf("audit %v, want %v: no recover, no fenced, no row per heartbeat", ev, want)
	}
	if d := lastDetail(t, b.st, c.CallID, store.EventSucceeded); !strings.Contains(d, "; lease extended ") {
		t.Fatalf("succeeded detail %q does not count the lease extensions", d)
	}
	if v := b.metricValue(`idemctl_lease_extensions_total{outcome="extended"}`); v < 1 {
		t.Fatalf("lease extensions = %v, want at least 1", v)
	}
	if v := b.metricValue("idemctl_claim_queries_total"); v < 1 {
		t.Fatalf("claim queries = %v, want at least 1", v)
	}
	for _, series := range []string{"idemctl_fenced_commits_total", `idemctl_lease_recoveries_total{reason="expired"}`} {
		if v := b.metricValue(series); v != 0 {
			t.Fatalf("%s = %v, want 0", series, v)
		}
	}
}

// TestRefusedExtensionCancelsTool: when the call is taken over while its
// tool runs (here: released and claimed by another owner behind the
// server's back), the next heartbeat is refused, the tool's context is
// cancelled (the 10 s sleep ends early) and its completion is fenced: the
// new owner's attempt stays untouched. One worker, busy with the tool, so
// the server cannot claim the released call itself.
func TestRefusedExtensionCancelsTool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	returned := make(chan time.Time, 1)
	b := setup(t, func(c *testConfig) {
		c.Workers = 1
		c.Lease = MinLease
		// Runs after the tool has returned, before the commit.
		c.beforeCommit = func(context.Context, store.Call) { returned <- time.Now() }
	})
	c := b.submit("k-stolen", `{"tool":"sleep","args":{"seconds":10}}`)
	eventually(t, "the server claims the call", func() bool {
		g, err := b.st.GetAny(ctx, c.CallID)
		return err == nil && g.Status == store.StatusRunning
	})
	if err := b.st.Release(ctx, store.Lease{CallID: c.CallID, Owner: b.ex.Owner(), Attempt: 1}, "test: taken over"); err != nil {
		t.Fatal(err)
	}
	thief, err := b.st.ClaimNext(ctx, "thief", time.Hour, 1)
	if err != nil || len(thief) != 1 || thief[0].CallID != c.CallID {
		t.Fatalf("thief's claim = %+v, %v", thief, err)
	}
	stolen := time.Now()

	// The sleep had about 10 s to go: a return within 8 s is the
	// cancellation, not the end of the sleep.
	select {
	case at := <-returned:
		if at.Sub(stolen) > 8*time.Second {
			t.Fatalf("the tool returned %s after the takeover: it was not cancelled", at.Sub(stolen))
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the tool was not cancelled after its lease extension was refused")
	}
	eventually(t, "the stale completion is fenced", func() bool {
		return b.metricValue("idemctl_fenced_commits_total") == 1
	})
	if v := b.metricValue(`idemctl_lease_extensions_total{outcome="lost"}`); v != 1 {
		t.Fatalf("lost extensions = %v, want 1", v)
	}
	if d := lastDetail(t, b.st, c.CallID, store.EventFenced); !strings.Contains(d, "call is running under owner thief attempt 2") {
		t.Fatalf("fenced detail %q, want the thief's attempt named", d)
	}
	g, err := b.st.GetAny(ctx, c.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if g.Status != store.StatusRunning || *g.Owner != "thief" || g.Attempt != 2 {
		t.Fatalf("after the fenced completion: %+v, want running under thief at attempt 2", g)
	}
}

// beatlessStore refuses every lease extension with an error that is not a
// refusal, as a database that does not answer would: the lease is not
// extended, nobody has taken the call over yet.
type beatlessStore struct{ store.Store }

func (beatlessStore) ExtendLease(context.Context, store.Lease, time.Duration) error {
	return errors.New("database away")
}

// TestLeaseCheckedBeforeSending: a tool that asks tool.LeaseHeld before
// its request is told yes while the claim's lease lasts, and no once it
// ran out without an extension (a worker frozen past its lease, or cut off
// from the database, wakes with no lease to send under): its context is
// then cancelled with errLeaseLost, so it sends nothing.
func TestLeaseCheckedBeforeSending(t *testing.T) {
	t.Parallel()
	type answer struct {
		early, late bool
		cause       error
	}
	got := make(chan answer, 4)
	b := setup(t, func(c *testConfig) {
		c.Workers = 1
		c.Lease = MinLease
		c.wrap = func(st store.Store) store.Store { return beatlessStore{st} }
		c.runTool = func(ctx context.Context, _ tool.Invocation) (tool.Outcome, error) {
			var a answer
			a.early = tool.LeaseHeld(ctx)
			time.Sleep(MinLease + MinLease/2)
			a.late = tool.LeaseHeld(ctx)
			a.cause = context.Cause(ctx)
			got <- a
			return tool.Outcome{}, ctx.Err()
		}
	})
	b.submit("k-frozen", `{"tool":"charge","args":{"amount":1}}`)
	a := <-got
	if !a.early || a.late || !errors.Is(a.cause, errLeaseLost) {
		t.Fatalf("LeaseHeld at the start %v, after the lease %v (cause %v); want true, then false with errLeaseLost", a.early, a.late, a.cause)
	}
}

// TestHeartbeatStopWaitsForTheBeatInFlight: stop cancels a beat whose
// extension is in flight and returns only once that extension has
// returned, so no extension races the completion; the cancelled beat is
// neither counted nor reported as an error.
func TestHeartbeatStopWaitsForTheBeatInFlight(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	var returned atomic.Bool
	b := setup(t, func(c *testConfig) {
		c.Lease = MinLease
		c.wrap = func(st store.Store) store.Store {
			return &storefake.Store{Base: st, ExtendLeaseFunc: func(ctx context.Context, l store.Lease, lease time.Duration) error {
				entered <- struct{}{}
				<-ctx.Done() // a database that does not answer until the beat is cancelled
				returned.Store(true)
				return ctx.Err()
			}}
		}
	})
	lose := func(error) { t.Error("the tool was cancelled: a stopped beat must not lose the lease") }
	h := b.ex.startHeartbeat(store.Call{CallID: "c_beat", Attempt: 1}, testLogger(t), lose, time.Now())
	select {
	case <-entered:
	case <-time.After(waitDeadline):
		t.Fatal("no beat started")
	}
	if n := h.stop(); n != 0 {
		t.Fatalf("stop counted %d extensions, want 0: the only one was cancelled", n)
	}
	if !returned.Load() {
		t.Fatal("stop returned while the extension was still in flight")
	}
	if v := b.metricValue(`idemctl_lease_extensions_total{outcome="error"}`); v != 0 {
		t.Fatalf("a beat cancelled by stop was reported as an error (%v)", v)
	}
}
