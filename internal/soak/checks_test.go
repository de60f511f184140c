package soak

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

const s = time.Second

// cleanInput is a small history with no violation: a charge, a sleep, an
// http-tool charge, a failing call, a kill of instance 0 from 10 s to 11 s,
// a different payload refused with 409.
func cleanInput() Input {
	keys := []KeyInfo{
		{Key: "k1", Payload: Payload{ToolCharge, map[string]any{"amount": 1}}},
		{Key: "k2", Payload: Payload{ToolSleep, map[string]any{"seconds": 0.1}}},
		{Key: "k3", Payload: Payload{HTTPTool, map[string]any{"amount": 3}}},
		{Key: "k4", Payload: Payload{ToolFail, map[string]any{}}},
		{Key: "k5", Payload: Payload{ToolCharge, map[string]any{"amount": 5}}}, // never answered, never recorded
	}
	ok := func(key, call string, at time.Duration) Attempt {
		return Attempt{Op: OpNew, Key: key, Variant: Same, Start: at, End: at + s/10, HTTP: 202, CallID: call, Status: "pending"}
	}
	attempts := []Attempt{
		ok("k1", "c1", 1*s),
		ok("k2", "c2", 2*s),
		ok("k3", "c3", 3*s),
		ok("k4", "c4", 4*s),
		{Op: OpRetry, Key: "k1", Variant: Same, Start: 5 * s, End: 5*s + s/10, HTTP: 200, CallID: "c1", Status: "succeeded", Acked: true},
		{Op: OpConflict, Key: "k1", Variant: Different, Start: 6 * s, End: 6*s + s/10, HTTP: 409, Code: "idempotency_conflict", Acked: true},
		{Op: OpNew, Key: "k5", Variant: Same, Start: 10 * s, End: 10*s + s/2, Err: "connection reset"},
	}
	events := []Event{
		{Kind: EventKill, Instance: 0, At: 10 * s, End: 10 * s, Planned: true},
		{Kind: EventExit, Instance: 0, At: 10 * s, End: 10 * s, Planned: true, Detail: "signal: killed"},
		{Kind: EventUp, Instance: 0, At: 11 * s, End: 11 * s},
	}
	obs := Observed{
		Calls: map[string]ObservedCall{
			"k1": {CallID: "c1", Tool: ToolCharge, Status: "succeeded", Attempt: 1, EffectID: "e1"},
			"k2": {CallID: "c2", Tool: ToolSleep, Status: "succeeded", Attempt: 2},
			"k3": {CallID: "c3", Tool: HTTPTool, Status: "succeeded", Attempt: 1, EffectID: "e3"},
			"k4": {CallID: "c4", Tool: ToolFail, Status: "failed", Attempt: 1},
		},
		Effects:       []ObservedEffect{{EffectID: "e1", CallID: "c1"}, {EffectID: "e3", CallID: "c3"}},
		EffectsRead:   true,
		Ledger:        []Charge{{ID: "ch_1", Key: "e3"}},
		LedgerRead:    true,
		Integrity:     "ok",
		IntegrityRead: true,
	}
	return Input{Attempts: attempts, Events: events, Keys: keys, Observed: obs, Servers: true}
}

// failed returns the names of the failed checks, sorted, and all
// violations' keys by check.
func failed(checks []Check) ([]string, map[string][]string) {
	var names []string
	keys := map[string][]string{}
	for _, c := range checks {
		if c.Failed() {
			names = append(names, c.Name)
			for _, v := range c.Violations {
				keys[c.Name] = append(keys[c.Name], v.Key)
			}
		}
	}
	sort.Strings(names)
	return names, keys
}

func TestJudgeCleanHistoryPasses(t *testing.T) {
	checks := Judge(cleanInput())
	if names, keys := failed(checks); len(names) > 0 {
		t.Fatalf("a clean history failed %v: %v", names, keys)
	}
	for _, c := range checks {
		if c.Skipped != "" || c.Checked == 0 {
			t.Errorf("%s: skipped %q, checked %d; every check applies to the clean history", c.Name, c.Skipped, c.Checked)
		}
	}
}

// TestJudgeReportsEachViolation feeds histories that break one invariant
// each and asserts exactly the checks that guard it fail, naming the key.
func TestJudgeReportsEachViolation(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *Input)
		want   []string // failed checks, sorted
		key    string   // a key the first wanted check must name
	}{
		{"acknowledged key lost", func(in *Input) {
			delete(in.Observed.Calls, "k2")
		}, []string{"acknowledged_not_lost"}, "k2"},
		{"key names another call than answered", func(in *Input) {
			in.Observed.Calls["k2"] = ObservedCall{CallID: "c9", Tool: ToolSleep, Status: "succeeded"}
		}, []string{"acknowledged_not_lost"}, "k2"},
		{"two answers name two calls", func(in *Input) {
			in.Attempts[4].CallID = "c9"
		}, []string{"one_call_per_key"}, "k1"},
		{"two effects for one call", func(in *Input) {
			in.Observed.Effects = append(in.Observed.Effects, ObservedEffect{EffectID: "e1b", CallID: "c1"})
		}, []string{"at_most_one_effect", "effect_iff_succeeded"}, "k1"},
		{"dupes reported by the store", func(in *Input) {
			in.Observed.Dupes = []string{"c2"}
		}, []string{"at_most_one_effect"}, "k2"},
		{"succeeded charge without an effect", func(in *Input) {
			in.Observed.Effects = in.Observed.Effects[1:]
		}, []string{"effect_iff_succeeded"}, "k1"},
		{"effect row under another effect id", func(in *Input) {
			in.Observed.Effects[0].EffectID = "e-other"
		}, []string{"effect_iff_succeeded"}, "k1"},
		{"effect without a succeeded call", func(in *Input) {
			in.Observed.Effects = append(in.Observed.Effects, ObservedEffect{EffectID: "e4", CallID: "c4"})
		}, []string{"effect_iff_succeeded"}, "k4"},
		{"effect for a tool without effects", func(in *Input) {
			in.Observed.Effects = append(in.Observed.Effects, ObservedEffect{EffectID: "e2", CallID: "c2"})
		}, []string{"effect_iff_succeeded"}, "k2"},
		{"call not final", func(in *Input) {
			in.Observed.Calls["k4"] = ObservedCall{CallID: "c4", Tool: ToolFail, Status: "running", Attempt: 2}
		}, []string{"final_after_drain"}, "k4"},
		{"same payload answered 409", func(in *Input) {
			in.Attempts[4].HTTP, in.Attempts[4].Code, in.Attempts[4].CallID = 409, "idempotency_conflict", ""
		}, []string{"same_payload_never_409"}, "k1"},
		{"same payload answered 400", func(in *Input) {
			in.Attempts[4].HTTP, in.Attempts[4].Code, in.Attempts[4].CallID = 400, "bad_request", ""
		}, []string{"same_payload_never_409"}, "k1"},
		{"different payload accepted", func(in *Input) {
			in.Attempts[5].HTTP, in.Attempts[5].Code, in.Attempts[5].CallID = 200, "", "c1"
		}, []string{"different_payload_409"}, "k1"},
		{"500 while up", func(in *Input) {
			in.Attempts = append(in.Attempts, Attempt{Op: OpRetry, Key: "k2", Variant: Same, Start: 7 * s, End: 7*s + s/10, HTTP: 500, Code: "internal"})
		}, []string{"no_5xx_while_up"}, "k2"},
		{"500 just after the restart", func(in *Input) {
			in.Attempts = append(in.Attempts, Attempt{Op: OpRetry, Key: "k2", Variant: Same, Start: 11*s + 1, End: 11*s + s/10, HTTP: 500, Code: "internal"})
		}, []string{"no_5xx_while_up"}, "k2"},
		{"503 unavailable without a database fault", func(in *Input) {
			in.Attempts = append(in.Attempts, Attempt{Op: OpRetry, Key: "k2", Variant: Same, Start: 7 * s, End: 7*s + s/10, HTTP: 503, Code: "unavailable"})
		}, []string{"no_5xx_while_up"}, "k2"},
		{"503 unavailable after the database fault's grace", func(in *Input) {
			in.Events = append(in.Events, Event{Kind: EventPGTerminate, Instance: -1, At: 1 * s, End: 1 * s})
			in.Attempts = append(in.Attempts, Attempt{Op: OpRetry, Key: "k2", Variant: Same, Start: 1*s + DBGrace + 1, End: 1*s + DBGrace + s, HTTP: 503, Code: "unavailable"})
		}, []string{"no_5xx_while_up"}, "k2"},
		{"500 from another instance while instance 0 was down", func(in *Input) {
			in.Attempts = append(in.Attempts, Attempt{Op: OpRetry, Key: "k2", Variant: Same, Instance: 1, Start: 10*s + s/2, End: 10*s + s/2, HTTP: 500, Code: "internal"})
		}, []string{"no_5xx_while_up"}, "k2"},
		{"downstream charged twice for one effect", func(in *Input) {
			in.Observed.Ledger = append(in.Observed.Ledger, Charge{ID: "ch_2", Key: "e3"})
		}, []string{"ledger_one_charge_per_effect"}, "k3"},
		{"downstream never charged a succeeded http call", func(in *Input) {
			in.Observed.Ledger = nil
		}, []string{"ledger_one_charge_per_effect"}, "k3"},
		{"downstream charge without a succeeded call", func(in *Input) {
			in.Observed.Ledger = append(in.Observed.Ledger, Charge{ID: "ch_2", Key: "eff_unknown"})
		}, []string{"ledger_one_charge_per_effect"}, "eff_unknown"},
		{"integrity_check not ok", func(in *Input) {
			in.Observed.Integrity = "*** in database main *** Page 4 is never used"
		}, []string{"sqlite_integrity"}, "database"},
		{"instance died on its own", func(in *Input) {
			in.Events = append(in.Events, Event{Kind: EventExit, Instance: 1, At: 20 * s, End: 20 * s, Code: -1, Detail: "signal: segmentation fault"})
		}, []string{"no_unplanned_exit"}, "instance 1"},
		{"running instance exited 4 while the database was away", func(in *Input) {
			in.Events = append(in.Events,
				Event{Kind: EventPGTerminate, Instance: -1, At: 20 * s, End: 20 * s},
				Event{Kind: EventExit, Instance: 1, At: 21 * s, End: 21 * s, Code: 4, Detail: "exit status 4"})
		}, []string{"no_unplanned_exit"}, "instance 1"},
		{"starting instance exited 4 with the database there", func(in *Input) {
			in.Events = append(in.Events, Event{Kind: EventExit, Instance: 1, At: 21 * s, End: 21 * s, Code: 4, Starting: true})
		}, []string{"no_unplanned_exit"}, "instance 1"},
		{"starting instance exited 1 while the database was away", func(in *Input) {
			in.Events = append(in.Events,
				Event{Kind: EventPGTerminate, Instance: -1, At: 20 * s, End: 20 * s},
				Event{Kind: EventExit, Instance: 1, At: 21 * s, End: 21 * s, Code: 1, Starting: true})
		}, []string{"no_unplanned_exit"}, "instance 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := cleanInput()
			tc.mutate(&in)
			names, keys := failed(Judge(in))
			if !slices.Equal(names, tc.want) {
				t.Fatalf("failed checks %v, want %v (violations %v)", names, tc.want, keys)
			}
			if !slices.Contains(keys[tc.want[0]], tc.key) {
				t.Fatalf("%s names %v, want %q among them", tc.want[0], keys[tc.want[0]], tc.key)
			}
		})
	}
}

// TestJudgeExcusesWhatTheRulesAllow: answers the rules allow are not
// violations (each would be one if the rule were dropped).
func TestJudgeExcusesWhatTheRulesAllow(t *testing.T) {
	cases := []struct {
		name string
		add  Attempt
		ev   []Event
	}{
		{"500 from the instance while it was down", Attempt{Key: "k2", Variant: Same, Start: 10*s + s/2, End: 10*s + s/2, HTTP: 500, Code: "internal"}, nil},
		{"503 overloaded while up", Attempt{Key: "k2", Variant: Same, Start: 7 * s, End: 7 * s, HTTP: 503, Code: "overloaded"}, nil},
		{"503 unavailable while the database was away", Attempt{Key: "k2", Variant: Same, Start: 7 * s, End: 7 * s, HTTP: 503, Code: "unavailable"},
			[]Event{{Kind: EventPGRestart, Instance: -1, At: 6 * s, End: 6*s + s/2}}},
		{"503 unavailable within the grace after a terminate", Attempt{Key: "k2", Variant: Same, Start: 1*s + DBGrace - 1, End: 1*s + DBGrace, HTTP: 503, Code: "unavailable"},
			[]Event{{Kind: EventPGTerminate, Instance: -1, At: 1 * s, End: 1 * s}}},
		{"different payload answered 503 overloaded", Attempt{Key: "k1", Variant: Different, Start: 7 * s, End: 7 * s, HTTP: 503, Code: "overloaded", Acked: true}, nil},
		{"starting instance exited 4 while the database was away", Attempt{Key: "k2", Variant: Same, Start: 7 * s, End: 7 * s, HTTP: 200, CallID: "c2"},
			[]Event{{Kind: EventPGTerminate, Instance: -1, At: 20 * s, End: 20 * s},
				{Kind: EventExit, Instance: 1, At: 20*s + DBGrace - 1, End: 20*s + DBGrace - 1, Code: 4, Starting: true}}},
		{"different payload without an answer", Attempt{Key: "k1", Variant: Different, Start: 7 * s, End: 7 * s, Err: "timed out", Acked: true}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := cleanInput()
			in.Attempts = append(in.Attempts, tc.add)
			in.Events = append(in.Events, tc.ev...)
			sort.SliceStable(in.Events, func(i, j int) bool { return in.Events[i].At < in.Events[j].At })
			if names, keys := failed(Judge(in)); len(names) > 0 {
				t.Fatalf("failed %v: %v", names, keys)
			}
		})
	}
}

// TestJudgeOverTheAPI: without the effects table, the effect check uses
// the calls' effect_id, and the checks that need the database say why they
// are skipped.
func TestJudgeOverTheAPI(t *testing.T) {
	in := cleanInput()
	in.Observed.Effects, in.Observed.EffectsRead = nil, false
	in.Observed.Ledger, in.Observed.LedgerRead = nil, false
	in.Observed.Integrity, in.Observed.IntegrityRead = "", false
	in.Events, in.Servers = nil, false
	checks := Judge(in)
	if names, keys := failed(checks); len(names) > 0 {
		t.Fatalf("failed %v: %v", names, keys)
	}
	var skipped []string
	for _, c := range checks {
		if c.Skipped != "" {
			skipped = append(skipped, c.Name)
		}
	}
	want := []string{"at_most_one_effect", "ledger_one_charge_per_effect", "sqlite_integrity", "no_unplanned_exit"}
	if !slices.Equal(skipped, want) {
		t.Fatalf("skipped %v, want %v", skipped, want)
	}
	in.Observed.Calls["k1"] = ObservedCall{CallID: "c1", Tool: ToolCharge, Status: "succeeded"}
	in.Observed.Calls["k4"] = ObservedCall{CallID: "c4", Tool: ToolFail, Status: "failed", EffectID: "e4"}
	names, keys := failed(Judge(in))
	if !slices.Equal(names, []string{"effect_iff_succeeded"}) || !slices.Equal(keys["effect_iff_succeeded"], []string{"k1", "k4"}) {
		t.Fatalf("failed %v: %v", names, keys)
	}
}

func TestDownWindows(t *testing.T) {
	ws := downWindows([]Event{
		{Kind: EventKill, Instance: 0, At: 1 * s},
		{Kind: EventExit, Instance: 0, At: 1*s + 5},
		{Kind: EventUp, Instance: 0, At: 2 * s},
		{Kind: EventExit, Instance: 1, At: 3 * s},
	})
	if len(ws[0]) != 1 || ws[0][0] != (window{1 * s, 2 * s}) {
		t.Fatalf("instance 0: %v", ws[0])
	}
	if len(ws[1]) != 1 || ws[1][0].from != 3*s || ws[1][0].to < 1000*time.Hour {
		t.Fatalf("instance 1 (never back): %v", ws[1])
	}
	if !strings.Contains(offset(1500*time.Millisecond), "1.500s") {
		t.Fatal(offset(1500 * time.Millisecond))
	}
}
