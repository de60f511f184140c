package server

// Tests across a real process boundary: the idemctl binary crashes (chaos
// os.Exit, SIGKILL) and restarts on the same database.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// tryPost posts and returns the status and call, or an error when no
// response arrived (the server may crash before answering).
func tryPost(base, key, body string) (int, wire.Call, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/tool-calls", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return 0, wire.Call{}, err
	}
	defer res.Body.Close()
	var c wire.Call
	err = json.NewDecoder(res.Body).Decode(&c)
	return res.StatusCode, c, err
}

// openDB opens the database file of a stopped server.
func openDB(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// getByKey polls the server for the call of key until cond holds.
func waitByKey(t *testing.T, base, key string, cond func(wire.Call) bool) wire.Call {
	t.Helper()
	var c wire.Call
	eventually(t, "call "+key+" reaches the expected state", func() bool {
		r := doURL(t, base, http.MethodGet, "/v1/tool-calls/by-key/"+key, nil, nil)
		if r.status != http.StatusOK {
			return false
		}
		c = r.call(t)
		return cond(c)
	})
	return c
}

func serverStats(t *testing.T, base string) wire.Stats {
	t.Helper()
	var s wire.Stats
	if err := json.Unmarshal(doURL(t, base, http.MethodGet, "/stats", nil, nil).body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// (a) _crash_before_commit: the process exits after the tool ran and before
// the commit. Restarted with the default 30 s lease, the new process sees
// the old owner is gone and runs the call again at once: it finishes well
// before the lease could have expired, with exactly one effect.
func TestProcessCrashBeforeCommitRecoveredByDeadOwner(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, bin, "--db", db, "--chaos")
	const key = "k-proc-before"
	_, _, _ = tryPost(p.URL, key, `{"tool":"charge","args":{"amount":11,"_crash_before_commit":true}}`)
	code, err := p.Wait(waitDeadline)
	if err != nil || code != exitcode.Crash {
		t.Fatalf("server exit: code %d err %v, want %d", code, err, exitcode.Crash)
	}

	st := openDB(t, db)
	c, err := st.GetByKey(context.Background(), store.DefaultPrincipal, key)
	if err != nil {
		t.Fatalf("the call was not recorded before the crash: %v", err)
	}
	if s := storeStats(t, st); c.Status != store.StatusRunning || c.Attempt != 1 || s.Effects != 0 {
		t.Fatalf("after the crash: status %s attempt %d effects %d, want running, 1, 0", c.Status, c.Attempt, s.Effects)
	}
	_ = st.Close()

	started := time.Now()
	p2 := startServe(t, bin, "--db", db, "--chaos") // default lease: 30s
	done := waitByKey(t, p2.URL, key, func(c wire.Call) bool { return c.Status.Final() })
	if time.Since(started) >= 30*time.Second {
		t.Fatalf("recovery waited for the lease (%s)", time.Since(started))
	}
	if done.Status != "succeeded" || done.Attempt != 2 {
		t.Fatalf("after restart: status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}
	if s := serverStats(t, p2.URL); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
	if _, err := p2.Stop(waitDeadline); err != nil {
		t.Fatal(err)
	}
	if ev := auditEvents(t, openDB(t, db), c.CallID); !contains(ev, store.EventRecover) {
		t.Fatalf("audit %v lacks recover", ev)
	}
	// The attempt the crash cut off has an unknown outcome, audited with
	// its case before the recovery (docs/lifecycle.md, "Unknown outcomes").
	rows, err := openDB(t, db).Audit(context.Background(), c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for i, r := range rows {
		if r.Event == store.EventOutcomeUnknown {
			unknown = append(unknown, r.Detail)
			if i+1 >= len(rows) || rows[i+1].Event != store.EventRecover {
				t.Fatalf("outcome_unknown not followed by recover: %+v", rows)
			}
		}
	}
	if len(unknown) != 1 || !strings.HasPrefix(unknown[0], "abandoned: attempt 1 in flight, owner process gone (") {
		t.Fatalf("outcome_unknown rows %q, want one for the abandoned attempt 1", unknown)
	}
}

// (b) SIGKILL in the middle of a sleep call: restart, and the call
// finishes; a charge finished before the kill keeps its one effect.
func TestProcessKillDuringSleepThenRestart(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, bin, "--db", db)
	if s, _, err := tryPost(p.URL, "k-charge", `{"tool":"charge","args":{"amount":5}}`); err != nil || s != http.StatusAccepted {
		t.Fatalf("charge: %d %v", s, err)
	}
	if s, _, err := tryPost(p.URL, "k-sleep", `{"tool":"sleep","args":{"seconds":1.5}}`); err != nil || s != http.StatusAccepted {
		t.Fatalf("sleep: %d %v", s, err)
	}
	waitByKey(t, p.URL, "k-charge", func(c wire.Call) bool { return c.Status == "succeeded" })
	waitByKey(t, p.URL, "k-sleep", func(c wire.Call) bool { return c.Status == "running" })
	p.Kill()

	p2 := startServe(t, bin, "--db", db)
	sleep := waitByKey(t, p2.URL, "k-sleep", func(c wire.Call) bool { return c.Status.Final() })
	if sleep.Status != "succeeded" || sleep.Attempt != 2 {
		t.Fatalf("sleep after restart: %s attempt %d, want succeeded at attempt 2", sleep.Status, sleep.Attempt)
	}
	charge := waitByKey(t, p2.URL, "k-charge", func(wire.Call) bool { return true })
	if charge.Status != "succeeded" || charge.Attempt != 1 {
		t.Fatalf("charge after restart: %s attempt %d", charge.Status, charge.Attempt)
	}
	if s := serverStats(t, p2.URL); s.Calls != 2 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 2 and 1", s.Calls, s.Effects)
	}
}

// (b2) kill -9 of a process whose call was claimed at creation: the 202
// already shows it running at attempt 1 under the process's owner, and
// its one created row records that claim. The restarted process recovers
// it as any claimed call (the owner is gone: outcome_unknown, recover),
// claims attempt 2 and finishes it.
func TestProcessKillClaimedAtCreation(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, bin, "--db", db)
	// A create meeting the scheduler's claim round takes the usual path
	// (pending); the next key then meets an idle scheduler.
	var c wire.Call
	key := ""
	for i := 0; i < 5 && c.Status != wire.StatusRunning; i++ {
		key = fmt.Sprintf("k-sleep-%d", i)
		s, got, err := tryPost(p.URL, key, `{"tool":"sleep","args":{"seconds":10}}`)
		if err != nil || s != http.StatusAccepted {
			t.Fatalf("sleep: %d %v", s, err)
		}
		c = got
	}
	if c.Status != wire.StatusRunning || c.Attempt != 1 {
		t.Fatalf("sleep: %+v; want 202 running at attempt 1", c)
	}
	p.Kill()

	p2 := startServe(t, bin, "--db", db)
	waitByKey(t, p2.URL, key, func(c wire.Call) bool { return c.Attempt == 2 && c.Status == wire.StatusRunning })
	p2.Kill() // the audit is read from the file; attempt 2 need not finish
	rows, err := openDB(t, db).Audit(context.Background(), c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Event)
	}
	want := []string{store.EventCreated, store.EventOutcomeUnknown, store.EventRecover, store.EventClaimed}
	if len(got) < len(want) || strings.Join(got[:len(want)], ",") != strings.Join(want, ",") {
		t.Fatalf("audit %v, want it to begin %v", got, want)
	}
	first, ok := store.ClaimOf(rows[0])
	if !ok || !strings.Contains(rows[2].Detail, "owner process gone") {
		t.Fatalf("audit %+v: want the created row to claim, and the recovery to find its owner gone", rows)
	}
	if second, _ := store.ClaimOf(rows[3]); second == first {
		t.Fatalf("attempt 2 claimed by %s, the dead owner", second)
	}
}

// (c) Every call acknowledged with a 2xx survives SIGKILL right after.
func TestProcessAcknowledgedCallsSurviveKill(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, bin, "--db", db, "--workers", "2")

	var (
		mu    sync.Mutex
		acked = map[string]string{} // key → call_id
		n     atomic.Int64
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	const target = 60
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k-ack-%d-%d", w, i)
				status, c, err := tryPost(p.URL, key, `{"tool":"charge","args":{"amount":1}}`)
				if err != nil {
					return // the server is gone
				}
				if status/100 == 2 {
					mu.Lock()
					acked[key] = c.CallID
					mu.Unlock()
					if n.Add(1) == target {
						close(stop)
						p.Kill() // while other requests are still in flight
					}
				}
			}
		})
	}
	wg.Wait()
	p.Kill()

	st := openDB(t, db)
	ctx := context.Background()
	if len(acked) < target {
		t.Fatalf("only %d acknowledged calls", len(acked))
	}
	for key, id := range acked {
		c, err := st.GetByKey(ctx, store.DefaultPrincipal, key)
		if err != nil || c.CallID != id {
			t.Fatalf("acknowledged %s (%s) lost after kill -9: %+v %v", key, id, c, err)
		}
	}
	dupes, err := st.Dupes(ctx)
	if err != nil || len(dupes) != 0 {
		t.Fatalf("dupes %v %v", dupes, err)
	}
}

// (d) Crash right after the commit: the restarted server answers the same
// key with the original result, and there is still one effect.
func TestProcessCrashAfterCommitThenSameKey(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	body := `{"tool":"charge","args":{"amount":13,"_crash_after_commit":true}}`
	p := startServe(t, bin, "--db", db, "--chaos")
	_, _, _ = tryPost(p.URL, "k-proc-after", body)
	if code, err := p.Wait(waitDeadline); err != nil || code != exitcode.Crash {
		t.Fatalf("server exit: code %d err %v, want %d", code, err, exitcode.Crash)
	}

	p2 := startServe(t, bin, "--db", db, "--chaos")
	r := doURL(t, p2.URL, http.MethodPost, "/v1/tool-calls", []byte(body), map[string]string{"Idempotency-Key": "k-proc-after"})
	if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same key after restart: %d %v %s", r.status, r.header, r.body)
	}
	c := r.call(t)
	if c.Status != "succeeded" || c.Attempt != 1 || !bytes.Contains(c.Result, []byte(`"charged":13`)) {
		t.Fatalf("call %+v result %s", c, c.Result)
	}
	if s := serverStats(t, p2.URL); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
}

// SIGTERM stops the server cleanly (exit 0) after the running tool finished.
func TestProcessSigtermGraceful(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, bin, "--db", db)
	if s, _, err := tryPost(p.URL, "k-term", `{"tool":"sleep","args":{"seconds":0.5}}`); err != nil || s != http.StatusAccepted {
		t.Fatalf("post: %d %v", s, err)
	}
	waitByKey(t, p.URL, "k-term", func(c wire.Call) bool { return c.Status == "running" })
	code, err := p.Stop(waitDeadline)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d %v\n%s", code, err, p.Stderr())
	}
	c, err := openDB(t, db).GetByKey(context.Background(), store.DefaultPrincipal, "k-term")
	if err != nil || c.Status != store.StatusSucceeded {
		t.Fatalf("the running tool did not finish before exit: %+v %v", c, err)
	}
}

// TestProcessKillDuringHeartbeatedTool: kill -9 while a tool runs past its
// lease on heartbeats. The heartbeats die with the process, the lease
// expires, and a server on the same database (of another host identity, so
// only lease expiry can recover the call, not dead-owner recovery) runs it
// again: attempt 2, succeeded, the recovery audited as a lease expiry.
func TestProcessKillDuringHeartbeatedTool(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p := startServe(t, bin, "--db", db, "--lease", "1s")
	const key = "k-heartbeat-kill"
	if s, _, err := tryPost(p.URL, key, `{"tool":"sleep","args":{"seconds":4}}`); err != nil || s != http.StatusAccepted {
		t.Fatalf("post: %d %v", s, err)
	}
	waitByKey(t, p.URL, key, func(c wire.Call) bool { return c.Status == "running" })
	eventually(t, "a heartbeat extends the lease", func() bool {
		r := doURL(t, p.URL, http.MethodGet, "/metrics", nil, nil)
		return metricSample(t, r.body, `idemctl_lease_extensions_total{outcome="extended"}`) >= 1
	})
	p.Kill()

	p2 := startServe(t, bin, "--db", db, "--lease", "1s", "--instance-host", "other-host")
	done := waitByKey(t, p2.URL, key, func(c wire.Call) bool { return c.Status.Final() })
	if done.Status != "succeeded" || done.Attempt != 2 {
		t.Fatalf("after the kill: status %s attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
	}
	if _, err := p2.Stop(waitDeadline); err != nil {
		t.Fatal(err)
	}
	st := openDB(t, db)
	if d := lastDetail(t, st, done.CallID, store.EventRecover); !strings.HasPrefix(d, "lease expired (owner ") {
		t.Fatalf("recover detail %q, want a lease expiry", d)
	}
	if ev := auditEvents(t, st, done.CallID); contains(ev, store.EventFenced) {
		t.Fatalf("audit %v has fenced: the killed attempt never completed", ev)
	}
}

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
