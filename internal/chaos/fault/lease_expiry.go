package fault

// The lease-expiry scenario: a worker paused past its lease is fenced.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

// Settings of the lease-expiry scenario.
const (
	// leaseExpiryLease and leaseExpiryPause: server A's worker pauses well
	// past its lease, long enough for server B to see the lease expire
	// (up to one 200ms recovery tick late), claim the call and commit
	// before A wakes. B is a new process (start, open, migrate): on a
	// loaded 2-core machine that alone took over 2 s, so the pause leaves
	// it 5 s.
	leaseExpiryLease = time.Second
	leaseExpiryPause = 6.0 // seconds, _pause_before_commit
	// leaseExpiryHostA and leaseExpiryHostB are the servers'
	// --instance-host: different hosts never judge each other's pids, so
	// only the lease can hand A's call to B (A is alive anyway).
	leaseExpiryHostA = "fault-host-a"
	leaseExpiryHostB = "fault-host-b"
)

var leaseExpiry = scenario{
	name:  "lease-expiry",
	title: "a worker pauses past its lease after running the charge (_pause_before_commit, like a long GC pause); a second server takes the call over and commits, and the paused worker's late commit is fenced",
	plan: []string{
		"make a temp dir and database; start server A: `idemctl serve --chaos --lease 1s --workers 1 --instance-host " + leaseExpiryHostA + "` on a free loopback port (one worker: A cannot take its own call back)",
		"client: POST to A, key lease-<unix time>, charge amount 100 with _pause_before_commit=6",
		"A claims the call (attempt 1), runs the charge and pauses before its commit; its lease runs out meanwhile",
		"once A has claimed, start server B on the same database: `idemctl serve --chaos --lease 1s --instance-host " + leaseExpiryHostB + "` (another host: no dead-owner shortcut; A is alive anyway)",
		"the expired lease goes back to pending (audit recover); B claims attempt 2 (the pause fires on attempt 1 only), runs the charge and commits it with its effect",
		"A wakes and tries to commit attempt 1: the commit is fenced on (owner, attempt) and refused (audit fenced), no second effect",
		"print calls, effects, audit and dupes from the database, and /stats",
		"PASS when calls=1, effects=1, the call succeeded at attempt 2 claimed by B, exactly one completion committed, and A's stale one was fenced",
	},
	run: runLeaseExpiry,
}

func runLeaseExpiry(ctx context.Context, e *env, rep *Report) error {
	a, err := e.startServer(ctx, serverOpts{label: "server A", chaos: true, lease: leaseExpiryLease,
		workers: 1, instanceHost: leaseExpiryHostA})
	if err != nil {
		return err
	}
	e.logf("server A: %s (pid %d)", a.CommandLine(), a.Pid())
	key := fmt.Sprintf("lease-%d", time.Now().Unix())
	ca, err := e.client(a.URL, "")
	if err != nil {
		return err
	}
	args := chargeArgs(100)
	args[tool.ArgPauseBeforeCommit] = leaseExpiryPause
	e.logf("client: POST key %s to A, charge 100 with %s=%g (lease %s)", key, tool.ArgPauseBeforeCommit, leaseExpiryPause, leaseExpiryLease)
	res, err := ca.Submit(ctx, builtin.Charge, args, client.WithKey(key))
	rep.Attempts = len(res.Attempts)
	if err != nil {
		return fmt.Errorf("posting the call to server A: %w", err)
	}
	callID := res.Call.CallID
	answers := answeredIDs(res)

	// B starts only once A has claimed: B must not win attempt 1.
	var seen client.Call
	err = waitFor(ctx, 5*time.Second, func() (bool, error) {
		seen, err = ca.Get(ctx, callID)
		return err == nil && seen.Status != wire.StatusPending, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("server A never claimed %s: %w", callID, err)
	}
	if seen.Status != wire.StatusRunning || seen.Attempt != 1 {
		rep.fail("the fault did not happen as planned: the call was %s at attempt %d before B started, want running at attempt 1", seen.Status, seen.Attempt)
	}
	e.logf("server A claimed attempt %d and pauses before its commit; its %s lease runs out meanwhile", seen.Attempt, leaseExpiryLease)

	b, err := e.startServer(ctx, serverOpts{label: "server B", chaos: true, lease: leaseExpiryLease,
		instanceHost: leaseExpiryHostB})
	if err != nil {
		return err
	}
	e.logf("server B: %s (pid %d), same database", b.CommandLine(), b.Pid())
	cb, err := e.client(b.URL, "")
	if err != nil {
		return err
	}
	final, err := e.settle(ctx, cb, client.Call{Call: client.CallObject{CallID: callID}})
	if err != nil {
		if err := notFinal(ctx, rep, callID, err); err != nil {
			return err
		}
	}
	answers = append(answers, final.CallID)

	e.logf("waiting for server A to wake up and try to commit attempt 1 under the lease it lost")
	st, err := e.openDB(ctx)
	if err != nil {
		return err
	}
	var fenced *store.AuditEvent
	err = waitFor(ctx, 10*time.Second, func() (bool, error) {
		events, err := st.Audit(ctx, callID, 0)
		fenced = firstEvent(events, store.EventFenced)
		return fenced != nil, err
	})
	st.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		e.logf("no fenced row: %v", err)
	} else {
		e.logf("server A's late commit was fenced: %s", fenced.Detail)
	}

	ev, err := e.evidence(ctx, b.URL, rep, expect{calls: 1, effects: 1}, answers)
	if err != nil {
		return err
	}
	if final.CallID != "" && final.Status != wire.StatusSucceeded {
		rep.fail("the call ended %q, want succeeded", final.Status)
	}
	if rep.Attempt != 2 {
		rep.fail("attempt=%d, want 2 (A's, then B's after the lease expired)", rep.Attempt)
	}
	if n := countEvents(ev.events, store.EventSucceeded); n != 1 {
		rep.fail("%d completions committed, want exactly 1", n)
	}
	if rep.Fenced < 1 {
		rep.fail("the paused worker's stale commit was not fenced (no fenced row in the audit)")
	}
	checkTakeover(rep, ev.events)
	return nil
}

// checkTakeover checks the audit tells the planned story: A claimed, the
// lease expired (recover), B claimed, B's completion committed, and only
// then A's commit was fenced. Anything else means the fault did not happen
// as planned (A woke before B could take over, say), even if the
// invariants held. The recover row, and the outcome_unknown row of the
// abandoned attempt written with it, are optional: a claim may take a
// running call whose lease has just expired directly, between a
// scheduler's recovery pass and its claim.
func checkTakeover(rep *Report, events []store.AuditEvent) {
	var claims, story []string
	for _, ev := range events {
		// A claims at creation when a worker is free, or through its
		// scheduler: a claim either way (store.ClaimOf).
		if owner, ok := store.ClaimOf(ev); ok {
			claims = append(claims, owner)
			story = append(story, store.EventClaimed)
			continue
		}
		if ev.Event != store.EventCreated && ev.Event != store.EventRecover && ev.Event != store.EventOutcomeUnknown {
			story = append(story, ev.Event)
		}
	}
	by := func(i int, host string) bool {
		return len(claims) > i && strings.HasPrefix(claims[i], host+":")
	}
	if !by(0, leaseExpiryHostA) || !by(1, leaseExpiryHostB) || len(claims) != 2 {
		rep.fail("the fault did not happen as planned: want attempt 1 claimed by A (%s) and attempt 2 by B (%s), the audit has %d claim(s)",
			leaseExpiryHostA, leaseExpiryHostB, len(claims))
	}
	want := []string{store.EventClaimed, store.EventClaimed, store.EventSucceeded, store.EventFenced}
	if !slices.Equal(story, want) {
		rep.fail("the fault did not happen as planned: audit %s (recover and outcome_unknown rows left out), want %s",
			strings.Join(story, " → "), strings.Join(want, " → "))
	}
}
