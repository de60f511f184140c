package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/toolreg"
)

// TestLeaseTakeoverFencesStaleWorker: a worker paused past its lease (a GC
// pause, a stalled VM) loses the call to another server; the other's
// completion is the only one that lands, the stale one is fenced, and there
// is exactly one effect (docs/design.md, "The attempt as fencing token").
func TestLeaseTakeoverFencesStaleWorker(t *testing.T) {
	paused := make(chan store.Call, 1)
	resume := make(chan struct{})
	var once sync.Once
	a := setup(t, func(c *Config) {
		c.Workers = 1
		c.Lease = MinLease
		c.beforeCommit = func(_ context.Context, call store.Call) {
			once.Do(func() {
				paused <- call
				<-resume // the pause: the lease runs out meanwhile
			})
		}
	})
	c := a.post("k-takeover", `{"tool":"charge","args":{"amount":42}}`).call(t)
	var stale store.Call
	select {
	case stale = <-paused:
	case <-time.After(waitDeadline):
		t.Fatal("worker A never reached its commit")
	}

	// Server B: same database, another owner, a normal lease.
	b := setupOn(t, a.dbPath)
	if a.srv.Owner() == b.srv.Owner() {
		t.Fatalf("two servers share owner %s", a.srv.Owner())
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
	after, err := b.st.Get(context.Background(), c.CallID)
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
	ctx := context.Background()
	host := selfHost(t)
	// pid_max is at most 2^22 on Linux: this pid cannot exist.
	dead := fmt.Sprintf("%s:%d:1/1", host, 1<<30)
	db := filepath.Join(t.TempDir(), "idem.db")
	id := claimWithOwner(t, db, "k-dead-owner", dead, time.Hour)
	b := setupOn(t, db, func(c *Config) { c.Workers = 1 })
	if !b.srv.exec.deadOwners {
		t.Skipf("dead-owner recovery is off on this machine: %s", b.srv.whyNoDeadOwners)
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
			b := setupOn(t, db, func(c *Config) {
				c.Workers = 1
				c.InstanceHost = "node-a"
				c.proc = &proc
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			if !tc.released {
				b.srv.exec.releaseDeadOwners(ctx) // one pass, synchronously
				c, err := b.st.Get(ctx, id)
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
	b := setupOn(t, db, func(c *Config) { c.Workers = 1 })
	if !b.srv.exec.deadOwners {
		// Nothing would be judged at all: the test could not fail.
		t.Skipf("dead-owner recovery is off on this machine: %s", b.srv.whyNoDeadOwners)
	}
	b.srv.exec.releaseDeadOwners(ctx) // one more pass, synchronously
	for key, id := range ids {
		c, err := b.st.Get(ctx, id)
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
	req, aerr := parseCreate([]byte(`{"tool":"charge","args":{"amount":1}}`), false, toolreg.Builtins(), "")
	if aerr != nil {
		t.Fatal(aerr)
	}
	id, _ := newCallID()
	if _, _, err := st.CreateOrGet(ctx, req.newCall(id, store.DefaultPrincipal, key)); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimNext(ctx, owner, lease, 1)
	if err != nil || len(claimed) != 1 || claimed[0].CallID != id {
		t.Fatalf("claim for %s: %v %v", owner, claimed, err)
	}
	return id
}

// TestChaosCrashBeforeCommit: with chaos, the process "exits" after the
// tool ran and before its commit; nothing is committed, no effect.
func TestChaosCrashBeforeCommit(t *testing.T) {
	b := setup(t, func(c *Config) { c.Chaos = true })
	c := b.post("k-crash-before", `{"tool":"charge","args":{"amount":3,"_crash_before_commit":true}}`).call(t)
	select {
	case code := <-b.exits:
		if code != exitCrash {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(waitDeadline):
		t.Fatal("no exit requested")
	}
	got, err := b.st.Get(context.Background(), c.CallID)
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

func TestChaosRefusedOffLoopback(t *testing.T) {
	b := setup(t)
	for _, addr := range []string{"0.0.0.0:8081", ":8081", "10.1.2.3:80", "[::]:80", "example.com:80", "nonsense"} {
		if _, err := New(Config{Addr: addr, Chaos: true}, b.st); err == nil {
			t.Errorf("chaos on %q accepted", addr)
		}
		if addr != "nonsense" {
			if _, err := New(Config{Addr: addr, InsecureNoAuth: true}, b.st); err != nil {
				t.Errorf("non-chaos on %q refused: %v", addr, err)
			}
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "127.9.9.9:80", "[::1]:80", "localhost:8081", "LOCALHOST:1"} {
		if _, err := New(Config{Addr: addr, Chaos: true}, b.st); err != nil {
			t.Errorf("chaos on %q refused: %v", addr, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	b := setup(t)
	for _, cfg := range []Config{{Workers: -1}, {Lease: -time.Second}, {Lease: MinLease - time.Millisecond},
		{MaxWait: -1}, {MaxConcurrentBodies: -1}, {MaxHeldWaits: -1}} {
		if _, err := New(cfg, b.st); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	// The shortest lease is accepted; the defaults are the documented ones.
	srv, err := New(Config{Lease: MinLease}, b.st)
	if err != nil {
		t.Fatalf("lease %s refused: %v", MinLease, err)
	}
	if srv.cfg.Workers != 256 || srv.cfg.MaxPending != 100_000 {
		t.Errorf("defaults: workers %d max pending %d, want 256 and 100000", srv.cfg.Workers, srv.cfg.MaxPending)
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Error("nil store accepted")
	}
}

func TestMetricsMove(t *testing.T) {
	b := setup(t)
	c1 := b.post("k-m1", `{"tool":"charge","args":{"amount":1}}`).call(t)
	c2 := b.post("k-m2", `{"tool":"fail","args":{"retryable":false}}`).call(t)
	b.waitFinal(c1.CallID)
	b.waitFinal(c2.CallID)
	b.post("k-m1", `{"tool":"charge","args":{"amount":1}}`) // replay
	b.post("k-m1", `{"tool":"charge","args":{"amount":2}}`) // conflict
	b.post("", `{}`)                                        // 400

	want := map[string]float64{
		`idemctl_calls_total{outcome="created"}`:                                       2,
		`idemctl_calls_total{outcome="replayed"}`:                                      1,
		`idemctl_calls_total{outcome="conflict"}`:                                      1,
		`idemctl_executions_total{outcome="succeeded",tool="charge"}`:                  1,
		`idemctl_executions_total{outcome="failed",tool="fail"}`:                       1,
		`idemctl_execution_attempt_count`:                                              2,
		`idemctl_execution_duration_seconds_count{tool="charge"}`:                      1,
		`idemctl_http_requests_total{code="202",route="POST /v1/tool-calls"}`:          2,
		`idemctl_http_requests_total{code="409",route="POST /v1/tool-calls"}`:          1,
		`idemctl_http_requests_total{code="400",route="POST /v1/tool-calls"}`:          1,
		`idemctl_http_requests_total{code="200",route="GET /v1/tool-calls/{call_id}"}`: -1, // any positive
		`idemctl_queue_depth`:                              0,
		`idemctl_workers_busy`:                             0,
		`idemctl_fenced_commits_total`:                     0,
		`idemctl_lease_recoveries_total{reason="expired"}`: 0,
	}
	for series, v := range want {
		got := b.metricValue(series)
		if (v < 0 && got <= 0) || (v >= 0 && got != v) {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}

// TestGracefulShutdownFinishesRunningTools: a stop waits for running tools
// within the grace period; they complete normally.
func TestGracefulShutdownFinishesRunningTools(t *testing.T) {
	b := setup(t)
	c := b.post("k-graceful", `{"tool":"sleep","args":{"seconds":0.3}}`).call(t)
	eventually(t, "the call runs", func() bool {
		got, _ := b.st.Get(context.Background(), c.CallID)
		return got.Status == store.StatusRunning
	})
	if err := b.srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	got, _ := b.st.Get(context.Background(), c.CallID)
	if got.Status != store.StatusSucceeded {
		t.Fatalf("after a graceful stop: %s, want succeeded", got.Status)
	}
}

// TestShutdownGraceAbandonsAndReleases: a tool still running when the grace
// ends is cancelled and its call released, not left under a lease.
func TestShutdownGraceAbandonsAndReleases(t *testing.T) {
	b := setup(t, func(c *Config) { c.ShutdownGrace = 100 * time.Millisecond })
	c := b.post("k-abandon", `{"tool":"sleep","args":{"seconds":10}}`).call(t)
	eventually(t, "the call runs", func() bool {
		got, _ := b.st.Get(context.Background(), c.CallID)
		return got.Status == store.StatusRunning
	})
	if err := b.srv.Shutdown(context.Background()); err == nil {
		t.Fatal("Shutdown reported a clean stop with a tool abandoned")
	}
	got, _ := b.st.Get(context.Background(), c.CallID)
	if got.Status != store.StatusPending || got.Owner != nil {
		t.Fatalf("abandoned call: status %s owner %v, want pending without owner", got.Status, got.Owner)
	}
	if ev := b.events(c.CallID); ev[len(ev)-1] != store.EventRecover {
		t.Fatalf("audit %v, want a final recover", ev)
	}
}

// TestRunServesAndStops: Run on a real listener answers, and returns nil
// after ctx is cancelled.
func TestRunServesAndStops(t *testing.T) {
	b := setup(t)
	srv, err := New(Config{Logger: testLogger(t)}, b.st)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netListen(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Run(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	r := doURL(t, base, http.MethodPost, "/v1/tool-calls", []byte(`{"tool":"charge","args":{"amount":8}}`),
		map[string]string{"Idempotency-Key": "k-run", "Prefer": "wait=10"})
	var c CallView
	_ = json.Unmarshal(r.body, &c)
	if r.status != http.StatusOK || c.Status != "succeeded" {
		t.Fatalf("POST via Run: %d %s", r.status, r.body)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Run did not return after cancel")
	}
}
