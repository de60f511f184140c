package server

// Several real `idemctl serve` processes on one PostgreSQL database
// (docs/operations.md, "Running several instances"): the same key through three instances is one call and one effect;
// a call whose instance died is finished by another after its lease (or at
// once when the dead owner is provably gone); a stale instance's commit is
// fenced; distinct keys are shared out; a live lease is never taken.
//
// These tests need IDEMCTL_TEST_POSTGRES_URL and skip without it (and under
// -short). Each test gets a schema of its own in that database, reached
// through search_path in the instances' URL, and drops it when it ends.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// pgURLEnv names the variable holding the test PostgreSQL URL.
const pgURLEnv = "IDEMCTL_TEST_POSTGRES_URL"

// cluster is three (or n) `idemctl serve` processes on one fresh schema.
type cluster struct {
	t      *testing.T
	url    string // the instances' DSN: the test schema, tagged with app
	schema string
	app    string // application_name of the instances' connections
	st     *postgres.Store
	procs  []*serveproc.Process
	frozen map[int]bool // instances under SIGSTOP: they cannot answer
}

// newCluster creates a schema, starts n instances on it (args(i) are the
// extra flags of instance i; nil for none) and opens the test's own view of
// the database. Everything is torn down when the test ends: processes
// killed, then the schema's remaining sessions ended and the schema dropped.
func newCluster(t *testing.T, n int, args func(i int) []string) *cluster {
	t.Helper()
	pgtest.BaseURL(t)       // skips without PostgreSQL
	bin := idemctlBinary(t) // skips under -short

	// A schema of its own; its cleanup runs after the processes are
	// killed (registered first), ends the sessions still tagged with
	// db.App (a backend stalled by a test trigger does not notice its
	// client died) and drops it.
	db := pgtest.New(t)
	c := &cluster{t: t, url: db.URL, schema: db.Name, app: db.App, frozen: map[int]bool{}}

	for i := range n {
		a := []string{"--db", c.url, "--log-level", "warn"}
		if args != nil {
			a = append(a, args(i)...)
		}
		c.procs = append(c.procs, startServe(t, bin, a...))
	}
	// The instances created the schema; the test reads it on connections
	// of its own name, so they never look like an instance's.
	var err error
	c.st, err = postgres.Open(context.Background(),
		withURLParams(t, c.url, map[string]string{"application_name": c.app + "-test"}), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("opening the test schema: %v", err)
	}
	t.Cleanup(func() { _ = c.st.Close() })
	return c
}

// distinctHosts gives every instance its own --instance-host, so none can
// judge another's pid: a dead instance's calls wait for their lease.
func distinctHosts(extra ...string) func(i int) []string {
	return func(i int) []string {
		return append([]string{"--instance-host", fmt.Sprintf("mi-node-%c", 'a'+i)}, extra...)
	}
}

// withURLParams sets query parameters of a postgres:// URL; pgx sends the
// ones it does not know itself (search_path) as run-time settings.
func withURLParams(t *testing.T, dsn string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL: %v", pgURLEnv, err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// pgExec runs one statement on a connection of its own.
func pgExec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	// Not t.Context(): this also runs in cleanups.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", pgURLEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// pgCount runs a count query on a connection of its own.
func pgCount(t *testing.T, dsn, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", pgURLEnv, err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// instanceOf returns the index of the instance an owner column names (by
// pid; every instance runs on this machine), or -1. An owner is
// "host:pid:start/instance" (executor.Executor.Owner); the host may hold
// colons, so the pid is counted from the right.
func (c *cluster) instanceOf(owner string) int {
	owner, _, _ = strings.Cut(owner, "/")
	parts := strings.Split(owner, ":")
	if len(parts) < 3 {
		return -1
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return -1
	}
	for i, p := range c.procs {
		if p.Pid() == pid {
			return i
		}
	}
	return -1
}

// call reads a call from the database.
func (c *cluster) call(id string) store.Call {
	c.t.Helper()
	got, err := c.st.GetAny(context.Background(), id)
	if err != nil {
		c.t.Fatalf("Get %s: %v", id, err)
	}
	return got
}

// waitCall polls the database until cond holds for the call.
func (c *cluster) waitCall(id, what string, cond func(store.Call) bool) store.Call {
	c.t.Helper()
	var got store.Call
	eventually(c.t, "call "+id+" "+what, func() bool {
		got = c.call(id)
		return cond(got)
	})
	return got
}

func (c *cluster) audit(id string) []store.AuditEvent {
	c.t.Helper()
	rows, err := c.st.Audit(context.Background(), id, 0)
	if err != nil {
		c.t.Fatalf("Audit: %v", err)
	}
	return rows
}

// checkCounts asserts the invariants every scenario ends with: the database
// and the /stats of every live instance agree on calls and effects, and no
// call has two effects.
func (c *cluster) checkCounts(calls, effects int64) {
	c.t.Helper()
	ctx := context.Background()
	s, err := c.st.Stats(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	if s.Calls != calls || s.Effects != effects {
		c.t.Fatalf("database: calls=%d effects=%d, want %d and %d", s.Calls, s.Effects, calls, effects)
	}
	dupes, err := c.st.Dupes(ctx)
	if err != nil || len(dupes) != 0 {
		c.t.Fatalf("dupes %v %v, want none", dupes, err)
	}
	for i, p := range c.procs {
		select {
		case <-p.Done():
			continue // killed on purpose
		default:
		}
		if c.frozen[i] {
			continue
		}
		var v wire.Stats
		if err := json.Unmarshal(httpGet(c.t, p.URL, "/stats"), &v); err != nil {
			c.t.Fatalf("instance %d /stats: %v", i, err)
		}
		if v.Calls != calls || v.Effects != effects {
			c.t.Fatalf("instance %d /stats: calls=%d effects=%d, want %d and %d", i, v.Calls, v.Effects, calls, effects)
		}
	}
}

// postResult is one POST's answer; safe to produce off the test goroutine.
type postResult struct {
	status   int
	replayed bool
	call     wire.Call
	err      error
}

func postKey(base, key, body string) postResult {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/tool-calls", strings.NewReader(body))
	if err != nil {
		return postResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return postResult{err: err}
	}
	defer res.Body.Close()
	r := postResult{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	if err := json.NewDecoder(res.Body).Decode(&r.call); err != nil {
		r.err = fmt.Errorf("HTTP %d: %w", res.StatusCode, err)
	}
	return r
}

// mustPost posts from the test goroutine and returns the call.
func mustPost(t *testing.T, base, key, body string) wire.Call {
	t.Helper()
	r := postKey(base, key, body)
	if r.err != nil || r.status/100 != 2 || r.call.CallID == "" {
		t.Fatalf("POST %s to %s: %d %+v %v", key, base, r.status, r.call, r.err)
	}
	return r.call
}

// httpGet reads base+path and fails the test on anything but 200. A
// timeout keeps a wedged instance from hanging the test.
func httpGet(t *testing.T, base, path string) []byte {
	t.Helper()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", base, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %d %v %s", base, path, res.StatusCode, err, body)
	}
	return body
}

// metricAt reads one sample from an instance's /metrics; an absent series
// fails the test (see metricSample).
func metricAt(t *testing.T, base, series string) float64 {
	t.Helper()
	return metricSample(t, httpGet(t, base, "/metrics"), series)
}

// events filters audit rows by event name.
// claims are the rows of rows that claim a call (store.ClaimOf: a claimed
// row, or the created row of a call claimed at creation), each with the
// claim's owner as its Detail.
func claims(rows []store.AuditEvent) []store.AuditEvent {
	var out []store.AuditEvent
	for _, r := range rows {
		if owner, ok := store.ClaimOf(r); ok {
			r.Detail = owner
			out = append(out, r)
		}
	}
	return out
}

func events(rows []store.AuditEvent, name string) []store.AuditEvent {
	var out []store.AuditEvent
	for _, r := range rows {
		if r.Event == name {
			out = append(out, r)
		}
	}
	return out
}

// (a) 60 concurrent requests with one key, spread round-robin over three
// instances: one call_id for all, exactly one of them created it, one
// execution and one effect.
func TestMultiInstanceSameKeyOneCall(t *testing.T) {
	c := newCluster(t, 3, nil)
	const n, key = 60, "k-mi-same"
	body := `{"tool":"charge","args":{"amount":7}}`

	results := make([]postResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start // all at once, to race the inserts across instances
			results[i] = postKey(c.procs[i%len(c.procs)].URL, key, body)
		})
	}
	close(start)
	wg.Wait()

	ids := map[string]int{}
	created := 0
	for i, r := range results {
		if r.err != nil || r.status/100 != 2 {
			t.Fatalf("request %d (instance %d): %d %v", i, i%len(c.procs), r.status, r.err)
		}
		ids[r.call.CallID]++
		if !r.replayed {
			created++
		}
	}
	if len(ids) != 1 || created != 1 {
		t.Fatalf("call ids %v, %d responses not replayed; want one call id and one creator", ids, created)
	}
	var id string
	for id = range ids {
	}

	done := waitFinalURL(t, c.procs[1].URL, id)
	if done.Status != store.StatusSucceeded || done.Attempt != 1 {
		t.Fatalf("call %s: status %s attempt %d, want succeeded at attempt 1", id, done.Status, done.Attempt)
	}
	c.checkCounts(1, 1)
	rows := c.audit(id)
	for _, ev := range []string{store.EventCreated, store.EventSucceeded} {
		if got := len(events(rows, ev)); got != 1 {
			t.Fatalf("audit has %d %s events, want 1: %+v", got, ev, rows)
		}
	}
	if got := len(claims(rows)); got != 1 {
		t.Fatalf("audit has %d claims, want 1: %+v", got, rows)
	}
}

// (b) kill -9 of the instance running a sleep call. The instances have
// distinct --instance-host values, so the survivors cannot tell the owner
// is dead and must wait out its lease: the call is taken over only after
// the lease expired (by the database's clock), and finished at attempt 2.
func TestMultiInstanceKilledOwnerTakenOverAfterLease(t *testing.T) {
	c := newCluster(t, 3, distinctHosts("--lease", "2s"))
	const key = "k-mi-kill"
	id := mustPost(t, c.procs[0].URL, key, `{"tool":"sleep","args":{"seconds":1.5}}`).CallID

	running := c.waitCall(id, "is running", func(x store.Call) bool { return x.Status == store.StatusRunning })
	victim := c.instanceOf(*running.Owner)
	if victim < 0 || running.Attempt != 1 || running.LeaseUntil == nil {
		t.Fatalf("running call %+v: owner not one of the instances", running)
	}
	c.procs[victim].Kill() // mid-sleep: no cleanup, the lease stays in the row
	killed := time.Now()
	survivor := c.procs[(victim+1)%len(c.procs)]

	done := waitFinalURL(t, survivor.URL, id)
	finished := time.Since(killed)
	if done.Status != store.StatusSucceeded || done.Attempt != 2 {
		t.Fatalf("after the kill: status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}
	rows := c.audit(id)
	claims := claims(rows)
	if len(claims) != 2 || claims[0].Detail != *running.Owner {
		t.Fatalf("claims %+v, want the victim's then one more", claims)
	}
	taker := c.instanceOf(claims[1].Detail)
	if taker < 0 || taker == victim {
		t.Fatalf("attempt 2 claimed by %q, want a surviving instance", claims[1].Detail)
	}
	// The invariant: the dead instance's lease was not taken before it
	// expired. Both times are the database's clock.
	if claims[1].TS < *running.LeaseUntil {
		t.Fatalf("attempt 2 claimed at %.3f, before the lease ran out at %.3f", claims[1].TS, *running.LeaseUntil)
	}
	for _, r := range events(rows, store.EventRecover) {
		if !strings.Contains(r.Detail, "lease expired") || r.TS < *running.LeaseUntil {
			t.Fatalf("recover %+v: want a lease expiry after %.3f (distinct hosts must not judge pids)", r, *running.LeaseUntil)
		}
	}
	c.checkCounts(1, 0) // sleep has no effect row
	t.Logf("lease 2s: attempt 1 claimed at db %.3f, lease until %.3f; attempt 2 claimed %.3fs after expiry (%.3fs after attempt 1) by instance %d; finished %s after the kill; recover events: %d",
		claims[0].TS, *running.LeaseUntil, claims[1].TS-*running.LeaseUntil, claims[1].TS-claims[0].TS, taker,
		finished.Round(time.Millisecond), len(events(rows, store.EventRecover)))
}

// stallFirstCompletion installs a trigger that holds the first completion
// statement to reach the database (the fenced UPDATE that writes
// result_json) before it reads any row, until releaseStall. A charge runs in
// microseconds, so a SIGSTOP cannot be aimed between its claim and its
// commit; the stall pins the instance there, and the test then freezes it.
// It is a BEFORE ... FOR EACH STATEMENT trigger: it holds no row lock, so
// other instances can still recover, claim and complete the call, and the
// held UPDATE then meets the newer row version and re-checks its fencing
// condition, as a late commit would. pg_try_advisory_lock (per session, not
// per transaction) picks the first completion only. It returns the lock key.
func (c *cluster) stallFirstCompletion() int64 {
	c.t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		c.t.Fatal(err)
	}
	key := int64(binary.BigEndian.Uint32(b[:]) >> 1) // a positive int4
	s := c.schema
	pgExec(c.t, c.url, `CREATE TABLE `+s+`.mi_stall (released boolean NOT NULL)`)
	pgExec(c.t, c.url, `INSERT INTO `+s+`.mi_stall VALUES (false)`)
	pgExec(c.t, c.url, fmt.Sprintf(`
CREATE FUNCTION %[1]s.mi_stall() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  waited int := 0;
BEGIN
  IF current_query() ~ 'result_json\s*=' AND pg_try_advisory_lock(4242, %[2]d) THEN
    -- Each query of a volatile function sees the latest commits, so the
    -- test's release ends the loop; 30 s is a backstop only.
    WHILE NOT (SELECT released FROM %[1]s.mi_stall) AND waited < 3000 LOOP
      PERFORM pg_sleep(0.01);
      waited := waited + 1;
    END LOOP;
  END IF;
  RETURN NULL;
END
$fn$`, s, key))
	pgExec(c.t, c.url, `CREATE TRIGGER mi_stall BEFORE UPDATE ON `+s+`.calls FOR EACH STATEMENT EXECUTE FUNCTION `+s+`.mi_stall()`)
	return key
}

// stalled reports whether a completion is held by stallFirstCompletion.
func (c *cluster) stalled(key int64) bool {
	c.t.Helper()
	return pgCount(c.t, c.url, `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid::bigint = 4242 AND objid::bigint = $1 AND objsubid = 2`, key) == 1
}

func (c *cluster) releaseStall() {
	c.t.Helper()
	pgExec(c.t, c.url, `UPDATE `+c.schema+`.mi_stall SET released = true`)
}

// (b2) A charge claimed by an instance that is then frozen (SIGSTOP) past
// its lease, between its tool and its commit: another instance takes the
// call over and commits attempt 2 with its effect; the frozen instance,
// resumed (SIGCONT), tries to commit attempt 1 and is fenced. One effect,
// fenced in the audit, counted by the resumed instance.
func TestMultiInstanceFrozenOwnerCommitFenced(t *testing.T) {
	c := newCluster(t, 3, distinctHosts("--lease", "2s"))
	lockKey := c.stallFirstCompletion()
	id := mustPost(t, c.procs[0].URL, "k-mi-frozen", `{"tool":"charge","args":{"amount":25}}`).CallID

	eventually(t, "the first completion reaches the database and is held", func() bool { return c.stalled(lockKey) })
	held := c.call(id)
	victim := -1
	if held.Owner != nil {
		victim = c.instanceOf(*held.Owner)
	}
	if held.Status != store.StatusRunning || held.Attempt != 1 || victim < 0 {
		t.Fatalf("held call %+v: want running at attempt 1 under one of the instances", held)
	}
	vp := c.procs[victim]
	if err := syscall.Kill(vp.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	frozen := time.Now()
	c.frozen[victim] = true
	// If the test fails before SIGCONT, cleanup's SIGKILL ends it anyway.

	done := c.waitCall(id, "is taken over and succeeds", func(x store.Call) bool { return x.Status.Final() })
	takeover := time.Since(frozen)
	if done.Status != store.StatusSucceeded || done.Attempt != 2 || done.EffectID == nil || *done.EffectID != tool.EffectID(id) {
		t.Fatalf("takeover: %+v, want succeeded at attempt 2 with effect %s", done, tool.EffectID(id))
	}
	c.checkCounts(1, 1)

	if err := syscall.Kill(vp.Pid(), syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	delete(c.frozen, victim)
	c.releaseStall() // the held attempt-1 commit goes ahead now
	var fenced store.AuditEvent
	eventually(t, "the resumed instance's commit is fenced", func() bool {
		f := events(c.audit(id), store.EventFenced)
		if len(f) > 0 {
			fenced = f[0]
		}
		return len(f) > 0
	})
	if !strings.Contains(fenced.Detail, *held.Owner+" attempt 1 refused") {
		t.Fatalf("fenced detail %q does not name the frozen owner's attempt 1", fenced.Detail)
	}
	eventually(t, "the resumed instance counts the fenced commit", func() bool {
		return metricAt(t, vp.URL, "idemctl_fenced_commits_total") == 1
	})
	after := c.call(id)
	if after.Status != store.StatusSucceeded || after.Attempt != 2 || !bytes.Equal(after.ResultJSON, done.ResultJSON) {
		t.Fatalf("after the stale commit: %+v, want the attempt-2 success untouched", after)
	}
	c.checkCounts(1, 1)
	rows := c.audit(id)
	claims := claims(rows)
	if len(claims) != 2 || c.instanceOf(claims[1].Detail) == victim || claims[1].TS < *held.LeaseUntil {
		t.Fatalf("claims %+v: want a second claim by another instance after the lease (%.3f)", claims, *held.LeaseUntil)
	}
	t.Logf("lease 2s: frozen instance %d; attempt 2 claimed %.3fs after expiry by instance %d; succeeded %s after SIGSTOP; fenced: %s",
		victim, claims[1].TS-*held.LeaseUntil, c.instanceOf(claims[1].Detail), takeover.Round(time.Millisecond), fenced.Detail)
}

// (b3) The same kill -9 with the default host identity: the instances share
// this machine's pid namespace, so a survivor sees the owner's pid is gone
// and releases the call at once — long before its 30 s lease.
func TestMultiInstanceDeadOwnerRecoveredAtOnce(t *testing.T) {
	c := newCluster(t, 3, func(int) []string { return []string{"--lease", "30s"} })
	id := mustPost(t, c.procs[0].URL, "k-mi-dead", `{"tool":"sleep","args":{"seconds":2}}`).CallID

	running := c.waitCall(id, "is running", func(x store.Call) bool { return x.Status == store.StatusRunning })
	victim := c.instanceOf(*running.Owner)
	if victim < 0 || running.LeaseUntil == nil {
		t.Fatalf("running call %+v: owner not one of the instances", running)
	}
	c.procs[victim].Kill()
	killed := time.Now()

	done := waitFinalURL(t, c.procs[(victim+1)%len(c.procs)].URL, id)
	finished := time.Since(killed)
	if done.Status != store.StatusSucceeded || done.Attempt != 2 {
		t.Fatalf("after the kill: status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}
	rows := c.audit(id)
	rec := events(rows, store.EventRecover)
	if len(rec) != 1 || !strings.Contains(rec[0].Detail, "owner process gone") {
		t.Fatalf("recover events %+v, want one naming the dead owner process", rec)
	}
	// Released by dead-owner recovery, not by lease expiry.
	if rec[0].TS >= *running.LeaseUntil {
		t.Fatalf("recovered at %.3f, not before the lease ran out at %.3f", rec[0].TS, *running.LeaseUntil)
	}
	claims := claims(rows)
	if len(claims) != 2 || c.instanceOf(claims[1].Detail) == victim || c.instanceOf(claims[1].Detail) < 0 {
		t.Fatalf("claims %+v, want the victim's then a survivor's", claims)
	}
	c.checkCounts(1, 0)
	t.Logf("lease 30s: released %.3fs after attempt 1 was claimed (%.3fs before its lease ran out); finished %s after the kill",
		rec[0].TS-claims[0].TS, *running.LeaseUntil-rec[0].TS, finished.Round(time.Millisecond))
}

// (c) 150 distinct keys spread over the instances: all finish with one
// effect each, each ran once, and more than one instance did the work.
func TestMultiInstanceDistinctKeysShared(t *testing.T) {
	c := newCluster(t, 3, nil)
	const n, clients = 150, 10
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for i := w; i < n; i += clients {
				base := c.procs[i%len(c.procs)].URL
				r := postKey(base, fmt.Sprintf("k-mi-distinct-%03d", i), fmt.Sprintf(`{"tool":"charge","args":{"amount":%d}}`, i+1))
				if r.err != nil || r.status/100 != 2 || r.replayed {
					errs <- fmt.Errorf("key %d: HTTP %d replayed=%v: %v", i, r.status, r.replayed, r.err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	eventually(t, "all calls succeed", func() bool {
		s, err := c.st.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s.ByStatus[store.StatusSucceeded] == n
	})
	c.checkCounts(n, n)
	attempts, err := c.st.Attempts(context.Background())
	if err != nil || len(attempts) != 1 || attempts[0].Attempt != 1 || attempts[0].Calls != n {
		t.Fatalf("attempts %+v %v, want all %d calls at attempt 1", attempts, err, n)
	}
	perInstance := map[int]int{}
	for _, r := range claims(c.audit("")) {
		i := c.instanceOf(r.Detail)
		if i < 0 {
			t.Fatalf("claimed by %q, not one of the instances", r.Detail)
		}
		perInstance[i]++
	}
	if len(perInstance) < 2 {
		t.Fatalf("claims per instance %v: want work done by at least 2 instances", perInstance)
	}
	t.Logf("claims per instance: %v", perInstance)
}

// (d) A live lease of another instance is never taken. All three share the
// default host identity, so the others do check whether the owner process
// lives (it does) on every tick; meanwhile they claim and finish other work,
// and the sleep call stays attempt 1 under its owner until the owner
// finishes it.
func TestMultiInstanceLiveLeaseNeverTaken(t *testing.T) {
	c := newCluster(t, 3, func(int) []string { return []string{"--lease", "30s"} })
	id := mustPost(t, c.procs[0].URL, "k-mi-live", `{"tool":"sleep","args":{"seconds":2.5}}`).CallID
	running := c.waitCall(id, "is running", func(x store.Call) bool { return x.Status == store.StatusRunning })
	owner := c.instanceOf(*running.Owner)
	if owner < 0 {
		t.Fatalf("running call %+v: owner not one of the instances", running)
	}
	claimed := time.Now()

	// At least 1.2 s of the others' 200 ms recovery ticks (six or more
	// each, every one running lease recovery, dead-owner checks and a
	// claim), with real claims and completions going on.
	charges := 0
	for i := 0; time.Since(claimed) < 1200*time.Millisecond; i++ {
		other := c.procs[(owner+1+i%2)%len(c.procs)]
		k := fmt.Sprintf("k-mi-live-other-%d", i)
		waitFinalURL(t, other.URL, mustPost(t, other.URL, k, `{"tool":"charge","args":{"amount":1}}`).CallID)
		charges++
		now := c.call(id)
		if now.Status == store.StatusSucceeded && now.Attempt == 1 {
			break // a slow machine: the owner already finished it
		}
		if now.Status != store.StatusRunning || now.Attempt != 1 || now.Owner == nil || *now.Owner != *running.Owner {
			t.Fatalf("live lease taken: %+v, was running at attempt 1 under %s", now, *running.Owner)
		}
	}

	done := waitFinalURL(t, c.procs[owner].URL, id)
	if done.Status != store.StatusSucceeded || done.Attempt != 1 {
		t.Fatalf("sleep call: status %s attempt %d, want succeeded at attempt 1 by its owner", done.Status, done.Attempt)
	}
	names := story(c.audit(id))
	if strings.Join(names, ",") != "created,claimed,succeeded" {
		t.Fatalf("audit %v, want created, claimed, succeeded only", names)
	}
	for i, p := range c.procs {
		if v := metricAt(t, p.URL, `idemctl_lease_recoveries_total{reason="dead_owner"}`) +
			metricAt(t, p.URL, `idemctl_lease_recoveries_total{reason="expired"}`); v != 0 {
			t.Fatalf("instance %d recovered %v calls, want 0", i, v)
		}
	}
	c.checkCounts(int64(1+charges), int64(charges))
	t.Logf("the others finished %d charges during the owner's 2.5 s sleep; the sleep call stayed attempt 1", charges)
}
