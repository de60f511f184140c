package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// countingDownstream records when each request arrived and answers 200,
// or 503 while failing is set.
type countingDownstream struct {
	*httptest.Server
	mu      sync.Mutex
	at      []time.Time
	failing atomic.Bool
}

func newCountingDownstream(t *testing.T) *countingDownstream {
	t.Helper()
	d := &countingDownstream{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.at = append(d.at, time.Now())
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if d.failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"down"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(d.Close)
	return d
}

// arrivals is when each request arrived, in order.
func (d *countingDownstream) arrivals() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.at)
}

// rateTolerance is the requests a window may see beyond limit·T + burst:
// a call admitted by the database's clock reaches the downstream after a
// claim and an HTTP round trip whose length varies, so two arrivals may
// be closer together than their admissions were.
const rateTolerance = 1

// maxInWindow is the most requests that arrived in any span of length w
// starting at an arrival.
func maxInWindow(at []time.Time, w time.Duration) int {
	most := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) <= w; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// checkRate fails unless every window of the arrivals kept to the limit:
// at most limit·T/per + burst + rateTolerance in any span T (for T of one
// per and of the whole run).
func checkRate(t *testing.T, at []time.Time, limit int, per time.Duration, burst int) {
	t.Helper()
	if len(at) < 2 {
		t.Fatalf("%d requests arrived; the test needs a run", len(at))
	}
	whole := at[len(at)-1].Sub(at[0])
	for _, w := range []time.Duration{per, whole} {
		most := maxInWindow(at, w)
		allowed := int(float64(limit)*w.Seconds()/per.Seconds()) + burst + rateTolerance
		if most > allowed {
			t.Errorf("%d requests within %v; the limit %d per %v with burst %d allows %d (tolerance %d included)",
				most, w.Round(time.Millisecond), limit, per, burst, allowed, rateTolerance)
		}
	}
	t.Logf("%d requests over %v, at most %d within %v", len(at), whole.Round(time.Millisecond), maxInWindow(at, per), per)
}

// rateToolsYAML is a tools file with one http tool, hook, sending to url,
// rate-limited to 10 per second with a burst of 2.
func rateToolsYAML(url string) string {
	return fmt.Sprintf(`tools:
  - {name: hook, kind: http, url: %q, rate: {limit: 10, per: 1s, burst: 2}}
`, url)
}

// TestRateLimitOneInstance: a tool limited to 10/s with a burst of 2
// receives no more than that (a counting downstream's arrivals), its
// calls wait pending rather than fail (every one succeeds at its first
// attempt), and the waits are counted in idemctl_tool_throttled_total.
func TestRateLimitOneInstance(t *testing.T) {
	t.Parallel()
	down := newCountingDownstream(t)
	reg, err := toolreg.Parse([]byte(rateToolsYAML(down.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	const n = 25
	for i := range n {
		if r := b.post(fmt.Sprintf("k-rate-%02d", i), `{"tool":"hook","args":{}}`); r.status != http.StatusAccepted {
			t.Fatalf("post %d: %d %s", i, r.status, r.body)
		}
	}
	// The console's overview shows the tool throttling while its bucket
	// is empty (about two seconds here).
	eventually(t, "the console shows hook throttling", func() bool {
		page := string(b.get("/ui").body)
		return strings.Contains(page, `data-tool="hook"`) && strings.Contains(page, `badge throttled`)
	})
	eventually(t, "every call succeeded", func() bool { return b.stats().ByStatus[store.StatusSucceeded] == n })
	// Nothing waits now, though the bucket was just emptied: no throttling.
	if page := string(b.get("/ui").body); strings.Contains(page, `badge throttled`) {
		t.Error("the console shows hook throttling with no call pending")
	}
	at := down.arrivals()
	if len(at) != n {
		t.Fatalf("%d requests downstream for %d calls", len(at), n)
	}
	checkRate(t, at, 10, time.Second, 2)
	if got := b.metricValue(`idemctl_tool_throttled_total{tool="hook"}`); got < 1 {
		t.Errorf("idemctl_tool_throttled_total{tool=\"hook\"} = %v, want waits counted", got)
	}
	attempts, err := b.st.Attempts(t.Context())
	if err != nil || len(attempts) != 1 || attempts[0].Attempt != 1 {
		t.Errorf("attempts %+v, %v: want every call run once (throttling claims nothing)", attempts, err)
	}
}

// TestRateLimitThreeInstances: three `idemctl serve` processes on one
// PostgreSQL database, each taking calls, share the tool's budget: the
// downstream still sees at most 10/s plus the burst.
func TestRateLimitThreeInstances(t *testing.T) {
	down := newCountingDownstream(t)
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(tools, []byte(rateToolsYAML(down.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3, func(int) []string { return []string{"--tools", tools} })
	const n = 30
	for i := range n {
		r := postKey(c.procs[i%3].URL, fmt.Sprintf("k-mi-rate-%02d", i), `{"tool":"hook","args":{}}`)
		if r.err != nil || r.status != http.StatusAccepted {
			t.Fatalf("post %d: %d %v", i, r.status, r.err)
		}
	}
	eventually(t, "every call succeeded", func() bool {
		s, err := c.st.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s.ByStatus[store.StatusSucceeded] == n
	})
	at := down.arrivals()
	if len(at) != n {
		t.Fatalf("%d requests downstream for %d calls", len(at), n)
	}
	checkRate(t, at, 10, time.Second, 2)
	perInstance := map[int]int{}
	for _, r := range claims(c.audit("")) {
		perInstance[c.instanceOf(r.Detail)]++
	}
	if len(perInstance) < 2 {
		t.Errorf("claims per instance %v: want the budget shared by at least 2 instances", perInstance)
	}
	t.Logf("claims per instance: %v", perInstance)
}

// breakerTools is a tools file with one http tool, flaky, sending to url,
// with no server-side retry and a breaker of 3 failures and cooldown.
func breakerTools(t *testing.T, url string, cooldown time.Duration, failFast bool) *toolreg.Registry {
	t.Helper()
	reg, err := toolreg.Parse([]byte(fmt.Sprintf(`tools:
  - {name: flaky, kind: http, url: %q, retry: {max_attempts: 1}, breaker: {failures: 3, cooldown: %s, fail_fast: %v}}
`, url, cooldown, failFast)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// breakerOf reads flaky's breaker from GET /v1/tools.
func breakerOf(t *testing.T, b *bundle) wire.ToolBreaker {
	t.Helper()
	r := b.get("/v1/tools")
	var l wire.Tools
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("GET /v1/tools: %d %s", r.status, r.body)
	}
	for _, tl := range l.Tools {
		if tl.Name == "flaky" && tl.Breaker != nil {
			return *tl.Breaker
		}
	}
	t.Fatalf("flaky has no breaker in %s", r.body)
	return wire.ToolBreaker{}
}

// TestBreakerOpensProbesCloses: three retryable failures in a row open
// the breaker; for the cooldown no request reaches the downstream and new
// calls stay pending; then one probe goes; its failure reopens the breaker
// for another cooldown; once the downstream recovers, the next probe
// succeeds, the breaker closes and the waiting calls run. GET /v1/tools
// and the gauge show the state.
func TestBreakerOpensProbesCloses(t *testing.T) {
	t.Parallel()
	down := newCountingDownstream(t)
	down.failing.Store(true)
	const cooldown = time.Second
	b := setup(t, func(c *Config) { c.Tools = breakerTools(t, down.URL, cooldown, false) })

	var first []string
	for i := range 3 {
		first = append(first, b.post(fmt.Sprintf("k-brk-%d", i), `{"tool":"flaky","args":{}}`).call(t).CallID)
	}
	for _, id := range first {
		if c := b.waitFinal(id); c.Status != wire.StatusFailed {
			t.Fatalf("call %s: %s, want failed (503 downstream, no retry)", id, c.Status)
		}
	}
	// The store holds the state at once; this instance's gauge follows it
	// a moment later (it is set after the report commits).
	eventually(t, "the breaker opens, and the gauge says 2 (open)", func() bool {
		return breakerOf(t, b).State == wire.BreakerOpen && b.metricValue(`idemctl_tool_breaker_state{tool="flaky"}`) == 2
	})
	opened := down.arrivals()[2]

	var waiting []string
	for i := range 4 {
		waiting = append(waiting, b.post(fmt.Sprintf("k-brk-w%d", i), `{"tool":"flaky","args":{}}`).call(t).CallID)
	}
	// Half the cooldown: nothing was sent, the new calls are pending.
	time.Sleep(cooldown / 2)
	if n := len(down.arrivals()); n != 3 {
		t.Fatalf("%d requests downstream while the breaker was open, want the 3 before it", n)
	}
	for _, id := range waiting {
		if c, err := b.st.GetAny(t.Context(), id); err != nil || c.Status != store.StatusPending {
			t.Fatalf("call %s while open: %s %v, want pending", id, c.Status, err)
		}
	}

	// The probe, after the cooldown, fails: one request, the breaker reopens.
	eventually(t, "the probe", func() bool { return len(down.arrivals()) == 4 })
	at := down.arrivals()
	if gap := at[3].Sub(opened); gap < cooldown-50*time.Millisecond {
		t.Fatalf("probe %v after the breaker opened, before the cooldown %v", gap, cooldown)
	}
	eventually(t, "the breaker reopens", func() bool { return breakerOf(t, b).State == wire.BreakerOpen && len(down.arrivals()) == 4 })
	down.failing.Store(false)
	time.Sleep(cooldown / 2)
	if n := len(down.arrivals()); n != 4 {
		t.Fatalf("%d requests after the failed probe, within its cooldown; want none more than the probe", n)
	}

	// The second probe succeeds: closed, the rest run.
	if c := b.waitFinal(waiting[0]); c.Status != wire.StatusFailed {
		t.Fatalf("the first probe's call: %s, want failed", c.Status)
	}
	for _, id := range waiting[1:] {
		if c := b.waitFinal(id); c.Status != wire.StatusSucceeded {
			t.Fatalf("call %s after the breaker closed: %s", id, c.Status)
		}
	}
	at = down.arrivals()
	if len(at) != 3+1+3 {
		t.Fatalf("%d requests in all, want 3 failures, 1 failed probe and 3 successes (the second probe's included)", len(at))
	}
	if gap := at[4].Sub(at[3]); gap < cooldown-50*time.Millisecond {
		t.Fatalf("second probe %v after the first, before the cooldown %v", gap, cooldown)
	}
	if br := breakerOf(t, b); br.State != wire.BreakerClosed || br.ConsecutiveFailures != 0 || br.Until != nil {
		t.Fatalf("breaker after the successful probe: %+v, want closed", br)
	}
	eventually(t, "the gauge says 0 (closed)", func() bool {
		return b.metricValue(`idemctl_tool_breaker_state{tool="flaky"}`) == 0
	})
}

// TestBreakerFailFast: with fail_fast, a new call of a tool whose breaker
// is open is refused at once with 503 circuit_open and a Retry-After
// within the cooldown, and nothing is stored; a key already recorded is
// still answered.
func TestBreakerFailFast(t *testing.T) {
	t.Parallel()
	down := newCountingDownstream(t)
	down.failing.Store(true)
	b := setup(t, func(c *Config) { c.Tools = breakerTools(t, down.URL, 3*time.Second, true) })
	for i := range 3 {
		b.waitFinal(b.post(fmt.Sprintf("k-ff-%d", i), `{"tool":"flaky","args":{}}`).call(t).CallID)
	}
	eventually(t, "the breaker opens", func() bool { open, _ := b.srv.exec.FailFast("flaky"); return open })
	if page := string(b.get("/ui").body); !strings.Contains(page, `badge breaker-open`) || !strings.Contains(page, `id="open-breakers">1 open`) {
		t.Errorf("the console's overview does not show flaky's breaker open")
	}
	r := b.post("k-ff-new", `{"tool":"flaky","args":{}}`)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeCircuitOpen {
		t.Fatalf("new call while open: %d %s, want 503 circuit_open", r.status, r.body)
	}
	if ra, err := strconv.Atoi(r.header.Get(wire.HeaderRetryAfter)); err != nil || ra < 2 || ra > 3 {
		t.Errorf("Retry-After %q, want the cooldown's rest, 2 or 3 s of 3 s", r.header.Get(wire.HeaderRetryAfter))
	}
	if _, err := b.st.GetByKey(t.Context(), store.DefaultPrincipal, "k-ff-new"); err == nil {
		t.Error("the refused call was stored")
	}
	if r := b.post("k-ff-0", `{"tool":"flaky","args":{}}`); r.status/100 != 2 {
		t.Errorf("a recorded key while open: %d %s, want it answered", r.status, r.body)
	}
	if got := b.metricValue(`idemctl_calls_total{outcome="circuit_open"}`); got != 1 {
		t.Errorf(`idemctl_calls_total{outcome="circuit_open"} = %v, want 1`, got)
	}
}

// TestRedriveObeysRateLimit: calls sent back to pending by a redrive run
// at the tool's rate like any pending call: the recovery of a downstream
// is not met with a flood.
func TestRedriveObeysRateLimit(t *testing.T) {
	t.Parallel()
	down := newCountingDownstream(t)
	down.failing.Store(true)
	reg, err := toolreg.Parse([]byte(fmt.Sprintf(`tools:
  - {name: hook, kind: http, url: %q, retry: {max_attempts: 1}, rate: {limit: 10, per: 1s, burst: 2}}
`, down.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	const n = 14
	for i := range n {
		b.post(fmt.Sprintf("k-rd-%02d", i), `{"tool":"hook","args":{}}`).call(t)
	}
	eventually(t, "every call failed", func() bool { return b.stats().ByStatus[store.StatusFailed] == n })
	down.failing.Store(false)

	r := b.do(http.MethodPost, wire.PathRedrive, []byte(`{"tool":"hook","code":"downstream_error"}`),
		map[string]string{"Content-Type": "application/json"})
	var redriven wire.Redriven[json.RawMessage]
	if err := json.Unmarshal(r.body, &redriven); r.status != http.StatusOK || err != nil || len(redriven.Calls) != n {
		t.Fatalf("redrive: %d %s", r.status, r.body)
	}
	eventually(t, "every redriven call succeeded", func() bool { return b.stats().ByStatus[store.StatusSucceeded] == n })
	at := down.arrivals()
	if len(at) != 2*n {
		t.Fatalf("%d requests downstream, want %d failures and %d redriven successes", len(at), n, n)
	}
	checkRate(t, at[n:], 10, time.Second, 2)
}
