package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// createN records n pending calls of the suite's tool (charge).
func createN(t *testing.T, s store.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		create(t, s, prefix+string(rune('a'+i)))
	}
}

// testGateRate: Admit grants at most the bucket's tokens and at most the
// ready calls, says when calls were left waiting (Throttled) and how long
// until a token (Wait); Unadmit gives tokens back; a tool without ready
// calls takes no token.
func testGateRate(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	g := store.Gate{Tool: "charge", Rate: &store.Rate{Limit: 1, Per: time.Hour, Burst: 3}}

	a, err := s.Admit(ctx, g, 10)
	if err != nil || a.Granted != 0 || a.Throttled {
		t.Fatalf("Admit with nothing ready = %+v, %v; want nothing granted, not throttled", a, err)
	}
	createN(t, s, "r", 5)
	if a, err = s.Admit(ctx, g, 2); err != nil || a.Granted != 2 || a.Throttled {
		t.Fatalf("Admit(2) of 5 ready, 3 tokens = %+v, %v; want 2 granted, not throttled", a, err)
	}
	if a, err = s.Admit(ctx, g, 10); err != nil || a.Granted != 1 || !a.Throttled {
		t.Fatalf("Admit(10) of 5 ready, 1 token = %+v, %v; want 1 granted, throttled", a, err)
	}
	a, err = s.Admit(ctx, g, 10)
	if err != nil || a.Granted != 0 || !a.Throttled || a.Wait < 50*time.Minute || a.Wait > time.Hour {
		t.Fatalf("Admit with an empty bucket = %+v, %v; want nothing, throttled, a wait of about an hour", a, err)
	}
	if err := s.Unadmit(ctx, g, 2, false); err != nil {
		t.Fatal(err)
	}
	if a, err = s.Admit(ctx, g, 10); err != nil || a.Granted != 2 {
		t.Fatalf("Admit after 2 tokens given back = %+v, %v; want 2", a, err)
	}
	// Give back more than the burst: the bucket holds the burst at most.
	if err := s.Unadmit(ctx, g, 100, false); err != nil {
		t.Fatal(err)
	}
	if a, err = s.Admit(ctx, g, 10); err != nil || a.Granted != 3 {
		t.Fatalf("Admit after giving back 100 = %+v, %v; want the burst, 3", a, err)
	}
	if _, err := s.Admit(ctx, store.Gate{Tool: "charge", Rate: &store.Rate{Limit: 0, Per: time.Second, Burst: 1}}, 1); err == nil {
		t.Error("Admit with a zero limit: want an error")
	}
}

// testGateShared: two stores on one database share one bucket: however
// their admissions interleave, they grant the burst and no more.
func testGateShared(t *testing.T, su suite) {
	stores := su.instances(t, 2)
	createN(t, stores[0], "s", 10)
	g := store.Gate{Tool: "charge", Rate: &store.Rate{Limit: 1, Per: time.Hour, Burst: 4}}
	var (
		mu      sync.Mutex
		granted int
		wg      sync.WaitGroup
	)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := stores[i%2].Admit(t.Context(), g, 1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			granted += a.Granted
			mu.Unlock()
		}()
	}
	wg.Wait()
	if granted != 4 {
		t.Fatalf("two instances granted %d tokens in all, want the burst, 4", granted)
	}

	// The breaker too: failures reported through one instance open it
	// for the other, and the probe after the cooldown is granted once.
	b := store.Gate{Tool: "charge", Breaker: &store.Breaker{Failures: 2, Cooldown: 200 * time.Millisecond}}
	for i := range 2 {
		if _, err := stores[i].ReportAttempt(t.Context(), b, store.AttemptFailed); err != nil {
			t.Fatal(err)
		}
	}
	if a, err := stores[1].Admit(t.Context(), b, 5); err != nil || a.Granted != 0 || a.State.Breaker != store.BreakerOpen {
		t.Fatalf("the other instance's admission after two failures = %+v, %v; want nothing, open", a, err)
	}
	var probes [2]int
	eventually(t, "a probe", func() bool {
		for i := range 2 {
			a, err := stores[i].Admit(t.Context(), b, 5)
			if err != nil {
				t.Fatal(err)
			}
			probes[i] += a.Granted
		}
		return probes[0]+probes[1] > 0
	})
	if probes[0]+probes[1] != 1 {
		t.Fatalf("probes granted %v; want one in all", probes)
	}
}

// testGateBreaker: the breaker opens after Failures retryable failures in
// a row (an answered attempt between them starts the count again), grants
// nothing for the cooldown, then one probe; a failed probe reopens it, an
// unused probe is given back, an answered probe closes it. GateStates
// shows the row.
func testGateBreaker(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	const cooldown = 300 * time.Millisecond
	g := store.Gate{Tool: "charge", Breaker: &store.Breaker{Failures: 2, Cooldown: cooldown}}
	createN(t, s, "b", 3)
	report := func(o store.GateOutcome) store.GateState {
		t.Helper()
		st, err := s.ReportAttempt(ctx, g, o)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	admit := func() store.Admission {
		t.Helper()
		a, err := s.Admit(ctx, g, 5)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	report(store.AttemptFailed)
	if st := report(store.AttemptAnswered); st.Breaker != store.BreakerClosed || st.Failures != 0 {
		t.Fatalf("after an answered attempt: %+v; want closed, count 0", st)
	}
	if st := report(store.AttemptFailed); st.Breaker != store.BreakerClosed || st.Failures != 1 {
		t.Fatalf("after one failure: %+v; want closed, count 1", st)
	}
	if a := admit(); a.Granted != 3 {
		t.Fatalf("closed breaker admitted %+v; want all 3 ready", a)
	}
	opened := time.Now()
	if st := report(store.AttemptFailed); st.Breaker != store.BreakerOpen || st.Failures != 2 {
		t.Fatalf("after two failures in a row: %+v; want open", st)
	}
	if a := admit(); a.Granted != 0 || a.Wait <= 0 || a.Wait > cooldown {
		t.Fatalf("open breaker admitted %+v; want nothing and a wait within the cooldown", a)
	}
	var probe store.Admission
	eventually(t, "the probe after the cooldown", func() bool { probe = admit(); return probe.Granted > 0 })
	if waited := time.Since(opened); waited < cooldown {
		t.Fatalf("probe after %v, before the cooldown %v", waited, cooldown)
	}
	if probe.Granted != 1 || !probe.Probe || probe.State.Breaker != store.BreakerHalfOpen {
		t.Fatalf("after the cooldown: %+v; want one probe, half-open", probe)
	}
	if a := admit(); a.Granted != 0 {
		t.Fatalf("a second admission while the probe is out: %+v; want nothing", a)
	}
	if st := report(store.AttemptFailed); st.Breaker != store.BreakerOpen {
		t.Fatalf("after the probe failed: %+v; want open again", st)
	}
	if a := admit(); a.Granted != 0 {
		t.Fatalf("reopened breaker admitted %+v; want nothing", a)
	}
	eventually(t, "the second probe", func() bool { probe = admit(); return probe.Granted > 0 })
	if err := s.Unadmit(ctx, g, probe.Granted, true); err != nil {
		t.Fatal(err)
	}
	if a := admit(); a.Granted != 1 || !a.Probe {
		t.Fatalf("after an unused probe was given back: %+v; want the probe at once", a)
	}
	if st := report(store.AttemptAnswered); st.Breaker != store.BreakerClosed || st.Failures != 0 {
		t.Fatalf("after the probe succeeded: %+v; want closed", st)
	}
	if a := admit(); a.Granted != 3 {
		t.Fatalf("closed again, admitted %+v; want all 3 ready", a)
	}
	states, err := s.GateStates(ctx)
	if err != nil || len(states) != 1 || states[0].Tool != "charge" || states[0].Breaker != store.BreakerClosed {
		t.Fatalf("GateStates = %+v, %v; want charge's row, closed", states, err)
	}
}
