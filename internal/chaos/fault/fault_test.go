//go:build unix

package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
)

const skipShort = "fault scenarios start real `idemctl serve` subprocesses; skipped under -short"

func TestMain(m *testing.M) {
	code := m.Run()
	servertest.Cleanup() // the binary servertest.Binary built
	os.Exit(code)
}

// setup returns a runner on the built binary whose output goes to the test
// log (on failure) and whose scenario directories live in a test temp dir.
func setup(t *testing.T, opts Options) (*Runner, *bytes.Buffer, string) {
	t.Helper()
	if testing.Short() {
		t.Skip(skipShort)
	}
	var out bytes.Buffer
	tmp := t.TempDir()
	opts.Binary, opts.Out, opts.TempDir = servertest.Binary(t), &out, tmp
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scenario output:\n%s", out.String())
		}
	})
	return r, &out, tmp
}

// assertCleanedUp checks that the run removed its directories and that no
// server process it started is left.
func assertCleanedUp(t *testing.T, tmp string, rep Report) {
	t.Helper()
	entries, err := os.ReadDir(tmp)
	if err != nil || len(entries) != 0 {
		t.Errorf("temp dir not cleaned up: %v %v", entries, err)
	}
	pids := append([]int(nil), rep.PIDs...)
	if rep.Contrast != nil {
		pids = append(pids, rep.Contrast.PIDs...)
	}
	if len(pids) == 0 {
		t.Errorf("no server pid recorded")
	}
	for _, pid := range pids {
		// Signal 0 checks existence; the runner reaped its children, so a
		// live pid would be a leaked server.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server pid %d still exists (kill 0: %v)", pid, err)
		}
	}
}

func run(t *testing.T, r *Runner, name string) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	rep, err := r.RunScenario(ctx, name)
	if err != nil {
		t.Fatalf("RunScenario(%s): %v", name, err)
	}
	return rep
}

func assertPass(t *testing.T, rep Report, calls, effects, attempt int64) {
	t.Helper()
	if rep.Verdict != Pass || len(rep.Failures) > 0 {
		t.Fatalf("verdict %s, failures %q", rep.Verdict, rep.Failures)
	}
	if rep.Calls != calls || rep.Effects != effects || rep.Attempt != attempt || rep.Status != "succeeded" {
		t.Fatalf("calls=%d effects=%d attempt=%d status=%s, want calls=%d effects=%d attempt=%d succeeded",
			rep.Calls, rep.Effects, rep.Attempt, rep.Status, calls, effects, attempt)
	}
}

func TestDropResponseOneCallOneEffectAndNewKeyContrast(t *testing.T) {
	t.Parallel()
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, "drop-response")
	assertPass(t, rep, 1, 1, 1)
	// The evidence chain: the first attempt timed out, the
	// same-key retry was answered with the original call.
	if !strings.Contains(out.String(), `{"attempt":1,"error":"timed out","key":"drop-`) ||
		!strings.Contains(out.String(), `"replayed":true`) {
		t.Fatalf("attempt lines missing from the evidence:\n%s", out)
	}
	c := rep.Contrast
	if c == nil || c.Verdict != Demo || c.Calls != 2 || c.Effects != 2 {
		t.Fatalf("contrast = %+v, want DEMO with calls=2 effects=2", c)
	}
	if !strings.Contains(out.String(), "expected demonstration of the bug") {
		t.Fatalf("contrast not reported as the expected demonstration:\n%s", out)
	}
	assertCleanedUp(t, tmp, rep)
}

func TestCrashAfterCommitReplaysOriginal(t *testing.T) {
	t.Parallel()
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, "crash")
	assertPass(t, rep, 1, 1, 1)
	if !strings.Contains(out.String(), "exit status 3") {
		t.Fatalf("no crash in the narration:\n%s", out)
	}
	assertCleanedUp(t, tmp, rep)
}

func TestCrashBeforeCommitRecoveredAtOnce(t *testing.T) {
	t.Parallel()
	r, _, tmp := setup(t, Options{})
	rep := run(t, r, "crash-before-commit")
	assertPass(t, rep, 1, 1, 2)
	if rep.Recovered < 1 {
		t.Fatalf("recovered = %d, want the dead owner's call handed back", rep.Recovered)
	}
	assertCleanedUp(t, tmp, rep)
}

// TestDownstreamChargesOnceAndIgnoreKeysContrast: an http tool's call
// crashes after the downstream charged, runs again after the restart, and
// the downstream still holds one charge, under the call's effect_id; the
// contrast against a downstream that ignores keys holds two.
func TestDownstreamChargesOnceAndIgnoreKeysContrast(t *testing.T) {
	t.Parallel()
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, "downstream")
	assertPass(t, rep, 1, 1, 2)
	if rep.Charges != 1 {
		t.Fatalf("downstream charges = %d, want 1", rep.Charges)
	}
	if !strings.Contains(out.String(), "exit status 3") || !strings.Contains(out.String(), "--tools ") {
		t.Fatalf("no crash, or no --tools server, in the narration:\n%s", out)
	}
	if !strings.Contains(out.String(), "PASS downstream: calls=1 effects=1 downstream charges=1,") {
		t.Fatalf("no verdict line with the ledger count:\n%s", out)
	}
	if !strings.Contains(out.String(), `"idempotency_key":"eff_`) {
		t.Fatalf("the ledger with the effect key is missing from the evidence:\n%s", out)
	}
	c := rep.Contrast
	if c == nil || c.Verdict != Demo || c.Calls != 1 || c.Effects != 1 || c.Charges != 2 {
		t.Fatalf("contrast = %+v, want DEMO with calls=1 effects=1 charges=2", c)
	}
	if !strings.Contains(out.String(), "a downstream that ignores Idempotency-Key charged twice") {
		t.Fatalf("contrast not reported as the expected demonstration:\n%s", out)
	}
	assertCleanedUp(t, tmp, rep)
}

func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	r, _, tmp := setup(t, Options{Concurrency: 10})
	rep := run(t, r, "concurrent")
	assertPass(t, rep, 1, 1, 1)
	if rep.Attempts < 10 {
		t.Fatalf("attempts = %d, want at least one per client", rep.Attempts)
	}
	assertCleanedUp(t, tmp, rep)
}

func TestDuplicateRequestOneEffect(t *testing.T) {
	t.Parallel()
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, "duplicate-request")
	assertPass(t, rep, 1, 1, 1)
	if !strings.Contains(out.String(), "action=duplicate-request") {
		t.Fatalf("no duplicate in the proxy log:\n%s", out)
	}
	assertCleanedUp(t, tmp, rep)
}

func TestLeaseExpiryStaleCommitFenced(t *testing.T) {
	t.Parallel()
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, "lease-expiry")
	// One charge, one effect: committed by server B at attempt 2; server
	// A's paused attempt-1 commit fenced.
	assertPass(t, rep, 1, 1, 2)
	if rep.Fenced < 1 {
		t.Fatalf("fenced=%d, want ≥ 1", rep.Fenced)
	}
	// The claims in the audit name the two servers' instance hosts.
	for _, host := range []string{leaseExpiryHostA, leaseExpiryHostB} {
		if !strings.Contains(out.String(), host+":") {
			t.Fatalf("no claim by %s in the evidence:\n%s", host, out)
		}
	}
	assertCleanedUp(t, tmp, rep)
}

func TestCancelCleansUp(t *testing.T) {
	t.Parallel()
	r, _, tmp := setup(t, Options{})
	// lease-expiry takes seconds; cancel it once its first server is up
	// (the narration names its pid), not after a fixed time: on a loaded
	// machine a timer could fire before any server started.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r.out = &lockedWriter{w: &cancelOn{w: r.out, marker: "server A: ", cancel: cancel}}
	rep, err := r.RunScenario(ctx, "lease-expiry")
	if err == nil {
		t.Fatalf("RunScenario returned no error after cancel; report %+v", rep)
	}
	assertCleanedUp(t, tmp, rep)
}

// cancelOn passes writes to w and calls cancel after the first one that
// contains marker.
type cancelOn struct {
	w      io.Writer
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if strings.Contains(string(p), c.marker) {
		c.cancel()
	}
	return n, err
}

// brokenPipe accepts n writes, then fails like a closed stdout.
type brokenPipe struct{ n int }

func (b *brokenPipe) Write(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, syscall.EPIPE
	}
	b.n--
	return len(p), nil
}

func TestClosedOutputStopsAndCleansUp(t *testing.T) {
	t.Parallel()
	r, _, tmp := setup(t, Options{})
	r.out = &lockedWriter{w: &brokenPipe{n: 5}} // dies a few lines in, mid-scenario
	rep, err := r.RunScenario(t.Context(), "drop-response")
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("err = %v, want the write error to end the run", err)
	}
	assertCleanedUp(t, tmp, rep)
}

func TestDryRunStartsNothing(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := DryRun(&out); err != nil {
		t.Fatal(err)
	}
	for _, name := range Names() {
		if !strings.Contains(out.String(), "[fault] --"+name+":") {
			t.Errorf("plan of %s missing", name)
		}
	}
	if !strings.Contains(out.String(), "nothing was started") {
		t.Errorf("output:\n%s", out.String())
	}
	// The downstream scenario's contrast is a downstream ignoring keys,
	// not the new-key client of the others.
	var ds bytes.Buffer
	if err := DryRun(&ds, "downstream"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ds.String(), "then, unless --no-contrast: the same fault against a downstream that ignores Idempotency-Key") ||
		strings.Contains(ds.String(), "--new-key-on-retry") {
		t.Errorf("downstream plan:\n%s", ds.String())
	}
	if err := DryRun(&out, "explode"); err == nil {
		t.Error("unknown scenario accepted")
	}
}

func TestNewRefusesMissingBinary(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Binary: filepath.Join(t.TempDir(), "nope")}); err == nil {
		t.Fatal("missing binary accepted")
	}
}

// TestEvidenceFlagsBrokenInvariants feeds the checker a database that
// breaks invariants (a call never run, an effect missing, a client told
// about two calls) and expects each to be named.
func TestEvidenceFlagsBrokenInvariants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "idem.db")
	st, err := backend.Open(t.Context(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = st.CreateOrGet(t.Context(), store.NewCall{CallID: "c_0000000000000001", IdemKey: "K",
		Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{"amount":1}`)})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	stats := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"calls":1,"effects":0,"by_status":{"pending":1}}`)
	}))
	defer stats.Close()

	var out bytes.Buffer
	r := &Runner{out: &out, opts: Options{}}
	e := &env{r: r, dir: dir, db: db, out: &out}
	var rep Report
	if _, err := e.evidence(t.Context(), stats.URL, &rep, expect{calls: 1, effects: 1}, []string{"c_0000000000000001", "c_other"}); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(rep.Failures, "\n")
	for _, want := range []string{"invariant 1", "invariant 4", "effect is missing"} {
		if !strings.Contains(joined, want) {
			t.Errorf("failures do not name %q:\n%s", want, joined)
		}
	}
	if rep.Calls != 1 || rep.Effects != 0 || rep.Status != "pending" {
		t.Errorf("report = %+v", rep)
	}
}

// TestMCPUpstreamOneReceiptAndIgnoreKeysContrast: the demo MCP server's
// answer is lost after the effect; idemctl calls again under the same key
// and the upstream holds one receipt; the contrast against a server that
// ignores keys holds two.
func TestMCPUpstreamOneReceiptAndIgnoreKeysContrast(t *testing.T) {
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, "mcp-upstream")
	assertPass(t, rep, 1, 1, 1)
	if rep.Charges != 1 {
		t.Fatalf("upstream receipts = %d, want 1", rep.Charges)
	}
	if !strings.Contains(out.String(), "PASS mcp-upstream: calls=1 effects=1 upstream receipts=1,") {
		t.Fatalf("no verdict line with the ledger count:\n%s", out)
	}
	c := rep.Contrast
	if c == nil || c.Verdict != Demo || c.Calls != 1 || c.Effects != 1 || c.Charges != 2 {
		t.Fatalf("contrast = %+v, want DEMO with calls=1 effects=1 receipts=2", c)
	}
	assertCleanedUp(t, tmp, rep)
}

// TestUnknownOutcomePolicies: against a downstream that ignores keys and
// loses its first answer, on_unknown lookup charges once and succeeds,
// hold charges once and holds the call (reconcile sees its one record);
// the retry contrast charges twice and reconcile reports the shared key.
func TestUnknownOutcomePolicies(t *testing.T) {
	t.Parallel()
	r, out, tmp := setup(t, Options{})
	rep := run(t, r, unknownName)
	if rep.Verdict != Pass || rep.Calls != 2 || rep.Effects != 1 || rep.Charges != 2 {
		t.Fatalf("report = %+v, want PASS with calls=2 effects=1 charges=2 (one per policy)", rep)
	}
	for _, want := range []string{
		"charge_lookup: succeeded after a lookup found the charge",
		"charge_hold: held (failed, outcome_unknown, retryable false) with 1 charge downstream",
		"): the downstream has 1 record: the effect happened",
		"PASS unknown-outcome: calls=2 effects=1 downstream charges=2,",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("the narration lacks %q:\n%s", want, out)
		}
	}
	c := rep.Contrast
	if c == nil || c.Verdict != Demo || c.Calls != 1 || c.Effects != 1 || c.Charges != 2 {
		t.Fatalf("contrast = %+v, want DEMO with calls=1 effects=1 charges=2", c)
	}
	if !strings.Contains(out.String(), "shared key: 2 records made with key eff_") ||
		!strings.Contains(out.String(), "idemctl reconcile found the duplicate") {
		t.Fatalf("the contrast's reconcile did not report the duplicate:\n%s", out)
	}
	assertCleanedUp(t, tmp, rep)
}
