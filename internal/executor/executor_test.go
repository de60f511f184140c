package executor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// TestLeaseTakeoverFencesStaleWorker: a worker paused past its lease (a GC
// pause, a stalled VM) loses the call to another server; the other's
// completion is the only one that lands, the stale one is fenced, and there
// is exactly one effect (docs/design.md, "The attempt as fencing token").
func TestLeaseTakeoverFencesStaleWorker(t *testing.T) {
	t.Parallel()
	paused := make(chan store.Call, 1)
	resume := make(chan struct{})
	var once sync.Once
	a := setup(t, func(c *testConfig) {
		c.Workers = 1
		c.Lease = MinLease
		c.beforeCommit = func(_ context.Context, call store.Call) {
			once.Do(func() {
				paused <- call
				<-resume // the pause: the lease runs out meanwhile
			})
		}
	})
	c := a.submit("k-takeover", `{"tool":"charge","args":{"amount":42}}`)
	var stale store.Call
	select {
	case stale = <-paused:
	case <-time.After(waitDeadline):
		t.Fatal("worker A never reached its commit")
	}

	// Server B: same database, another owner, a normal lease.
	b := setupOn(t, a.dbPath)
	if a.ex.Owner() == b.ex.Owner() {
		t.Fatalf("two servers share owner %s", a.ex.Owner())
	}
	done := b.waitFinal(c.CallID)
	if done.Status != "succeeded" || done.Attempt != 2 {
		t.Fatalf("takeover: status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}

	close(resume) // A wakes up and tries to commit attempt 1
	eventually(t, "A's stale commit is fenced", func() bool {
		return a.metricValue("idemctl_fenced_commits_total") == 1
	})
	if ev := b.events(c.CallID); !contains(ev, store.EventFenced) {
		t.Fatalf("audit %v lacks fenced", ev)
	}
	after, err := b.st.GetAny(context.Background(), c.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != store.StatusSucceeded || after.Attempt != 2 || stale.Attempt != 1 {
		t.Fatalf("after the stale commit: status %s attempt %d (stale attempt %d)", after.Status, after.Attempt, stale.Attempt)
	}
	if s := b.stats(); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
}

// TestDeadOwnerRecoveredWithoutWaitingForLease: a running call whose owner
// is a process of this host that no longer exists is released at once —
// its lease has an hour left, so only dead-owner recovery can finish it.
func TestDeadOwnerRecoveredWithoutWaitingForLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host := selfHost(t)
	// pid_max is at most 2^22 on Linux: this pid cannot exist.
	dead := fmt.Sprintf("%s:%d:1/1", host, 1<<30)
	db := filepath.Join(t.TempDir(), "idem.db")
	id := claimWithOwner(t, db, "k-dead-owner", dead, time.Hour)
	b := setupOn(t, db, func(c *testConfig) { c.Workers = 1 })
	if !b.ex.deadOwners {
		t.Skipf("dead-owner recovery is off on this machine: %s", b.ex.whyNoDeadOwners)
	}
	done := b.waitFinal(id)
	if done.Status != "succeeded" || done.Attempt != 2 {
		t.Fatalf("status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}
	rows, err := b.st.Audit(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var recovered bool
	for _, r := range rows {
		if r.Event == store.EventRecover && strings.Contains(r.Detail, "owner process gone") {
			recovered = true
		}
	}
	if !recovered {
		t.Fatalf("no recover event naming the dead owner: %+v", rows)
	}
	if v := b.metricValue(`idemctl_lease_recoveries_total{reason="dead_owner"}`); v != 1 {
		t.Fatalf("dead_owner recoveries = %v, want 1", v)
	}
}

// TestHiddenOwnerNotReleased: with /proc mounted hidepid=invisible, a live
// instance of another user is simply absent from it. The server must not
// take that for a dead owner: the call keeps its owner and attempt until its
// lease expires, and the mode is visible in /metrics. The same fake /proc
// without hidepid releases the call at once (so the test can fail).
func TestHiddenOwnerNotReleased(t *testing.T) {
	ctx := context.Background()
	// pid 4242 runs (as another user) but is not in the fake tree: hidden.
	const owner = "node-a:4242:99/1"
	for _, tc := range []struct {
		superOpts string
		released  bool
	}{
		{"rw,hidepid=invisible", false},
		{"rw", true},
	} {
		t.Run(tc.superOpts, func(t *testing.T) {
			root := t.TempDir()
			proc := fakeProcAt(t, root, map[int][2]string{
				1:           {"S", "1"},
				os.Getpid(): {"R", "777"},
			})
			fakeMountinfo(t, root, procMount(root, tc.superOpts))
			db := filepath.Join(t.TempDir(), "idem.db")
			id := claimWithOwner(t, db, "k-hidden-owner", owner, time.Hour)
			var logs syncBuffer
			b := setupOn(t, db, func(c *testConfig) {
				c.Workers = 1
				c.InstanceHost = "node-a"
				c.proc = &proc
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			if !tc.released {
				b.ex.releaseDeadOwners(ctx) // one pass, synchronously
				c, err := b.st.GetAny(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if c.Status != store.StatusRunning || c.Owner == nil || *c.Owner != owner || c.Attempt != 1 {
					t.Fatalf("status %s owner %v attempt %d: a hidden live owner's call was taken", c.Status, c.Owner, c.Attempt)
				}
				if v := b.metricValue("idemctl_dead_owner_recovery"); v != 0 {
					t.Errorf("idemctl_dead_owner_recovery = %v, want 0", v)
				}
				if !strings.Contains(logs.String(), "dead-owner recovery off") || !strings.Contains(logs.String(), "hidepid=invisible") {
					t.Errorf("start-up log does not say recovery is off and why:\n%s", logs.String())
				}
				return
			}
			done := b.waitFinal(id)
			if done.Status != "succeeded" || done.Attempt != 2 {
				t.Fatalf("status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
			}
			if v := b.metricValue("idemctl_dead_owner_recovery"); v != 1 {
				t.Errorf("idemctl_dead_owner_recovery = %v, want 1", v)
			}
			if !strings.Contains(logs.String(), "dead-owner recovery on") {
				t.Errorf("start-up log does not say recovery is on:\n%s", logs.String())
			}
		})
	}
}

// TestLiveAndForeignOwnersUntouched: dead-owner recovery never takes a
// call from a live process, another host, or an owner it cannot parse.
func TestLiveAndForeignOwnersUntouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host := selfHost(t)

	// A live process of this host with its real start time.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Skipf("cannot start a helper process: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	st, err := procFS{root: "/proc"}.stat(sleeper.Process.Pid)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	owners := map[string]string{
		"k-live":        fmt.Sprintf("%s:%d:%d/1", host, sleeper.Process.Pid, st.start),
		"k-other-host":  fmt.Sprintf("not-%s:%d:1/1", host, 1<<30),
		"k-unparseable": "8123:617",
	}
	self, err := procFS{root: "/proc"}.self("")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	owners["k-self"] = self.String() + "/999"
	db := filepath.Join(t.TempDir(), "idem.db")
	ids := map[string]string{}
	for key, owner := range owners {
		ids[key] = claimWithOwner(t, db, key, owner, time.Hour)
	}
	b := setupOn(t, db, func(c *testConfig) { c.Workers = 1 })
	if !b.ex.deadOwners {
		// Nothing would be judged at all: the test could not fail.
		t.Skipf("dead-owner recovery is off on this machine: %s", b.ex.whyNoDeadOwners)
	}
	b.ex.releaseDeadOwners(ctx) // one more pass, synchronously
	for key, id := range ids {
		c, err := b.st.GetAny(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != store.StatusRunning || c.Owner == nil || *c.Owner != owners[key] || c.Attempt != 1 {
			t.Errorf("%s: status %s owner %v attempt %d — a live or foreign lease was taken", key, c.Status, c.Owner, c.Attempt)
		}
	}
}

// claimWithOwner records a charge call in the database at path and claims
// it for owner, as a server that then vanished would have. No server runs on
// the database yet, so nothing else can claim the call first.
func claimWithOwner(t *testing.T, path, key, owner string, lease time.Duration) string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := submitTo(t, st, nil, key, `{"tool":"charge","args":{"amount":1}}`).CallID
	claimed, err := st.ClaimNext(ctx, owner, lease, 1)
	if err != nil || len(claimed) != 1 || claimed[0].CallID != id {
		t.Fatalf("claim for %s: %v %v", owner, claimed, err)
	}
	return id
}

// TestChaosCrashBeforeCommit: with chaos, the process "exits" after the
// tool ran and before its commit; nothing is committed, no effect.
func TestChaosCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *testConfig) { c.Chaos = true })
	c := b.submit("k-crash-before", `{"tool":"charge","args":{"amount":3,"_crash_before_commit":true}}`)
	select {
	case code := <-b.exits:
		if code != exitCrash {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(waitDeadline):
		t.Fatal("no exit requested")
	}
	got, err := b.st.GetAny(context.Background(), c.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != store.StatusRunning || got.Attempt != 1 {
		t.Fatalf("after the crash: status %s attempt %d, want running attempt 1", got.Status, got.Attempt)
	}
	if s := b.stats(); s.Effects != 0 {
		t.Fatalf("effects=%d, want 0", s.Effects)
	}
}

// TestGracefulShutdownFinishesRunningTools: a stop waits for running tools
// within the grace period; they complete normally.
func TestGracefulShutdownFinishesRunningTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.submit("k-graceful", `{"tool":"sleep","args":{"seconds":0.3}}`)
	eventually(t, "the call runs", func() bool {
		got, _ := b.st.GetAny(context.Background(), c.CallID)
		return got.Status == store.StatusRunning
	})
	if err := b.ex.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	got, _ := b.st.GetAny(context.Background(), c.CallID)
	if got.Status != store.StatusSucceeded {
		t.Fatalf("after a graceful stop: %s, want succeeded", got.Status)
	}
}

// TestShutdownGraceAbandonsAndReleases: a tool still running when the grace
// ends is cancelled and its call released, not left under a lease.
func TestShutdownGraceAbandonsAndReleases(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *testConfig) { c.ShutdownGrace = 100 * time.Millisecond })
	c := b.submit("k-abandon", `{"tool":"sleep","args":{"seconds":10}}`)
	eventually(t, "the call runs", func() bool {
		got, _ := b.st.GetAny(context.Background(), c.CallID)
		return got.Status == store.StatusRunning
	})
	if err := b.ex.Shutdown(context.Background()); err == nil {
		t.Fatal("Shutdown reported a clean stop with a tool abandoned")
	}
	got, _ := b.st.GetAny(context.Background(), c.CallID)
	if got.Status != store.StatusPending || got.Owner != nil {
		t.Fatalf("abandoned call: status %s owner %v, want pending without owner", got.Status, got.Owner)
	}
	if ev := b.events(c.CallID); ev[len(ev)-1] != store.EventRecover {
		t.Fatalf("audit %v, want a final recover", ev)
	}
}
