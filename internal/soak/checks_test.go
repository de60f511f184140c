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
// a different payload refused with 409; instance 1 frozen from 12 s to 16 s
// while it ran the sleep's attempt 1, which another owner took over and
// whose late completion was fenced; instance 0 partitioned from 30 s to
// 40 s, answering its probe 503 after 5 s, and acknowledging a new key
// 1.5 s after the heal.
func cleanInput() Input {
	keys := []KeyInfo{
		{Key: "k1", Payload: Payload{ToolCharge, map[string]any{"amount": 1}}},
		{Key: "k2", Payload: Payload{ToolSleep, map[string]any{"seconds": 0.1}}},
		{Key: "k3", Payload: Payload{HTTPTool, map[string]any{"amount": 3, ArgRef: "k3"}}},
		{Key: "k4", Payload: Payload{ToolFail, map[string]any{}}},
		{Key: "k5", Payload: Payload{ToolCharge, map[string]any{"amount": 5}}}, // never answered, never recorded
		{Key: "k6", Payload: Payload{LookupTool, map[string]any{"amount": 6, ArgRef: "k6"}}},
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
		ok("k6", "c6", 7*s), // last: the cases mutate the others by index
	}
	events := []Event{
		{Kind: EventKill, Instance: 0, At: 10 * s, End: 10 * s, Planned: true},
		{Kind: EventExit, Instance: 0, At: 10 * s, End: 10 * s, Planned: true, Detail: "signal: killed"},
		{Kind: EventUp, Instance: 0, At: 11 * s, End: 11 * s},
		{Kind: EventPause, Instance: 1, At: 12 * s, End: 16 * s, Planned: true},
		{Kind: EventPartition, Instance: 0, At: 30 * s, End: 40 * s, Planned: true},
	}
	frozen := "host:100:5/1"
	obs := Observed{
		Calls: map[string]ObservedCall{
			"k1": {CallID: "c1", Tool: ToolCharge, Status: "succeeded", Attempt: 1, EffectID: "e1"},
			"k2": {CallID: "c2", Tool: ToolSleep, Status: "succeeded", Attempt: 2},
			"k3": {CallID: "c3", Tool: HTTPTool, Status: "succeeded", Attempt: 1, EffectID: "e3"},
			"k4": {CallID: "c4", Tool: ToolFail, Status: "failed", Attempt: 1},
			// Attempt 1's answer was lost; the lookup found its charge.
			"k6": {CallID: "c6", Tool: LookupTool, Status: "succeeded", Attempt: 1, EffectID: "e6"},
		},
		Effects:     []ObservedEffect{{EffectID: "e1", CallID: "c1"}, {EffectID: "e3", CallID: "c3"}, {EffectID: "e6", CallID: "c6"}},
		EffectsRead: true,
		Ledger:      []Charge{{ID: "ch_1", Key: "e3", Ref: "k3"}},
		LedgerRead:  true,
		// The lookup tool's downstream: one record for k6, its answer lost.
		LookupLedger:     []Charge{{ID: "ch_1", Key: "e6", Ref: "k6"}},
		LookupLedgerRead: true,
		Integrity:        "ok",
		IntegrityRead:    true,
		// The crash before the commit made the tool run twice: two
		// requests, one key, one charge.
		Requests:     []DownstreamRequest{{Key: "e3", Ref: "k3"}, {Key: "e3", Ref: "k3"}},
		RequestsRead: true,
		Audit: map[string][]AuditRow{"c2": {
			{"created", "sleep"}, {"claimed", frozen},
			{"recover", "lease expired (owner " + frozen + ", attempt 1)"}, {"claimed", "host:200:7/1"},
			{"succeeded", "no effect"},
			{"fenced", "owner " + frozen + " attempt 1 refused: call is succeeded at attempt 2"},
		}},
	}
	pauses := []Pause{{Instance: 1, At: 12 * s, End: 16 * s, PID: 100, Calls: []HeldCall{{CallID: "c2", Owner: frozen, Attempt: 1}}}}
	probes := []Probe{
		{Instance: 0, Key: "p1", During: true, Start: 31 * s, End: 36 * s, HTTP: 503, Code: "unavailable"},
		{Instance: 0, Key: "r1", Start: 40 * s, End: 40*s + s/2, Healed: 40 * s, HTTP: 503, Code: "unavailable"},
		{Instance: 0, Key: "r1", Start: 41 * s, End: 41*s + s/2, Healed: 40 * s, HTTP: 202},
	}
	return Input{Attempts: attempts, Events: events, Keys: keys, Observed: obs, Servers: true, Pauses: pauses, Probes: probes}
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
		{"lookup tool's downstream holds two records for one call", func(in *Input) {
			in.Observed.LookupLedger = append(in.Observed.LookupLedger, Charge{ID: "ch_2", Key: "e6", Ref: "k6"})
		}, []string{"lookup_one_record_per_call"}, "k6"},
		{"lookup tool's downstream holds a record that is not the soak's", func(in *Input) {
			in.Observed.LookupLedger = append(in.Observed.LookupLedger, Charge{ID: "ch_2", Key: "x"})
		}, []string{"lookup_one_record_per_call"}, "downstream"},
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
			in.Observed.Ledger = append(in.Observed.Ledger, Charge{ID: "ch_2", Key: "e3", Ref: "k3"})
		}, []string{"downstream_one_effect", "ledger_one_charge_per_effect"}, "k3"},
		{"downstream applied two effects for one call under two keys", func(in *Input) {
			in.Observed.Ledger = append(in.Observed.Ledger, Charge{ID: "ch_2", Key: "e3-rerun", Ref: "k3"})
		}, []string{"downstream_one_effect", "ledger_one_charge_per_effect"}, "k3"},
		{"two attempts of one call presented two keys", func(in *Input) {
			in.Observed.Requests[1].Key = "e3-rerun"
		}, []string{"downstream_same_key"}, "k3"},
		{"every attempt presented a key that is not the effect id", func(in *Input) {
			in.Observed.Requests[0].Key, in.Observed.Requests[1].Key = "k3", "k3"
		}, []string{"downstream_same_key"}, "k3"},
		{"a downstream request that is not the soak's", func(in *Input) {
			in.Observed.Requests = append(in.Observed.Requests, DownstreamRequest{Key: "x"})
		}, []string{"downstream_same_key"}, "downstream"},
		{"paused worker's late completion not fenced", func(in *Input) {
			in.Observed.Audit["c2"] = in.Observed.Audit["c2"][:5]
		}, []string{"paused_completion_fenced"}, "c2"},
		{"paused worker's call claimed directly by another owner, late completion not fenced", func(in *Input) {
			a := in.Observed.Audit["c2"]
			in.Observed.Audit["c2"] = []AuditRow{a[0], a[1], // no recover row, no fenced row
				{"outcome_unknown", "abandoned: attempt 1 in flight, lease expired (owner " + a[1].Detail + ", attempt 1)"},
				a[3], a[4]}
		}, []string{"paused_completion_fenced"}, "c2"},
		{"paused worker fenced under another attempt only", func(in *Input) {
			in.Observed.Audit["c2"][5].Detail = "owner host:100:5/1 attempt 2 refused: call is succeeded at attempt 3"
		}, []string{"paused_completion_fenced"}, "c2"},
		{"partitioned instance answered after the bound", func(in *Input) {
			in.Probes[0].End = in.Probes[0].Start + PartitionBound + 1
		}, []string{"partition_answered_in_bound"}, "p1"},
		{"partitioned instance never answered", func(in *Input) {
			in.Probes[0].HTTP, in.Probes[0].Code, in.Probes[0].Err = 0, "", "timeout"
		}, []string{"partition_answered_in_bound"}, "p1"},
		{"partitioned instance answered 500", func(in *Input) {
			in.Probes[0].HTTP, in.Probes[0].Code = 500, "internal"
		}, []string{"partition_answered_in_bound"}, "p1"},
		{"service did not resume after the heal", func(in *Input) {
			in.Probes[2].HTTP, in.Probes[2].Code = 503, "unavailable"
		}, []string{"partition_service_resumes"}, "r1"},
		{"service resumed too late", func(in *Input) {
			in.Probes[2].End = in.Probes[2].Healed + ResumeBound + 1
		}, []string{"partition_service_resumes"}, "r1"},
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
			in.Events = append(in.Events, Event{Kind: EventExit, Instance: 1, At: 24 * s, End: 24 * s, Code: 4, Starting: true})
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
		{"500 from an instance while it was frozen", Attempt{Key: "k2", Variant: Same, Instance: 1, Start: 13 * s, End: 16 * s, HTTP: 500, Code: "internal"}, nil},
		{"503 unavailable from another instance while one was frozen (its row locks)", Attempt{Key: "k2", Variant: Same, Instance: 0, Start: 14 * s, End: 14 * s, HTTP: 503, Code: "unavailable"}, nil},
		{"503 unavailable while an instance was partitioned", Attempt{Key: "k2", Variant: Same, Instance: 0, Start: 33 * s, End: 33 * s, HTTP: 503, Code: "unavailable"}, nil},
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
	in.Observed.Requests, in.Observed.RequestsRead, in.Observed.Audit = nil, false, nil
	in.Events, in.Servers, in.Pauses, in.Probes = nil, false, nil, nil
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
	want := []string{"at_most_one_effect", "ledger_one_charge_per_effect", "sqlite_integrity", "no_unplanned_exit",
		"downstream_same_key", "downstream_one_effect", "paused_completion_fenced", "partition_answered_in_bound", "partition_service_resumes"}
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

// TestJudgeExcusesAFrozenWorkerKilledBeforeItsCommit: a frozen worker
// killed right after its thaw never tried to commit, so no fenced row is
// owed; killed much later, it is.
func TestJudgeExcusesAFrozenWorkerKilledBeforeItsCommit(t *testing.T) {
	in := cleanInput()
	in.Observed.Audit["c2"] = in.Observed.Audit["c2"][:5]
	in.Events = append(in.Events, Event{Kind: EventKill, Instance: 1, At: 16*s + s/2, End: 16*s + s/2, Planned: true})
	if names, keys := failed(Judge(in)); len(names) > 0 {
		t.Fatalf("failed %v: %v", names, keys)
	}
	in.Events[len(in.Events)-1].At = 16*s + PauseExitGrace + s
	if names, _ := failed(Judge(in)); !slices.Equal(names, []string{"paused_completion_fenced"}) {
		t.Fatalf("killed long after the thaw: failed %v, want paused_completion_fenced", names)
	}
}

// TestJudgeExcusesAFrozenWorkerCutOffBeforeItsCommit: a frozen worker
// whose instance is partitioned from the database right after its thaw
// cannot reach the database to be refused, so no fenced row is owed;
// partitioned much later, it is.
func TestJudgeExcusesAFrozenWorkerCutOffBeforeItsCommit(t *testing.T) {
	in := cleanInput()
	in.Observed.Audit["c2"] = in.Observed.Audit["c2"][:5]
	in.Events = append(in.Events, Event{Kind: EventPartition, Instance: 1, At: 16*s + s/2, End: 30 * s, Planned: true})
	if names, keys := failed(Judge(in)); len(names) > 0 {
		t.Fatalf("failed %v: %v", names, keys)
	}
	in.Events[len(in.Events)-1].At = 16*s + PauseExitGrace + s
	if names, _ := failed(Judge(in)); !slices.Equal(names, []string{"paused_completion_fenced"}) {
		t.Fatalf("partitioned long after the thaw: failed %v, want paused_completion_fenced", names)
	}
}

// TestJudgePausedCallNotTakenOverIsNotJudged: a frozen call nobody took
// over (its worker committed first on waking) owes no fenced row.
func TestJudgePausedCallNotTakenOverIsNotJudged(t *testing.T) {
	in := cleanInput()
	in.Observed.Audit["c2"] = []AuditRow{{"created", "sleep"}, {"claimed", "host:100:5/1"}, {"succeeded", "no effect"}}
	checks := Judge(in)
	if names, keys := failed(checks); len(names) > 0 {
		t.Fatalf("failed %v: %v", names, keys)
	}
	for _, c := range checks {
		if c.Name == "paused_completion_fenced" && c.Checked != 0 {
			t.Fatalf("checked %d, want 0: the call was not taken over", c.Checked)
		}
	}
}

func TestOwnerPID(t *testing.T) {
	for owner, want := range map[string]int{"vm~24cd:12626:74549/1": 12626, "h:1:2": 1, "h:x:2/1": -1, "nonsense": -1, "a:b:7:9/3": 7} {
		if got := ownerPID(owner); got != want {
			t.Errorf("ownerPID(%q) = %d, want %d", owner, got, want)
		}
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

// TestJudgeExcusesAFrozenLookup: a worker of the lookup tool frozen in the
// lookup that starts its attempt (the previous attempt's outcome unknown)
// records nothing when it wakes past its lease, so it owes no fenced row;
// the same call of another tool, or with its lookup's verdict recorded
// (a completion follows it), still does.
func TestJudgeExcusesAFrozenLookup(t *testing.T) {
	frozen := "host:100:5/1"
	lookupCall := func(tool string, rows ...AuditRow) Input {
		in := cleanInput()
		in.Observed.Calls["k2"] = ObservedCall{CallID: "c2", Tool: tool, Status: "failed", Attempt: 3}
		in.Observed.Audit["c2"] = append([]AuditRow{
			{"created", tool}, {"claimed", "host:300:1/1"},
			{"outcome_unknown", "reset_after_send: the connection closed"},
			{"claimed", frozen},
		}, rows...)
		in.Pauses[0].Calls = []HeldCall{{CallID: "c2", Owner: frozen, Attempt: 2}}
		return in
	}
	takeover := []AuditRow{
		{"outcome_unknown", "abandoned: lease expired (owner " + frozen + ", attempt 2)"},
		{"claimed", "host:200:7/1"}, {"lookup_not_found", "attempt 3: answered 404"}, {"failed", "tool_failed: declined"},
	}
	if names, keys := failed(Judge(lookupCall(LookupTool, takeover...))); len(names) > 0 {
		t.Fatalf("a lookup frozen before its verdict: failed %v: %v", names, keys)
	}
	if names, _ := failed(Judge(lookupCall(ToolSleep, takeover...))); !slices.Equal(names, []string{"paused_completion_fenced"}) {
		t.Fatalf("another tool: failed %v, want paused_completion_fenced", names)
	}
	// The unknown outcome came after the takeover (a later attempt's): the
	// frozen attempt began without a lookup, so its completion is owed.
	in := lookupCall(LookupTool, takeover...)
	a := in.Observed.Audit["c2"]
	in.Observed.Audit["c2"] = append([]AuditRow{a[0], a[1], a[3], a[4], a[2]}, a[5:]...)
	if names, _ := failed(Judge(in)); !slices.Equal(names, []string{"paused_completion_fenced"}) {
		t.Fatalf("unknown outcome after the takeover: failed %v, want paused_completion_fenced", names)
	}
	answered := append([]AuditRow{{"lookup_not_found", "attempt 2: answered 404"}}, takeover...)
	if names, _ := failed(Judge(lookupCall(LookupTool, answered...))); !slices.Equal(names, []string{"paused_completion_fenced"}) {
		t.Fatalf("the lookup answered for the frozen attempt: failed %v, want paused_completion_fenced", names)
	}
}
