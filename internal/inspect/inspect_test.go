package inspect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/inspect"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/wire"
)

// fixture is a database with known contents, built through the store API:
//
//	paid     charge 100, claimed once, succeeded with an effect      attempt 1
//	failed   fail, claimed once, failed                              attempt 1
//	mailed   send_email, claimed, released (owner gone), claimed
//	         again, succeeded with an effect (amount NULL)           attempt 2
//	waiting  charge 5, never claimed                                 attempt 0
type fixture struct {
	st                              store.Store
	path                            string
	paid, failed, mailed, waiting   store.Call
	paidEffect, mailedEffect, owner string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlite.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{st: st, path: path, owner: "host:1234:test"}

	create := func(id, key, tool, args string) store.Call {
		t.Helper()
		c, out, err := st.CreateOrGet(ctx, store.NewCall{
			CallID: id, IdemKey: key, Fingerprint: "fp-" + key, Tool: tool, ArgsJSON: json.RawMessage(args),
		})
		if err != nil || out != store.Created {
			t.Fatalf("CreateOrGet(%s) = %v, %v", key, out, err)
		}
		return c
	}
	claim := func(id string) store.Call {
		t.Helper()
		got, err := st.ClaimNext(ctx, f.owner, time.Minute, 1)
		if err != nil || len(got) != 1 || got[0].CallID != id {
			t.Fatalf("ClaimNext = %+v, %v; want %s", got, err, id)
		}
		return got[0]
	}

	f.paidEffect = "eff_00000000000000a1"
	c := create("c_00000000000000a1", "k-paid", "charge", `{"amount":100}`)
	c = claim(c.CallID)
	amount := int64(100)
	if f.paid, err = st.Succeed(ctx, store.Completion{
		Lease:  store.Lease{CallID: c.CallID, Owner: f.owner, Attempt: c.Attempt},
		Result: json.RawMessage(`{"charged":100,"effect_id":"eff_00000000000000a1"}`),
		Effect: &store.Effect{EffectID: f.paidEffect, CallID: c.CallID, Tool: "charge", Amount: &amount},
	}); err != nil {
		t.Fatalf("Succeed: %v", err)
	}

	c = create("c_00000000000000b2", "k-failed", "fail", `{"retryable":false}`)
	c = claim(c.CallID)
	if f.failed, err = st.Fail(ctx, store.Completion{
		Lease: store.Lease{CallID: c.CallID, Owner: f.owner, Attempt: c.Attempt},
		Error: json.RawMessage(`{"code":"tool_failed","message":"boom","retryable":false}`),
	}); err != nil {
		t.Fatalf("Fail: %v", err)
	}

	f.mailedEffect = "eff_00000000000000c3"
	c = create("c_00000000000000c3", "k-mailed", "send_email", `{"to":"a@example.invalid"}`)
	c = claim(c.CallID)
	if err := st.Release(ctx, store.Lease{CallID: c.CallID, Owner: f.owner, Attempt: c.Attempt}, "owner process gone"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	c = claim(c.CallID)
	if c.Attempt != 2 {
		t.Fatalf("second claim attempt = %d, want 2", c.Attempt)
	}
	if f.mailed, err = st.Succeed(ctx, store.Completion{
		Lease:  store.Lease{CallID: c.CallID, Owner: f.owner, Attempt: c.Attempt},
		Result: json.RawMessage(`{"sent":true}`),
		Effect: &store.Effect{EffectID: f.mailedEffect, CallID: c.CallID, Tool: "send_email"},
	}); err != nil {
		t.Fatalf("Succeed: %v", err)
	}

	f.waiting = create("c_00000000000000d4", "k-waiting", "charge", `{"amount":5}`)
	return f
}

// decode unmarshals JSON output into v, failing on trailing garbage.
func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// row returns the table line containing all of needles, or fails.
func row(t *testing.T, out string, needles ...string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		ok := true
		for _, n := range needles {
			if !strings.Contains(line, n) {
				ok = false
				break
			}
		}
		if ok {
			return line
		}
	}
	t.Fatalf("no line with %q in:\n%s", needles, out)
	return ""
}

// cells splits a table row into its trimmed cells.
func cells(line string) []string {
	var out []string
	for _, c := range regexp.MustCompile(`[│|]`).Split(line, -1) {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

func TestCalls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	t.Run("table", func(t *testing.T) {
		var buf bytes.Buffer
		got, err := inspect.Calls(ctx, f.st, inspect.CallsOptions{Output: inspect.FormatTable, Limit: 50}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("returned %d calls, want 4", len(got))
		}
		out := buf.String()
		header := strings.ToUpper(row(t, out, "CALL", "STATUS"))
		for _, h := range []string{"CALL", "PRINCIPAL", "VIA", "IDEM", "TOOL", "STATUS", "ATTEMPT", "EFFECT", "CREATED", "UPDATED"} {
			if !strings.Contains(header, h) {
				t.Errorf("header %q lacks %s", header, h)
			}
		}
		for _, want := range [][]string{
			{f.paid.CallID, "-", "http", "k-paid", "charge", "succeeded", "1", f.paidEffect},
			{f.failed.CallID, "-", "http", "k-failed", "fail", "failed", "1", "-"},
			{f.mailed.CallID, "-", "http", "k-mailed", "send_email", "succeeded", "2", f.mailedEffect},
			{f.waiting.CallID, "-", "http", "k-waiting", "charge", "pending", "0", "-"},
		} {
			c := cells(row(t, out, want[0]))
			if len(c) != 10 {
				t.Fatalf("row %q has %d cells, want 10", c, len(c))
			}
			if !equal(c[:8], want) {
				t.Errorf("row = %q, want prefix %q", c, want)
			}
			if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(c[8]) {
				t.Errorf("created %q is not an absolute UTC time", c[8])
			}
		}
	})

	t.Run("status and limit filter", func(t *testing.T) {
		var buf bytes.Buffer
		got, err := inspect.Calls(ctx, f.st, inspect.CallsOptions{Output: inspect.FormatTable, Status: store.StatusSucceeded, Limit: 1}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		// Newest first: mailed succeeded after paid.
		if len(got) != 1 || got[0].CallID != f.mailed.CallID {
			t.Fatalf("got %+v, want only %s", got, f.mailed.CallID)
		}
		if strings.Contains(buf.String(), f.paid.CallID) || strings.Contains(buf.String(), f.failed.CallID) {
			t.Errorf("filtered table shows other calls:\n%s", buf.String())
		}
	})

	t.Run("json", func(t *testing.T) {
		var buf bytes.Buffer
		if _, err := inspect.Calls(ctx, f.st, inspect.CallsOptions{Output: inspect.FormatJSON}, &buf); err != nil {
			t.Fatal(err)
		}
		var got []map[string]json.RawMessage
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%v in %s", err, buf.String())
		}
		if len(got) != 4 {
			t.Fatalf("%d calls in JSON, want 4", len(got))
		}
		// The API's call object (optional members aside), then the lease.
		keys := []string{"call_id", "idem_key", "tool", "args", "status", "attempt", "result", "error", "effect_id",
			"fingerprint", "created_at", "updated_at", "query_url", "via", "owner", "lease_until"}
		optional := map[string]bool{"principal": true, "client_id": true, "seq": true, "cancel_requested": true, "not_before": true}
		byID := map[string]inspect.CallJSON{}
		for _, m := range got {
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					t.Errorf("call JSON lacks %q: %v", k, m)
				}
			}
			for k := range m {
				if !slices.Contains(keys, k) && !optional[k] {
					t.Errorf("call JSON has %q, not in the API's call object nor the lease", k)
				}
			}
			b, _ := json.Marshal(m)
			var c inspect.CallJSON
			decode(t, b, &c)
			byID[c.CallID] = c
		}
		p := byID[f.paid.CallID]
		if p.Status != store.StatusSucceeded || p.Attempt != 1 || p.EffectID == nil || *p.EffectID != f.paidEffect ||
			!jsonEqual(p.Result, `{"charged":100,"effect_id":"eff_00000000000000a1"}`) || string(p.Error) != "null" ||
			!jsonEqual(p.Args, `{"amount":100}`) || p.IdemKey != "k-paid" {
			t.Errorf("paid call JSON = %+v", p)
		}
		fl := byID[f.failed.CallID]
		if fl.Status != store.StatusFailed || !jsonEqual(fl.Error, `{"code":"tool_failed","message":"boom","retryable":false}`) || string(fl.Result) != "null" {
			t.Errorf("failed call JSON = %+v", fl)
		}
		if byID[f.mailed.CallID].Attempt != 2 || byID[f.waiting.CallID].Status != store.StatusPending {
			t.Errorf("mailed/waiting JSON = %+v / %+v", byID[f.mailed.CallID], byID[f.waiting.CallID])
		}
	})

	t.Run("json empty is an array", func(t *testing.T) {
		var buf bytes.Buffer
		if _, err := inspect.Calls(ctx, f.st, inspect.CallsOptions{Output: inspect.FormatJSON, Status: store.StatusRunning}, &buf); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(buf.String()) != "[]" {
			t.Errorf("no running calls: got %q, want []", buf.String())
		}
	})
}

func TestEffects(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	var buf bytes.Buffer
	got, err := inspect.Effects(ctx, f.st, inspect.EffectsOptions{Output: inspect.FormatTable}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d effects, want 2", len(got))
	}
	out := buf.String()
	if c := cells(row(t, out, f.paidEffect)); !equal(c[:4], []string{f.paidEffect, f.paid.CallID, "charge", "100"}) {
		t.Errorf("paid effect row = %q", c)
	}
	if c := cells(row(t, out, f.mailedEffect)); !equal(c[:4], []string{f.mailedEffect, f.mailed.CallID, "send_email", "-"}) {
		t.Errorf("mailed effect row = %q", c)
	}

	buf.Reset()
	if _, err := inspect.Effects(ctx, f.st, inspect.EffectsOptions{Output: inspect.FormatJSON}, &buf); err != nil {
		t.Fatal(err)
	}
	var effs []inspect.EffectJSON
	decode(t, buf.Bytes(), &effs)
	if len(effs) != 2 {
		t.Fatalf("%d effects in JSON, want 2", len(effs))
	}
	m := map[string]inspect.EffectJSON{}
	for _, e := range effs {
		m[e.EffectID] = e
	}
	if e := m[f.paidEffect]; e.CallID != f.paid.CallID || e.Amount == nil || *e.Amount != 100 || e.CreatedAt == 0 {
		t.Errorf("paid effect JSON = %+v", e)
	}
	if e := m[f.mailedEffect]; e.Tool != "send_email" || e.Amount != nil {
		t.Errorf("mailed effect JSON = %+v", e)
	}
	if !strings.Contains(buf.String(), `"amount": null`) {
		t.Errorf("a NULL amount must be JSON null:\n%s", buf.String())
	}
}

func TestAuditTimeline(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	var buf bytes.Buffer
	events, err := inspect.Audit(ctx, f.st, inspect.AuditOptions{Output: inspect.FormatTable, CallID: f.mailed.CallID}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents := []string{"created", "claimed", "outcome_unknown", "recover", "claimed", "succeeded"}
	if got := eventNames(events); !equal(got, wantEvents) {
		t.Fatalf("events = %q, want %q", got, wantEvents)
	}
	out := buf.String()
	if !strings.Contains(out, "call "+f.mailed.CallID) || !strings.Contains(out, "status succeeded") || !strings.Contains(out, "attempt 2") {
		t.Errorf("timeline lacks the call summary line:\n%s", out)
	}
	if strings.Contains(out, f.paid.CallID) {
		t.Errorf("timeline of one call shows another:\n%s", out)
	}
	// Rows in order, first at +0.000s, each with an absolute time.
	var seen []string
	for _, line := range strings.Split(out, "\n") {
		c := cells(line)
		if len(c) < 3 || !strings.HasPrefix(c[0], "+") {
			continue
		}
		if len(seen) == 0 && c[0] != "+0.000s" {
			t.Errorf("first event at %s, want +0.000s", c[0])
		}
		if !regexp.MustCompile(`^\+\d+\.\d{3}s$`).MatchString(c[0]) || !strings.HasSuffix(c[1], "Z") {
			t.Errorf("row %q: want +S.mmms and an absolute time", c)
		}
		seen = append(seen, c[2])
	}
	if !equal(seen, wantEvents) {
		t.Errorf("table events = %q, want %q", seen, wantEvents)
	}
	if !strings.Contains(row(t, out, "recover"), "owner process gone") {
		t.Errorf("recover row lacks its reason:\n%s", out)
	}
	if !strings.Contains(row(t, out, "claimed"), f.owner) {
		t.Errorf("claimed row lacks the owner (the audit detail):\n%s", out)
	}

	buf.Reset()
	if _, err := inspect.Audit(ctx, f.st, inspect.AuditOptions{Output: inspect.FormatJSON, CallID: f.mailed.CallID}, &buf); err != nil {
		t.Fatal(err)
	}
	var rows []inspect.AuditJSON
	decode(t, buf.Bytes(), &rows)
	if len(rows) != len(wantEvents) {
		t.Fatalf("%d JSON rows, want %d", len(rows), len(wantEvents))
	}
	for i, r := range rows {
		if r.Event != wantEvents[i] || r.CallID != f.mailed.CallID || r.TS == 0 || r.Time == "" {
			t.Errorf("row %d = %+v", i, r)
		}
		if i == 0 && r.OffsetS != 0 {
			t.Errorf("first offset = %v, want 0", r.OffsetS)
		}
		if i > 0 && (r.OffsetS < rows[i-1].OffsetS || r.ID <= rows[i-1].ID) {
			t.Errorf("rows out of order at %d: %+v after %+v", i, r, rows[i-1])
		}
	}
}

func TestAuditAllCalls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	var buf bytes.Buffer
	all, err := inspect.Audit(ctx, f.st, inspect.AuditOptions{Output: inspect.FormatTable, Limit: 0}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	// paid: created claimed succeeded; failed: created claimed failed;
	// mailed: created claimed outcome_unknown recover claimed succeeded;
	// waiting: created.
	if len(all) != 13 {
		t.Fatalf("%d audit rows, want 13: %q", len(all), eventNames(all))
	}
	for _, id := range []string{f.paid.CallID, f.failed.CallID, f.mailed.CallID, f.waiting.CallID} {
		row(t, buf.String(), id, "created")
	}

	buf.Reset()
	last, err := inspect.Audit(ctx, f.st, inspect.AuditOptions{Output: inspect.FormatJSON, Limit: 3}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	var rows []inspect.AuditJSON
	decode(t, buf.Bytes(), &rows)
	// The newest three rows, still oldest first: mailed claimed, succeeded, waiting created.
	if len(rows) != 3 || len(last) != 3 || rows[2].CallID != f.waiting.CallID || rows[2].Event != "created" ||
		rows[1].Event != "succeeded" || rows[0].ID != all[10].ID {
		t.Errorf("last 3 rows = %+v", rows)
	}
}

func TestAuditUnknownCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var buf bytes.Buffer
	_, err := inspect.Audit(t.Context(), f.st, inspect.AuditOptions{CallID: "c_ffffffffffffffff"}, &buf)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	var buf bytes.Buffer
	rep, err := inspect.Attempts(ctx, f.st, inspect.AttemptsOptions{Output: inspect.FormatTable}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// attempt 0: waiting; 1: paid, failed; 2: mailed.
	for _, want := range [][]string{{"0", "1", "25.0%"}, {"1", "2", "50.0%"}, {"2", "1", "25.0%"}} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if equal(cells(line), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no row %q in:\n%s", want, out)
		}
	}
	// One of the three calls that ran needed two attempts: 33% > 5%.
	if rep.Ran != 3 || rep.MultiAttempt != 1 || rep.Hint == "" {
		t.Errorf("report = %+v, want ran 3, multi 1, a hint", rep)
	}
	if !strings.Contains(out, "hint:") || !strings.Contains(out, "lease") || !strings.Contains(out, "workers") {
		t.Errorf("hint missing after the table:\n%s", out)
	}
	if strings.Index(out, "hint:") < strings.Index(out, "25.0%") {
		t.Errorf("hint must come after the table:\n%s", out)
	}

	buf.Reset()
	if _, err := inspect.Attempts(ctx, f.st, inspect.AttemptsOptions{Output: inspect.FormatJSON}, &buf); err != nil {
		t.Fatal(err)
	}
	var got inspect.AttemptsReport
	decode(t, buf.Bytes(), &got)
	want := []inspect.AttemptRow{{Attempt: 0, Calls: 1, SharePct: 25}, {Attempt: 1, Calls: 2, SharePct: 50}, {Attempt: 2, Calls: 1, SharePct: 25}}
	if got.Total != 4 || len(got.Buckets) != 3 || got.Hint == "" {
		t.Fatalf("JSON = %+v", got)
	}
	for i := range want {
		if got.Buckets[i] != want[i] {
			t.Errorf("bucket %d = %+v, want %+v", i, got.Buckets[i], want[i])
		}
	}
}

func TestAttemptsNoHintWhenHealthy(t *testing.T) {
	t.Parallel()
	rep := inspect.Distribution([]store.AttemptBucket{{Attempt: 1, Calls: 99}, {Attempt: 2, Calls: 1}}, 0)
	if rep.Hint != "" || rep.MultiAttemptPct != 1 {
		t.Errorf("1%% multi-attempt: %+v, want no hint", rep)
	}
	rep = inspect.Distribution([]store.AttemptBucket{{Attempt: 1, Calls: 90}, {Attempt: 3, Calls: 10}}, 0)
	if rep.Hint == "" {
		t.Errorf("10%% multi-attempt: want a hint, got %+v", rep)
	}
	rep = inspect.Distribution(nil, 0)
	if rep.Buckets == nil || rep.Hint != "" || rep.Total != 0 {
		t.Errorf("empty: %+v", rep)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	var buf bytes.Buffer
	if _, err := inspect.Stats(ctx, f.st, inspect.StatsOptions{Output: inspect.FormatTable}, &buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range [][]string{
		{"calls", "4"}, {"effects", "2"}, {"status pending", "1"}, {"status running", "0"},
		{"status succeeded", "2"}, {"status failed", "1"},
	} {
		if c := cells(row(t, out, want[0]+" ")); !equal(c, want) {
			t.Errorf("row = %q, want %q", c, want)
		}
	}

	buf.Reset()
	if _, err := inspect.Stats(ctx, f.st, inspect.StatsOptions{Output: inspect.FormatJSON}, &buf); err != nil {
		t.Fatal(err)
	}
	var got wire.Stats
	decode(t, buf.Bytes(), &got)
	wantBy := map[wire.Status]int64{"pending": 1, "running": 0, "succeeded": 2, "failed": 1}
	if got.Calls != 4 || got.Effects != 2 || len(got.ByStatus) != 4 || got.Queue != nil {
		t.Fatalf("stats JSON = %+v", got)
	}
	for k, v := range wantBy {
		if got.ByStatus[k] != v {
			t.Errorf("by_status[%s] = %d, want %d", k, got.ByStatus[k], v)
		}
	}
}

// dupeStore wraps a real store and pretends the paid call has a second
// effect: the schema's UNIQUE(effects.call_id) makes a real duplicate
// impossible to write, which is the point, so the read path is tested with
// what a database without the constraint would return.
func dupeStore(base store.Store, callID, extraEffect string) store.Store {
	return &storefake.Store{Base: base,
		DupesFunc: func(context.Context) ([]store.Dupe, error) {
			return []store.Dupe{{CallID: callID, Effects: 2}}, nil
		},
		ListEffectsFunc: func(ctx context.Context, limit int) ([]store.Effect, error) {
			effs, err := base.ListEffects(ctx, limit)
			return append(effs, store.Effect{EffectID: extraEffect, CallID: callID, Tool: "charge"}), err
		},
	}
}

func TestDupes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	t.Run("none", func(t *testing.T) {
		var buf bytes.Buffer
		got, err := inspect.Dupes(ctx, f.st, inspect.DupesOptions{Output: inspect.FormatTable}, &buf)
		if err != nil || len(got) != 0 {
			t.Fatalf("Dupes = %v, %v; want none", got, err)
		}
		if strings.TrimSpace(buf.String()) != "no duplicate effects" {
			t.Errorf("output %q", buf.String())
		}
		buf.Reset()
		if _, err := inspect.Dupes(ctx, f.st, inspect.DupesOptions{Output: inspect.FormatJSON}, &buf); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(buf.String()) != "[]" {
			t.Errorf("JSON %q, want []", buf.String())
		}
	})

	t.Run("forced duplicate", func(t *testing.T) {
		ds := dupeStore(f.st, f.paid.CallID, "eff_forged00000000")
		var buf bytes.Buffer
		got, err := inspect.Dupes(ctx, ds, inspect.DupesOptions{Output: inspect.FormatTable}, &buf)
		if err != nil || len(got) != 1 {
			t.Fatalf("Dupes = %v, %v; want one", got, err)
		}
		c := cells(row(t, buf.String(), f.paid.CallID))
		if len(c) != 3 || c[1] != "2" || !strings.Contains(c[2], f.paidEffect) || !strings.Contains(c[2], "eff_forged00000000") {
			t.Errorf("dupe row = %q", c)
		}
		buf.Reset()
		if _, err := inspect.Dupes(ctx, ds, inspect.DupesOptions{Output: inspect.FormatJSON}, &buf); err != nil {
			t.Fatal(err)
		}
		var rows []inspect.DupeJSON
		decode(t, buf.Bytes(), &rows)
		if len(rows) != 1 || rows[0].CallID != f.paid.CallID || rows[0].Effects != 2 || len(rows[0].EffectIDs) != 2 {
			t.Errorf("dupes JSON = %+v", rows)
		}
	})
}

func TestReadOnlyStore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	// Reopen the same file read-only, as the command does, while the
	// writer is still open: the views must read the same contents.
	ro, err := sqlite.Open(ctx, f.path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("opening read-only: %v", err)
	}
	defer ro.Close()
	var buf bytes.Buffer
	s, err := inspect.Stats(ctx, ro, inspect.StatsOptions{Output: inspect.FormatJSON}, &buf)
	if err != nil || s.Calls != 4 || s.Effects != 2 {
		t.Fatalf("read-only stats = %+v, %v", s, err)
	}
	calls, err := inspect.Calls(ctx, ro, inspect.CallsOptions{Output: inspect.FormatTable}, &buf)
	if err != nil || len(calls) != 4 {
		t.Fatalf("read-only calls = %d, %v", len(calls), err)
	}
	// A write through it would be refused, so inspect cannot change anything.
	if _, _, err := ro.CreateOrGet(ctx, store.NewCall{CallID: "c_00000000000000e5", IdemKey: "k-ro", Fingerprint: "fp", Tool: "charge", ArgsJSON: json.RawMessage(`{}`)}); err == nil {
		t.Error("a write through the read-only store succeeded")
	}
}

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]inspect.Format{"": inspect.FormatTable, "table": inspect.FormatTable, "JSON": inspect.FormatJSON} {
		if got, err := inspect.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := inspect.ParseFormat("yaml"); err == nil {
		t.Error("ParseFormat(yaml) accepted")
	}
}

func eventNames(evs []store.AuditEvent) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// jsonEqual compares JSON semantically (a backend may reformat it).
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
