package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// small is the load every in-process test uses: big enough to overlap
// requests, small enough to take well under a second.
func small() Options {
	return Options{N: 40, Concurrency: 8, Tool: "charge", Workers: 4, DrainTimeout: 30 * time.Second, Output: FormatJSON}
}

// run runs a bench and decodes its JSON output, which must equal the
// returned report.
func run(t *testing.T, opts Options) Report {
	t.Helper()
	var out bytes.Buffer
	rep, err := Run(t.Context(), opts, &out)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if opts.Output == FormatJSON {
		var decoded Report
		if err := json.Unmarshal(out.Bytes(), &decoded); err != nil {
			t.Fatalf("report JSON: %v\n%s", err, out.String())
		}
		a, _ := json.Marshal(decoded)
		b, _ := json.Marshal(rep)
		if !bytes.Equal(a, b) {
			t.Errorf("printed JSON differs from the returned report:\n%s\n%s", a, b)
		}
	}
	return rep
}

// consistent checks what must hold for any load measurement.
func consistent(t *testing.T, name string, s LoadStats, n int) {
	t.Helper()
	sum := s.Status0
	for _, c := range s.Status {
		sum += c
	}
	if sum != n || s.N != n {
		t.Errorf("%s: statuses sum to %d, N = %d, want %d (%v, status0 %d)", name, sum, s.N, n, s.Status, s.Status0)
	}
	l := s.LatencyMS
	if !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max && l.Mean <= l.Max) {
		t.Errorf("%s: latencies not ordered: %+v", name, l)
	}
	if s.WallS <= 0 || s.RPS <= 0 {
		t.Errorf("%s: wall %v, rps %v", name, s.WallS, s.RPS)
	}
}

func checkNamed(t *testing.T, rep Report, name string) Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, rep.Checks)
	return Check{}
}

func TestRunInProcessDistinctKeys(t *testing.T) {
	t.Parallel()
	rep := run(t, small())
	consistent(t, "service", rep.LoadStats, 40)
	if rep.Status["202"] != 40 || rep.Status0 != 0 {
		t.Errorf("statuses %v status0 %d, want 40 × 202", rep.Status, rep.Status0)
	}
	// One call and one effect per acknowledged key, once drained.
	if rep.AckedKeys != 40 || rep.CallsDelta != 40 || rep.EffectsDelta != 40 || !rep.Drained {
		t.Errorf("acked %d calls %d effects %d drained %v, want 40/40/40/true", rep.AckedKeys, rep.CallsDelta, rep.EffectsDelta, rep.Drained)
	}
	if rep.StatsAfter.ByStatus["succeeded"]-rep.StatsBefore.ByStatus["succeeded"] != 40 {
		t.Errorf("by_status after %v", rep.StatsAfter.ByStatus)
	}
	if !rep.OK || !checkNamed(t, rep, "effects_eq_acked").OK || !checkNamed(t, rep, "calls_eq_acked").OK {
		t.Errorf("checks failed: %+v", rep.Checks)
	}
	if rep.Server != "in-process" || rep.Workers != 4 || !strings.HasPrefix(rep.Base, "http://127.0.0.1:") || len(rep.RunID) != 8 {
		t.Errorf("report header: %+v", rep)
	}
	// A fresh database and a 30s lease: every call ran exactly once.
	if rep.Attempts == nil || rep.Attempts.Total != 40 || len(rep.Attempts.Buckets) != 1 ||
		rep.Attempts.Buckets[0].Attempt != 1 || rep.Attempts.Hint != "" {
		t.Errorf("attempts = %+v, want all 40 at attempt 1", rep.Attempts)
	}
	if rep.Ceiling != nil {
		t.Errorf("ceiling ran without --ceiling")
	}
}

func TestRunInProcessSameKey(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.SameKey = true
	rep := run(t, opts)
	consistent(t, "service", rep.LoadStats, 40)
	if rep.Status0 != 0 || rep.Status["200"]+rep.Status["202"] != 40 {
		t.Errorf("statuses %v status0 %d, want only 200/202", rep.Status, rep.Status0)
	}
	// The core acceptance: one call, one effect, whatever the concurrency.
	if rep.CallsDelta != 1 || rep.EffectsDelta != 1 || rep.AckedKeys != 1 {
		t.Errorf("calls %d effects %d acked keys %d, want 1/1/1", rep.CallsDelta, rep.EffectsDelta, rep.AckedKeys)
	}
	if !rep.OK || !checkNamed(t, rep, "same_key_one_call").OK || !checkNamed(t, rep, "same_key_one_effect").OK {
		t.Errorf("checks: %+v", rep.Checks)
	}
	if rep.Attempts == nil || rep.Attempts.Total != 1 {
		t.Errorf("attempts = %+v, want one call", rep.Attempts)
	}
}

func TestRunCeiling(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.Ceiling = true
	rep := run(t, opts)
	if rep.Ceiling == nil {
		t.Fatal("no ceiling")
	}
	consistent(t, "ceiling", rep.Ceiling.LoadStats, 40)
	if rep.Ceiling.Status["202"] != 40 {
		t.Errorf("ceiling statuses %v", rep.Ceiling.Status)
	}
	// The bare handler does strictly less work than the service; on a busy
	// machine a small run can still come out close, hence the loose bound.
	f := rep.Ceiling.Fraction
	if !(f > 0 && f < 2) || f != rep.RPS/rep.Ceiling.RPS {
		t.Errorf("fraction %v (service %v rps, ceiling %v rps)", f, rep.RPS, rep.Ceiling.RPS)
	}
	// The ceiling's requests never reach the service's database.
	if rep.CallsDelta != 40 {
		t.Errorf("calls delta %d", rep.CallsDelta)
	}
}

func TestRunDuration(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.N = 0
	opts.Duration = 300 * time.Millisecond
	opts.Concurrency = 4
	rep := run(t, opts)
	if rep.N < 1 || rep.WallS < 0.3 || rep.DurationS != 0.3 {
		t.Errorf("n %d wall %v duration %v", rep.N, rep.WallS, rep.DurationS)
	}
	consistent(t, "service", rep.LoadStats, rep.N)
	if int(rep.CallsDelta) != rep.N || int(rep.EffectsDelta) != rep.N || int(rep.FinishedDelta) != rep.N || rep.FinishedRPS <= 0 || !rep.OK {
		t.Errorf("n %d calls %d effects %d ok %v", rep.N, rep.CallsDelta, rep.EffectsDelta, rep.OK)
	}
}

func TestRunNoEffectTool(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.Tool = "fail"
	rep := run(t, opts)
	if rep.CallsDelta != 40 || rep.EffectsDelta != 0 || !rep.OK || rep.StatsAfter.ByStatus["failed"] != 40 {
		t.Errorf("fail tool: calls %d effects %d ok %v by_status %v", rep.CallsDelta, rep.EffectsDelta, rep.OK, rep.StatsAfter.ByStatus)
	}
	checkNamed(t, rep, "no_effect_tool")
}

// fakeService answers every POST with 202 and serves /stats from a script:
// before the load and after it. It counts the keys it saw.
type fakeService struct {
	before, after Stats
	statsCalls    atomic.Int64
	posts         atomic.Int64
	dropEvery     int64 // if > 0, every dropEvery-th POST gets its connection closed, no reply
	keys          chan string
	// status, if set, picks the n-th POST's answer (1-based); 0 means hold
	// the request until the client gives up (no reply: status0).
	status func(n int64) int
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/stats":
		s := f.after
		if f.statsCalls.Add(1) == 1 {
			s = f.before
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/tool-calls":
		n := f.posts.Add(1)
		if f.keys != nil {
			f.keys <- r.Header.Get("Idempotency-Key")
		}
		if f.dropEvery > 0 && n%f.dropEvery == 0 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // the request got no response: status0
			}
			return
		}
		code := http.StatusAccepted
		if f.status != nil {
			code = f.status(n)
		}
		if code == 0 {
			// Read the body first: net/http only notices a client that
			// hung up (and cancels r's context) once the body is consumed.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done(): // the client timed out and closed the connection
			case <-time.After(10 * time.Second): // a bound for a broken test, not a timing assumption
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code >= 300 {
			_, _ = fmt.Fprintf(w, `{"error":{"code":"fake_%d","message":"answer %d"}}`, code, n)
			return
		}
		_, _ = w.Write([]byte(`{"status":"pending"}`))
	default:
		http.NotFound(w, r)
	}
}

func TestInvariantViolationDetected(t *testing.T) {
	t.Parallel()
	// A same-key run whose /stats says the one call left two effects: the
	// duplicate that must never happen.
	fake := &fakeService{
		before: Stats{ByStatus: map[store.Status]int64{}},
		after:  Stats{Calls: 1, Effects: 2, ByStatus: map[store.Status]int64{"succeeded": 1}},
	}
	ts := httptest.NewServer(fake)
	defer ts.Close()

	opts := Options{Base: ts.URL, N: 20, Concurrency: 4, SameKey: true, DrainTimeout: time.Second, Output: FormatTable}
	var out bytes.Buffer
	rep, err := Run(t.Context(), opts, &out)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.OK {
		t.Fatalf("two effects for one key passed: %+v", rep.Checks)
	}
	if c := checkNamed(t, rep, "same_key_at_most_one_effect"); c.OK {
		t.Errorf("same_key_at_most_one_effect passed: %+v", c)
	}
	if c := checkNamed(t, rep, "effects_le_calls"); c.OK {
		t.Errorf("effects_le_calls passed: %+v", c)
	}
	if !strings.Contains(out.String(), "FAIL same_key_at_most_one_effect") {
		t.Errorf("no FAIL line:\n%s", out.String())
	}
	// External server: no database to read attempts from.
	if rep.Attempts != nil || !strings.Contains(rep.AttemptsNote, "external") || rep.Server != "external" {
		t.Errorf("attempts %+v note %q", rep.Attempts, rep.AttemptsNote)
	}
}

func TestStuckServiceFailsDrain(t *testing.T) {
	t.Parallel()
	// The one call stays pending for ever: the drain gives up after the idle
	// timeout and the run fails on "drained" (every accepted call reaches a
	// final state: docs/lifecycle.md, "Invariants").
	fake := &fakeService{after: Stats{Calls: 1, ByStatus: map[store.Status]int64{"pending": 1}}}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	rep := run(t, Options{Base: ts.URL, N: 5, Concurrency: 2, SameKey: true, DrainTimeout: 100 * time.Millisecond, Output: FormatJSON})
	if rep.Drained || rep.OK || checkNamed(t, rep, "drained").OK {
		t.Errorf("stuck service passed: drained %v checks %+v", rep.Drained, rep.Checks)
	}
	// Not drained: "exactly one effect" is not asserted, only "at most one".
	for _, c := range rep.Checks {
		if c.Name == "same_key_one_effect" {
			t.Errorf("same_key_one_effect checked before draining: %+v", c)
		}
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, same := range []bool{false, true} {
		fake := &fakeService{
			before: Stats{}, after: Stats{Calls: 10, Effects: 10},
			keys: make(chan string, 10),
		}
		if same {
			fake.after = Stats{Calls: 1, Effects: 1}
		}
		ts := httptest.NewServer(fake)
		rep := run(t, Options{Base: ts.URL, N: 10, Concurrency: 3, SameKey: same, Output: FormatJSON})
		ts.Close()
		close(fake.keys)
		var keys []string
		for k := range fake.keys {
			if !strings.HasPrefix(k, "bench-"+rep.RunID+"-") {
				t.Errorf("key %q lacks bench-<runid>-", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		distinct := len(slices.Compact(keys))
		if (same && distinct != 1) || (!same && distinct != 10) {
			t.Errorf("same=%v: %d distinct keys", same, distinct)
		}
		if !rep.OK {
			t.Errorf("same=%v: %+v", same, rep.Checks)
		}
	}
}

func TestStatus0Counted(t *testing.T) {
	t.Parallel()
	// Every 4th request gets no reply. The service "recorded" all 20 keys
	// (a dropped reply does not mean the call was not stored), so only the
	// bounds acked ≤ delta ≤ sent can be checked, and they hold.
	fake := &fakeService{after: Stats{Calls: 20, Effects: 20}, dropEvery: 4}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	rep := run(t, Options{Base: ts.URL, N: 20, Concurrency: 1, Timeout: 2 * time.Second, DrainTimeout: time.Second, Output: FormatJSON})
	if rep.Status0 != 5 || rep.Status["202"] != 15 || rep.AckedKeys != 15 || len(rep.Errors) == 0 {
		t.Errorf("status0 %d statuses %v acked %d errors %q", rep.Status0, rep.Status, rep.AckedKeys, rep.Errors)
	}
	if !rep.OK || !checkNamed(t, rep, "effects_within_bounds").OK || !checkNamed(t, rep, "calls_within_bounds").OK {
		t.Errorf("checks: %+v", rep.Checks)
	}
}

func TestReportJSONShape(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.Ceiling = true
	var out bytes.Buffer
	if _, err := Run(t.Context(), opts, &out); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"run_id", "base", "server", "workers", "tool", "same_key", "concurrency", "duration_s",
		"n", "wall_s", "rps", "latency_ms", "status", "status0", "errors", "refusals", "acked_keys",
		"stats_before", "stats_after", "calls_delta", "effects_delta", "drained", "drain_s", "finished_delta", "finished_rps",
		"attempts", "attempts_note", "ceiling", "checks", "ok"}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if len(m) != len(want) {
		var got []string
		for k := range m {
			got = append(got, k)
		}
		slices.Sort(got)
		t.Errorf("report keys = %q, want exactly %q", got, want)
	}
	lat, _ := m["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p95", "p99", "max", "mean"} {
		if _, ok := lat[k].(float64); !ok {
			t.Errorf("latency_ms.%s missing", k)
		}
	}
	for _, k := range []string{"errors", "refusals"} {
		if _, ok := m[k].([]any); !ok {
			t.Errorf("%s must be an array even when empty: %v", k, m[k])
		}
	}
	if _, ok := m["checks"].([]any); !ok {
		t.Errorf("checks must be an array")
	}
	ceil, _ := m["ceiling"].(map[string]any)
	for _, k := range []string{"n", "wall_s", "rps", "latency_ms", "status", "status0", "errors", "fraction"} {
		if _, ok := ceil[k]; !ok {
			t.Errorf("ceiling lacks %q", k)
		}
	}
	att, _ := m["attempts"].(map[string]any)
	if _, ok := att["buckets"].([]any); !ok {
		t.Errorf("attempts.buckets missing: %v", m["attempts"])
	}
	before, _ := m["stats_before"].(map[string]any)
	for _, k := range []string{"calls", "effects", "by_status"} {
		if _, ok := before[k]; !ok {
			t.Errorf("stats_before lacks %q", k)
		}
	}
}

func TestTextReport(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.Output = FormatTable
	opts.Ceiling = true
	var out bytes.Buffer
	rep, err := Run(t.Context(), opts, &out)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"n=40  wall=", "rps=", "p50=", "p99=", "http_202=40  status0=0",
		"calls=40  effects=40", "ATTEMPT", "ceiling (bare handler", "of the ceiling", "PASS effects_eq_acked"} {
		if !strings.Contains(s, want) {
			t.Errorf("text report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "FAIL") || !rep.OK {
		t.Errorf("unexpected FAIL:\n%s", s)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	opts := small()
	var bar bytes.Buffer
	opts.Progress = &bar
	run(t, opts)
	if bar.Len() == 0 {
		t.Error("no progress drawn on the progress writer")
	}
}

// TestProgressLines: off a terminal, a run that lasts longer than the
// interval prints plain progress lines (sent, rate, queue depth) instead of
// staying silent; no bar is drawn.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.N = 0
	opts.Duration = 300 * time.Millisecond
	opts.Concurrency = 2
	opts.ProgressEvery = 50 * time.Millisecond
	var lines bytes.Buffer
	opts.ProgressLines = &lines
	run(t, opts)
	got := lines.String()
	if !regexp.MustCompile(`(?m)^bench: service: \d+ sent in \S+, \d+ req/s, queue depth \d+$`).MatchString(got) {
		t.Errorf("no progress line with sent, rate and queue depth:\n%s", got)
	}
	if strings.Contains(got, "\r") {
		t.Errorf("a bar was drawn on the lines writer:\n%q", got)
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(lat)
	want := Latency{P50: 50, P95: 95, P99: 99, Max: 100, Mean: 50.5}
	if got != want {
		t.Errorf("percentiles = %+v, want %+v", got, want)
	}
	if one := percentiles([]time.Duration{7 * time.Millisecond}); one.P50 != 7 || one.P99 != 7 || one.Max != 7 {
		t.Errorf("one sample: %+v", one)
	}
	if none := percentiles(nil); none != (Latency{}) {
		t.Errorf("no samples: %+v", none)
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	failed := func(cs []Check) []string {
		var out []string
		for _, c := range cs {
			if !c.OK {
				out = append(out, c.Name)
			}
		}
		return out
	}
	tests := []struct {
		name string
		in   checkInput
		want []string // names of failing checks
	}{
		{"distinct ok", checkInput{effectTool: true, keysSent: 10, acked: 10, clean: true, drainChecked: true, drained: true, calls: 10, effects: 10}, nil},
		{"distinct lost effect", checkInput{effectTool: true, keysSent: 10, acked: 10, clean: true, drainChecked: true, drained: true, calls: 10, effects: 9}, []string{"effects_eq_acked"}},
		{"distinct extra call", checkInput{effectTool: true, keysSent: 10, acked: 10, clean: true, drainChecked: true, drained: true, calls: 11, effects: 10}, []string{"calls_eq_acked"}},
		{"distinct duplicate effect", checkInput{effectTool: true, keysSent: 10, acked: 10, clean: true, drainChecked: true, drained: true, calls: 10, effects: 11}, []string{"effects_le_calls", "effects_eq_acked"}},
		{"not drained", checkInput{effectTool: true, keysSent: 10, acked: 10, clean: true, drainChecked: true, calls: 10, effects: 4}, []string{"drained"}},
		{"unclean bounds ok", checkInput{effectTool: true, keysSent: 10, acked: 8, drainChecked: true, drained: true, calls: 9, effects: 9}, nil},
		{"unclean below acked", checkInput{effectTool: true, keysSent: 10, acked: 8, drainChecked: true, drained: true, calls: 9, effects: 7}, []string{"effects_within_bounds"}},
		{"same ok", checkInput{sameKey: true, effectTool: true, keysSent: 1, acked: 1, clean: true, drainChecked: true, drained: true, calls: 1, effects: 1}, nil},
		{"same two calls", checkInput{sameKey: true, effectTool: true, keysSent: 1, acked: 1, clean: true, drainChecked: true, drained: true, calls: 2, effects: 1}, []string{"same_key_one_call"}},
		{"same two effects", checkInput{sameKey: true, effectTool: true, keysSent: 1, acked: 1, clean: true, drainChecked: true, drained: true, calls: 1, effects: 2}, []string{"effects_le_calls", "same_key_at_most_one_effect", "same_key_one_effect"}},
		{"same no effect once drained", checkInput{sameKey: true, effectTool: true, keysSent: 1, acked: 1, clean: true, drainChecked: true, drained: true, calls: 1, effects: 0}, []string{"same_key_one_effect"}},
		{"same effect tool undrained skip", checkInput{sameKey: true, effectTool: true, keysSent: 1, acked: 1, calls: 1, effects: 0}, nil},
		{"no-effect tool with effect", checkInput{keysSent: 5, acked: 5, clean: true, drainChecked: true, drained: true, calls: 5, effects: 1}, []string{"no_effect_tool"}},
		{"nothing acknowledged, all 400", checkInput{requests: 10, unexpected: 10, effectTool: true, keysSent: 10, clean: true, drainChecked: true, drained: true}, []string{"acknowledged", "no_unexpected_status"}},
		{"nothing acknowledged, all status0", checkInput{requests: 10, effectTool: true, keysSent: 10, drainChecked: true, drained: true}, []string{"acknowledged"}},
		{"nothing acknowledged, all 503", checkInput{requests: 10, effectTool: true, keysSent: 10, drainChecked: true, drained: true}, []string{"acknowledged"}},
		{"same key, nothing acknowledged", checkInput{requests: 10, sameKey: true, effectTool: true, keysSent: 1, clean: true, drainChecked: true, drained: true}, []string{"acknowledged"}},
		{"some 400 among 2xx", checkInput{requests: 10, answered2xx: 9, unexpected: 1, effectTool: true, keysSent: 10, acked: 9, clean: true, drainChecked: true, drained: true, calls: 9, effects: 9}, []string{"no_unexpected_status"}},
		{"back-pressure among 2xx", checkInput{requests: 10, answered2xx: 8, effectTool: true, keysSent: 10, acked: 8, drainChecked: true, drained: true, calls: 8, effects: 8}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.requests == 0 {
				// The cases above are about calls and effects: every
				// request sent got a 2xx unless the case says otherwise.
				tt.in.requests, tt.in.answered2xx = max(tt.in.keysSent, 1), max(tt.in.acked, 1)
			}
			cs := checks(tt.in)
			if got := failed(cs); !slices.Equal(got, tt.want) {
				t.Errorf("failing = %q, want %q (%+v)", got, tt.want, cs)
			}
			if allOK(cs) != (len(tt.want) == 0) {
				t.Errorf("allOK = %v", allOK(cs))
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Options{N: 1, Concurrency: 1}
	if err := ok.Validate(); err != nil || ok.Tool != "charge" || ok.Timeout != DefaultTimeout || ok.Workers != DefaultWorkers || ok.Output != FormatTable {
		t.Errorf("defaults: %+v, %v", ok, err)
	}
	bad := []Options{
		{N: 0, Concurrency: 1},
		{N: 1, Concurrency: 0},
		{N: 1, Concurrency: 1, Base: "ftp://x"},
		{N: 1, Concurrency: 1, Duration: 2 * MaxDuration},
		{N: 1, Concurrency: 1, Tool: "teleport"},
		{N: 1, Concurrency: 1, Output: "yaml"},
		{N: 1, Concurrency: 1, Args: json.RawMessage(`{`)},
	}
	for _, o := range bad {
		if err := o.Validate(); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
	d := Options{Duration: time.Second, Concurrency: 1}
	if err := d.Validate(); err != nil {
		t.Errorf("--duration without -n refused: %v", err)
	}
}

// TestAllRefusedFails: a run whose every request is refused (charge with
// amount 0 → 400) measured refusals, not the service: it fails on
// acknowledged and no_unexpected_status, says why, and still reports the
// status counts. Before, every invariant held vacuously (0 calls, 0
// effects) and the run passed.
func TestAllRefusedFails(t *testing.T) {
	t.Parallel()
	opts := small()
	opts.Args = json.RawMessage(`{"amount":0}`)
	opts.Output = FormatTable
	var out bytes.Buffer
	rep, err := Run(t.Context(), opts, &out)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.OK || rep.Status["400"] != 40 || rep.AckedKeys != 0 || rep.CallsDelta != 0 {
		t.Fatalf("ok %v statuses %v acked %d calls %d: want a failed run of 40 × 400", rep.OK, rep.Status, rep.AckedKeys, rep.CallsDelta)
	}
	for _, name := range []string{"acknowledged", "no_unexpected_status"} {
		if c := checkNamed(t, rep, name); c.OK {
			t.Errorf("%s passed: %+v", name, c)
		}
	}
	if len(rep.Refusals) != 1 || !strings.HasPrefix(rep.Refusals[0], "HTTP 400 bad_request: ") {
		t.Errorf("refusals %q, want the service's bad_request message", rep.Refusals)
	}
	s := out.String()
	for _, want := range []string{
		"http_400=40  status0=0",
		"answers: 2xx=0  back-pressure(429/503)=0  unexpected=40  no response=0",
		"unexpected answer: HTTP 400 bad_request: ",
		"FAIL acknowledged: 0 of 40 requests answered 2xx (http_400=40  status0=0)",
		"FAIL no_unexpected_status: 40 of 40 requests answered with a status other than 2xx, 429 or 503",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

// TestAllTimedOutFails: with a per-request timeout no answer beats (here:
// a service that never answers), every request is status0 and the run
// fails on acknowledged — while /stats, which is the bench's bookkeeping
// and not bound by --timeout, is still read.
func TestAllTimedOutFails(t *testing.T) {
	t.Parallel()
	fake := &fakeService{before: Stats{ByStatus: map[store.Status]int64{}}, after: Stats{ByStatus: map[store.Status]int64{}},
		status: func(int64) int { return 0 }}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	rep := run(t, Options{Base: ts.URL, N: 6, Concurrency: 3, Timeout: 20 * time.Millisecond, DrainTimeout: time.Second, Output: FormatJSON})
	if rep.OK || rep.Status0 != 6 || len(rep.Status) != 0 || len(rep.Errors) == 0 {
		t.Fatalf("ok %v status0 %d statuses %v errors %q: want a failed run, all status0", rep.OK, rep.Status0, rep.Status, rep.Errors)
	}
	if c := checkNamed(t, rep, "acknowledged"); c.OK || !strings.Contains(c.Detail, "0 of 6") || !strings.Contains(c.Detail, "status0=6") {
		t.Errorf("acknowledged: %+v", c)
	}
	if c := checkNamed(t, rep, "no_unexpected_status"); !c.OK {
		t.Errorf("no answer is not an unexpected answer: %+v", c)
	}
	var text bytes.Buffer
	if err := writeReport(&text, FormatTable, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"latency: none measured", "answers: 2xx=0  back-pressure(429/503)=0  unexpected=0  no response=6",
		"FAIL acknowledged: 0 of 6 requests answered 2xx (status0=6)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}

// TestBackpressureIsNotAFailure: 429 and 503 are the service's "retry
// later"; among acknowledged requests they are reported, not failed. A
// single 500 or 404 fails the run.
func TestBackpressureIsNotAFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status func(n int64) int
		ok     bool
		answer string // the one unexpected answer's summary
	}{
		{"429 and 503", func(n int64) int {
			switch n % 4 {
			case 1:
				return http.StatusTooManyRequests
			case 2:
				return http.StatusServiceUnavailable
			}
			return http.StatusAccepted
		}, true, ""},
		{"one 500", func(n int64) int {
			if n == 3 {
				return http.StatusInternalServerError
			}
			return http.StatusAccepted
		}, false, "HTTP 500 fake_500: answer 3"},
		{"one 404", func(n int64) int {
			if n == 5 {
				return http.StatusNotFound
			}
			return http.StatusAccepted
		}, false, "HTTP 404 fake_404: answer 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeService{before: Stats{ByStatus: map[store.Status]int64{}}, status: tc.status}
			ts := httptest.NewServer(fake)
			defer ts.Close()
			// Calls: the 2xx-acknowledged keys (what a real service would hold).
			acked := int64(0)
			for n := int64(1); n <= 20; n++ {
				if c := tc.status(n); c >= 200 && c < 300 {
					acked++
				}
			}
			fake.after = Stats{Calls: acked, Effects: acked, ByStatus: map[store.Status]int64{"succeeded": acked}}
			rep := run(t, Options{Base: ts.URL, N: 20, Concurrency: 1, DrainTimeout: time.Second, Output: FormatJSON})
			if rep.OK != tc.ok {
				t.Fatalf("ok %v, want %v: statuses %v checks %+v", rep.OK, tc.ok, rep.Status, rep.Checks)
			}
			c := checkNamed(t, rep, "no_unexpected_status")
			if c.OK != tc.ok {
				t.Errorf("no_unexpected_status: %+v", c)
			}
			var want []string
			if tc.answer != "" {
				want = []string{tc.answer}
			}
			if !slices.Equal(rep.Refusals, want) {
				t.Errorf("refusals %q, want %q", rep.Refusals, want)
			}
		})
	}
}

// TestServeBare: the exported ceiling answers 202 {"ok":true} on any path
// and stops when its context ends.
func TestServeBare(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ServeBare(ctx, addr) }()
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = http.Post("http://"+addr+"/v1/tool-calls", "application/json", strings.NewReader(`{"tool":"charge"}`))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || strings.TrimSpace(string(body)) != `{"ok":true}` {
		t.Fatalf("bare handler answered %d %q", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeBare after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeBare did not return after its context ended")
	}
}
