package bench

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	opts := small()
	opts.SameKey = true
	rep := run(t, opts)
	consistent(t, "service", rep.LoadStats, 40)
	if rep.Status0 != 0 || rep.Status["200"]+rep.Status["202"] != 40 {
		t.Errorf("statuses %v status0 %d, want only 200/202", rep.Status, rep.Status0)
	}
	// The core acceptance of §12.12.3: one call, one effect, whatever the concurrency.
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
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"pending"}`))
	default:
		http.NotFound(w, r)
	}
}

func TestInvariantViolationDetected(t *testing.T) {
	// A same-key run whose /stats says the one call left two effects: the
	// duplicate §12.11.1 says must never happen.
	fake := &fakeService{
		before: Stats{ByStatus: map[string]int64{}},
		after:  Stats{Calls: 1, Effects: 2, ByStatus: map[string]int64{"succeeded": 1}},
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
	// The one call stays pending for ever: the drain gives up after the idle
	// timeout and the run fails on "drained" (SPEC §2.4: every accepted call
	// reaches a final state).
	fake := &fakeService{after: Stats{Calls: 1, ByStatus: map[string]int64{"pending": 1}}}
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
		"n", "wall_s", "rps", "latency_ms", "status", "status0", "errors", "acked_keys",
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
	if _, ok := m["errors"].([]any); !ok {
		t.Errorf("errors must be an array even when empty: %v", m["errors"])
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
	opts := small()
	var bar bytes.Buffer
	opts.Progress = &bar
	run(t, opts)
	if bar.Len() == 0 {
		t.Error("no progress drawn on the progress writer")
	}
}

func TestPercentiles(t *testing.T) {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
