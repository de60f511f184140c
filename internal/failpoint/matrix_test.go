package failpoint_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

// matrixParallel is how many cells run at once unless -parallel is given:
// a cell spends most of its time waiting on its server (sleeps, a lease
// running out), so the default (GOMAXPROCS) would leave the machine idle
// and the matrix would take minutes.
const matrixParallel = "8"

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", matrixParallel)
	}
	code := m.Run()
	servertest.Cleanup()
	os.Exit(code)
}

// loadReq is one request of a cell's load.
type loadReq struct {
	key  string
	tool string
	args map[string]any
}

// The load reaches every failpoint (each request says which):
var load = []loadReq{
	{"charge-1", "charge", map[string]any{"amount": 1}},              // create, claim, succeed
	{"email-1", "send_email", map[string]any{"to": "a@example.com"}}, // an effect tool without amount
	{"slow-1", "sleep", map[string]any{"seconds": 0.8}},              // lease extension (every lease/3)
	{"fail-1", "fail", map[string]any{"retryable": false}},           // fail
	{"retry-1", "fail", map[string]any{"times": 1}},                  // retry (tools file: 3 attempts), then succeed
	// The worker freezes past its 1s lease after the tool: recover, a
	// second attempt, and a fenced late commit whose effect must not land.
	// send_email runs one at a time (toolsFile), and the frozen worker
	// holds that slot, so no claim can take the expired call over directly:
	// recovery must (a claim racing recovery otherwise can, and the point
	// would not be reached).
	{"paused-1", "send_email", map[string]any{"to": "b@example.com", "_pause_before_commit": 2.5}},
	{"cancel-1", "sleep", map[string]any{"seconds": 2.5}}, // canceled while running: cancel
	{"abandon-1", "sleep", map[string]any{"seconds": 4}},  // still running at SIGTERM, abandoned: release
	{"charge-2", "charge", map[string]any{"amount": 2}},
}

// effectTools are the tools whose success writes an effect row.
var effectTools = map[string]bool{"charge": true, "send_email": true}

// toolsFile gives fail server-side retries, so the load reaches
// ScheduleRetry, and runs send_email one call at a time (see paused-1).
const toolsFile = `tools:
  - name: fail
    kind: builtin
    retry: {max_attempts: 3, initial_backoff: 50ms, max_backoff: 100ms}
  - name: send_email
    kind: builtin
    concurrency: 1
`

// crashSkip is how many times a crash cell lets its point pass before the
// crash, so that some keys are acknowledged before the process dies. A
// call claimed at creation takes no claim write, so the load is sure of
// two scheduler claims only: retry-1's second attempt and paused-1's
// after its recovery (others happen when a create finds a call pending,
// which depends on timing). The claim cells crash at the second.
var crashSkip = map[failpoint.Name]int{
	store.WriteCreate.BeforeCommit(): 3, store.WriteCreate.AfterCommit(): 3,
	store.WriteClaim.BeforeCommit(): 1, store.WriteClaim.AfterCommit(): 1,
}

// TestCrashPointMatrix: for every failpoint × {crash, error} × {SQLite,
// PostgreSQL}, a real server with the point armed takes a load that
// reaches it, dies there (crash) or has the write fail (error, twice);
// then a server without failpoints on the same database takes the same
// requests again (a client retrying), drains, and the invariants hold.
func TestCrashPointMatrix(t *testing.T) {
	bin := servertest.Binary(t)
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(tools, []byte(toolsFile), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, be := range []string{"sqlite", "postgres"} {
		for _, name := range store.Failpoints() {
			for _, action := range []string{"crash", "error"} {
				t.Run(be+"/"+string(name)+"="+action, func(t *testing.T) {
					t.Parallel()
					var db string
					if be == "sqlite" {
						db = filepath.Join(t.TempDir(), "idem.db")
					} else {
						// pool_max_conns: 8 cells at once share the server's connections.
						db = pgtest.WithParams(t, pgtest.New(t).URL, map[string]string{"pool_max_conns": "4"})
					}
					spec := "2*error"
					if action == "crash" {
						spec = "crash"
						if n := crashSkip[name]; n > 0 {
							spec = fmt.Sprintf("%d*off->crash", n)
						}
					}
					runCell(t, cell{bin: bin, db: db, tools: tools, name: name, action: action, spec: string(name) + "=" + spec})
				})
			}
		}
	}
}

type cell struct {
	bin, db, tools string
	name           failpoint.Name
	action         string // crash or error
	spec           string
}

func (c cell) config(env ...string) serveproc.Config {
	return serveproc.Config{
		Binary: c.bin, DB: c.db, Chaos: true, Env: env, WaitReady: true,
		Args: []string{"--workers", "4", "--lease", "1s", "--shutdown-grace", "300ms", "--tools", c.tools},
	}
}

func runCell(t *testing.T, c cell) {
	ctx := t.Context()
	// Phase 1: the armed server and the load.
	p, err := serveproc.Start(ctx, c.config(failpoint.EnvVar+"="+c.spec))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if !strings.Contains(p.Stderr(), "failpoints armed") || !strings.Contains(p.Stderr(), string(c.name)) {
		t.Fatalf("no startup line naming the armed failpoint:\n%s", p.Stderr())
	}
	acked := map[string]string{} // key → call_id of a 2xx answer
	died := func() bool {
		select {
		case <-p.Done():
			return true
		default:
			return false
		}
	}
	for _, r := range load {
		if died() {
			break
		}
		if id, ok := post(p.URL, r); ok {
			acked[r.key] = id
		}
		if r.key == "cancel-1" && acked[r.key] != "" {
			cancelWhenRunning(p, acked[r.key], died)
		}
	}
	// Let everything but the abandoned sleep finish (or the server die),
	// then stop it: the shutdown grace runs out on abandon-1 (release).
	deadline := time.Now().Add(15 * time.Second)
	for !died() && time.Now().Before(deadline) && !settled(p.URL, acked) {
		time.Sleep(100 * time.Millisecond)
	}
	if !died() {
		if _, err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("stopping the armed server: %v", err)
		}
	}
	out := p.Stderr()
	switch c.action {
	case "crash":
		want := fmt.Sprintf("failpoint %s: crash (SIGKILL)", c.name)
		if !strings.Contains(out, want) || p.State() == nil || !strings.Contains(p.State().String(), "killed") {
			t.Fatalf("the server did not die at %s (want %q in its output, and a SIGKILL; state %v):\n%s", c.name, want, p.State(), tail(out))
		}
	case "error":
		if !injected(out, c.name) {
			t.Fatalf("no write failed at %s (no injected error logged):\n%s", c.name, tail(out))
		}
	}

	// Phase 2: the same database without failpoints; the client retries
	// every request, then everything must drain.
	p2, err := serveproc.Start(ctx, c.config())
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Kill()
	if strings.Contains(p2.Stderr(), "failpoints armed") {
		t.Fatal("the restarted server armed failpoints")
	}
	for _, r := range load {
		id, ok := post(p2.URL, r)
		if !ok {
			t.Errorf("retry of %s after the restart was not answered 2xx", r.key)
			continue
		}
		if want := acked[r.key]; want != "" && id != want {
			t.Errorf("key %s: acknowledged as %s, the retry got %s", r.key, want, id)
		}
	}
	st, err := backend.Open(ctx, c.db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drained := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s, err := st.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.ByStatus[store.StatusPending]+s.ByStatus[store.StatusRunning] == 0 {
			drained = true
			break
		}
	}
	if _, err := p2.Stop(15 * time.Second); err != nil {
		t.Errorf("stopping the restarted server: %v", err)
	}
	checkInvariants(t, st, acked, drained)
	if !strings.HasPrefix(c.db, "postgres") {
		checkIntegrity(t, c.db)
	}
}

// post sends r once and returns the call id of a 2xx answer.
func post(base string, r loadReq) (string, bool) {
	body, _ := json.Marshal(map[string]any{"tool": r.tool, "args": r.args})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/tool-calls", bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", r.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var v struct {
		CallID string `json:"call_id"`
	}
	if resp.StatusCode/100 != 2 || json.NewDecoder(resp.Body).Decode(&v) != nil || v.CallID == "" {
		return "", false
	}
	return v.CallID, true
}

// getStatus returns a call's status, or "" if it cannot be read.
func getStatus(base, id string) string {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(base + "/v1/tool-calls/" + id)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Status string `json:"status"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		return ""
	}
	return v.Status
}

// cancelWhenRunning cancels call id once it runs (a cancel request of a
// running call is a write of its own, cancel_requested).
func cancelWhenRunning(p *serveproc.Process, id string, died func() bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !died(); time.Sleep(50 * time.Millisecond) {
		if getStatus(p.URL, id) == string(store.StatusRunning) {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Post(p.URL+"/v1/tool-calls/"+id+"/cancel", "application/json", nil)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return
		}
	}
}

// settled: every acknowledged call but the abandoned sleep is final.
func settled(base string, acked map[string]string) bool {
	for key, id := range acked {
		if key == "abandon-1" {
			continue
		}
		if s := getStatus(base, id); s != string(store.StatusSucceeded) && s != string(store.StatusFailed) {
			return false
		}
	}
	return true
}

// injected reports whether out logs an injected error at point n.
func injected(out string, n failpoint.Name) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "failpoint: injected error") && strings.Contains(line, "failpoint="+string(n)) {
			return true
		}
	}
	return false
}

// checkInvariants: no acknowledged key lost, every call final, no call
// with more than one effect, every succeeded call of an effect tool has
// exactly its one effect, and no effect without a succeeded call.
func checkInvariants(t *testing.T, st store.Store, acked map[string]string, drained bool) {
	t.Helper()
	ctx := t.Context()
	for key, id := range acked {
		c, err := st.GetByKey(ctx, store.DefaultPrincipal, key)
		if err != nil {
			t.Errorf("acknowledged key %s (call %s) lost: %v", key, id, err)
		} else if c.CallID != id {
			t.Errorf("acknowledged key %s: call %s, now %s", key, id, c.CallID)
		}
	}
	calls, err := st.ListCalls(ctx, store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	effects, err := st.ListEffects(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	dupes, err := st.Dupes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dupes {
		t.Errorf("call %s has %d effects", d.CallID, d.Effects)
	}
	byCall := map[string][]store.Effect{}
	for _, e := range effects {
		byCall[e.CallID] = append(byCall[e.CallID], e)
	}
	known := map[string]bool{}
	for _, c := range calls {
		known[c.CallID] = true
		if !c.Status.Final() {
			t.Errorf("call %s (%s, key %s) is %s after the drain (drained: %v)", c.CallID, c.Tool, c.IdemKey, c.Status, drained)
		}
		n := len(byCall[c.CallID])
		switch {
		case c.Status == store.StatusSucceeded && effectTools[c.Tool]:
			if n != 1 || c.EffectID == nil || *c.EffectID != byCall[c.CallID][0].EffectID {
				t.Errorf("succeeded %s call %s (key %s) has %d effects (effect_id %v)", c.Tool, c.CallID, c.IdemKey, n, c.EffectID)
			}
		case n != 0:
			t.Errorf("%s %s call %s (key %s) has %d effects", c.Status, c.Tool, c.CallID, c.IdemKey, n)
		}
	}
	for id := range byCall {
		if !known[id] {
			t.Errorf("effect of unknown call %s", id)
		}
	}
	if len(calls) != len(load) {
		t.Errorf("%d calls after the retries, want %d (one per key)", len(calls), len(load))
	}
}

// checkIntegrity runs SQLite's integrity_check on the database file.
func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(context.Background(), "PRAGMA integrity_check").Scan(&res); err != nil {
		t.Fatal(err)
	}
	if res != "ok" {
		t.Errorf("integrity_check: %s", res)
	}
}

func tail(s string) string {
	const max = 3000
	if len(s) > max {
		return "..." + s[len(s)-max:]
	}
	return s
}
