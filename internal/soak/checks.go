package soak

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// DBGrace is how long after a database fault ends (the terminate query
// returned, the restart command returned and the database answers) a 503
// unavailable is still allowed: a server finds a dead pooled connection only
// when it next uses it.
const DBGrace = 5 * time.Second

// ObservedCall is a call as read back after the drain.
type ObservedCall struct {
	CallID   string
	Tool     string
	Status   wire.Status
	Attempt  int64
	EffectID string // "" when none
}

// ObservedEffect is one effect row.
type ObservedEffect struct {
	EffectID string
	CallID   string
}

// Charge is one entry of the downstream's ledger.
type Charge struct {
	ID  string
	Key string // its Idempotency-Key
	Ref string // the soak key in its body (ArgRef), "" without one
}

// DownstreamRequest is one request the downstream received, charged or
// replayed.
type DownstreamRequest struct {
	Key string // its Idempotency-Key
	Ref string // the soak key in its body (ArgRef), "" without one
}

// AuditRow is one audit row of a call, as read back.
type AuditRow struct {
	Event  string
	Detail string
}

// PartitionBound is how long an instance cut off from its database may
// take to answer a request: the lock timeout and the busy timeout after
// which a write is answered 503 unavailable (5 s, docs/operations.md,
// "Limits and defaults"), plus the 5 s of slack the soak allows a loaded
// machine.
const PartitionBound = 10 * time.Second

// ResumeBound is how long after a partition heals the instance must
// acknowledge a new key again.
const ResumeBound = 30 * time.Second

// PauseExitGrace: a frozen worker's completion is excused from being fenced
// when its instance exited (killed, crashed) or was cut off from the
// database (a partition) within this long after it was thawed: its commit
// never reached the database, so nothing could refuse it.
const PauseExitGrace = 10 * time.Second

// Observed is the state read back after the drain. A list that could not be
// read in this mode is nil with its Read flag false, and the checks that
// need it are skipped (and say so).
type Observed struct {
	// Calls holds the call each key names; a key that is absent was not
	// found.
	Calls map[string]ObservedCall
	// Effects are the database's effect rows (database mode only).
	Effects     []ObservedEffect
	EffectsRead bool
	// Dupes are the call ids with more than one effect, whole database.
	Dupes []string
	// Ledger is the soak's downstream's ledger (when it ran one).
	Ledger     []Charge
	LedgerRead bool
	// LookupLedger is the ledger of LookupTool's downstream, which ignores
	// keys and loses answers (when the soak ran one).
	LookupLedger     []Charge
	LookupLedgerRead bool
	// Integrity is SQLite's PRAGMA integrity_check answer (SQLite only).
	Integrity     string
	IntegrityRead bool
	// Requests are every request the soak's downstream received.
	Requests     []DownstreamRequest
	RequestsRead bool
	// Audit holds the audit rows of the calls a pause froze, by call id
	// (database mode only).
	Audit map[string][]AuditRow
	// Gates are the rows of the guarded tools (rate limits, breakers) as
	// the run left them (database mode only): a figure, not a check.
	Gates []store.GateState
}

// Violation is one broken invariant, on one key (or instance, or row).
type Violation struct {
	Key    string
	Detail string
}

// Check is the verdict of one invariant.
type Check struct {
	Name string
	// What is the invariant, in words.
	What string
	// Skipped, if set, is why the check could not be made in this mode.
	Skipped string
	// Checked counts the items the check looked at.
	Checked    int
	Violations []Violation
}

// Failed reports a violation.
func (c Check) Failed() bool { return len(c.Violations) > 0 }

// Input is what the checker judges.
type Input struct {
	Attempts []Attempt
	Events   []Event
	Keys     []KeyInfo
	Observed Observed
	// Servers: the soak ran the servers, so every kill, exit and restart
	// is in Events (false for --base).
	Servers bool
	// Pauses and Probes are the pause faults and the partition probes.
	Pauses []Pause
	Probes []Probe
}

// Judge checks every invariant of docs/reliability.md against in.
func Judge(in Input) []Check {
	return []Check{
		checkAcked(in),
		checkAnswersAgree(in),
		checkAtMostOneEffect(in),
		checkEffects(in),
		checkFinal(in),
		checkSamePayload(in),
		checkDifferentPayload(in),
		check5xx(in),
		checkLedger(in),
		checkIntegrity(in),
		checkExits(in),
		checkSameKey(in),
		checkOneApplied(in),
		checkLookupOneRecord(in),
		checkPausedFenced(in),
		checkPartitionAnswered(in),
		checkPartitionResumes(in),
	}
}

// ackedCalls maps each key with a 2xx answer to the call ids it was
// answered with, in order.
func ackedCalls(attempts []Attempt) map[string][]string {
	m := map[string][]string{}
	for _, a := range attempts {
		if a.OK() {
			m[a.Key] = append(m[a.Key], a.CallID)
		}
	}
	return m
}

func checkAcked(in Input) Check {
	c := Check{Name: "acknowledged_not_lost", What: "every key answered 2xx names a call after the drain, the call it was answered with"}
	acked := ackedCalls(in.Attempts)
	for _, k := range in.Keys {
		ids, ok := acked[k.Key]
		if !ok {
			continue
		}
		c.Checked++
		got, found := in.Observed.Calls[k.Key]
		switch {
		case !found:
			c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("answered %s with call %s, not found after the drain", k.Payload.Tool, ids[0])})
		case got.CallID != ids[0]:
			c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("answered with call %s, the key now names call %s", ids[0], got.CallID)})
		}
	}
	return c
}

func checkAnswersAgree(in Input) Check {
	c := Check{Name: "one_call_per_key", What: "every 2xx answer for a key names the same call"}
	acked := ackedCalls(in.Attempts)
	for _, k := range in.Keys {
		ids, ok := acked[k.Key]
		if !ok {
			continue
		}
		c.Checked++
		for _, id := range ids[1:] {
			if id != ids[0] {
				c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("answered with call %s, then with call %s", ids[0], id)})
				break
			}
		}
	}
	return c
}

func checkAtMostOneEffect(in Input) Check {
	c := Check{Name: "at_most_one_effect", What: "no call has more than one effect row"}
	if !in.Observed.EffectsRead {
		c.Skipped = "the effects table is not readable over the API (by-key lookups show at most one effect_id per call)"
		return c
	}
	n := map[string]int{}
	for _, e := range in.Observed.Effects {
		n[e.CallID]++
	}
	c.Checked = len(n)
	seen := map[string]bool{}
	for _, e := range in.Observed.Effects {
		if n[e.CallID] > 1 && !seen[e.CallID] {
			seen[e.CallID] = true
			c.Violations = append(c.Violations, Violation{keyOf(in, e.CallID), fmt.Sprintf("call %s has %d effects", e.CallID, n[e.CallID])})
		}
	}
	for _, id := range in.Observed.Dupes {
		if !seen[id] {
			seen[id] = true
			c.Violations = append(c.Violations, Violation{keyOf(in, id), fmt.Sprintf("call %s has more than one effect (dupes)", id)})
		}
	}
	return c
}

// keyOf names the key of a call id for a violation, or the call id.
func keyOf(in Input, callID string) string {
	for k, c := range in.Observed.Calls {
		if c.CallID == callID {
			return k
		}
	}
	return callID
}

func checkEffects(in Input) Check {
	c := Check{Name: "effect_iff_succeeded", What: "a succeeded call of an effect tool has exactly one effect, and no call has an effect unless it succeeded with an effect tool"}
	byCall := map[string][]ObservedEffect{}
	for _, e := range in.Observed.Effects {
		byCall[e.CallID] = append(byCall[e.CallID], e)
	}
	for _, k := range in.Keys {
		got, found := in.Observed.Calls[k.Key]
		if !found {
			continue
		}
		c.Checked++
		want := EffectTool(got.Tool) && got.Status == wire.StatusSucceeded
		if in.Observed.EffectsRead {
			effs := byCall[got.CallID]
			switch {
			case want && len(effs) != 1:
				c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("%s call %s succeeded with %d effect rows, want 1", got.Tool, got.CallID, len(effs))})
			case want && effs[0].EffectID != got.EffectID:
				c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("call %s names effect %q, its effect row is %s", got.CallID, got.EffectID, effs[0].EffectID)})
			case !want && len(effs) > 0:
				c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("%s call %s is %s, yet has %d effect row(s)", got.Tool, got.CallID, got.Status, len(effs))})
			}
			continue
		}
		// Over the API: the call's effect_id stands for its effect row.
		switch {
		case want && got.EffectID == "":
			c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("%s call %s succeeded without an effect_id", got.Tool, got.CallID)})
		case !want && got.EffectID != "":
			c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("%s call %s is %s, yet names effect %s", got.Tool, got.CallID, got.Status, got.EffectID)})
		}
	}
	return c
}

func checkFinal(in Input) Check {
	c := Check{Name: "final_after_drain", What: "every call the soak's keys name is succeeded or failed after the drain"}
	for _, k := range in.Keys {
		got, found := in.Observed.Calls[k.Key]
		if !found {
			continue
		}
		c.Checked++
		if !got.Status.Final() {
			c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("call %s is still %s (attempt %d)", got.CallID, got.Status, got.Attempt)})
		}
	}
	return c
}

// backPressure reports answers that mean "later" without a fault: the
// server's own 408, 429 and 503 overloaded (docs/api.md, "Limits").
func backPressure(a Attempt) bool {
	return a.HTTP == http.StatusRequestTimeout || a.HTTP == http.StatusTooManyRequests ||
		(a.HTTP == http.StatusServiceUnavailable && a.Code == wire.CodeOverloaded)
}

func checkSamePayload(in Input) Check {
	c := Check{Name: "same_payload_never_409", What: "a request with the key's own payload is never refused: no 409, no other 4xx"}
	for _, a := range in.Attempts {
		if a.Variant != Same || !a.Answered() {
			continue
		}
		c.Checked++
		if a.HTTP/100 == 4 && !backPressure(a) {
			c.Violations = append(c.Violations, Violation{a.Key, fmt.Sprintf("%s request at %s answered %d %s", a.Op, offset(a.Start), a.HTTP, a.Code)})
		}
	}
	return c
}

func checkDifferentPayload(in Input) Check {
	c := Check{Name: "different_payload_409", What: "a request with another payload under an acknowledged key is answered 409 idempotency_conflict"}
	for _, a := range in.Attempts {
		if a.Variant != Different || !a.Answered() || backPressure(a) || a.HTTP >= 500 {
			continue // no verdict: no answer, or "try later" (5xx are judged by no_5xx_while_up)
		}
		c.Checked++
		if a.HTTP != http.StatusConflict || a.Code != wire.CodeIdempotencyConflict {
			c.Violations = append(c.Violations, Violation{a.Key, fmt.Sprintf("different payload at %s answered %d %s%s", offset(a.Start), a.HTTP, a.Code, callSuffix(a))})
		}
	}
	return c
}

func callSuffix(a Attempt) string {
	if a.CallID != "" {
		return " (call " + a.CallID + ")"
	}
	return ""
}

// window is a span of the run, [from, to].
type window struct{ from, to time.Duration }

func (w window) overlaps(a Attempt) bool { return a.Start <= w.to && a.End >= w.from }

// downWindows returns, per instance, the spans from a kill or an exit to
// the instance's next "up"; a span never closed lasts to the end.
func downWindows(events []Event) map[int][]window {
	out := map[int][]window{}
	since := map[int]time.Duration{}
	down := map[int]bool{}
	for _, e := range events {
		switch e.Kind {
		case EventKill, EventExit:
			if !down[e.Instance] {
				down[e.Instance], since[e.Instance] = true, e.At
			}
		case EventPause:
			// Frozen: what it answers on waking was decided while it was.
			out[e.Instance] = append(out[e.Instance], window{e.At, e.End})
		case EventUp:
			if down[e.Instance] {
				out[e.Instance] = append(out[e.Instance], window{since[e.Instance], e.At})
				down[e.Instance] = false
			}
		}
	}
	for i, d := range down {
		if d {
			out[i] = append(out[i], window{since[i], time.Duration(math.MaxInt64)})
		}
	}
	return out
}

// dbWindows returns the spans the database was away, each extended by
// DBGrace: a pg-terminate, a pg-restart, a partition of any instance, and
// a pause of any instance. A partitioned or frozen instance may hold row
// locks in an open transaction, so the others' writes on those rows wait
// the lock timeout and are answered 503 unavailable, as documented.
func dbWindows(events []Event) []window {
	var out []window
	for _, e := range events {
		if e.Kind == EventPGTerminate || e.Kind == EventPGRestart || e.Kind == EventPartition || e.Kind == EventPause {
			out = append(out, window{e.At, e.End + DBGrace})
		}
	}
	return out
}

func check5xx(in Input) Check {
	c := Check{Name: "no_5xx_while_up", What: "no 5xx answer from an instance that was up, except 503 overloaded (back-pressure) and 503 unavailable while the database was away"}
	down := downWindows(in.Events)
	db := dbWindows(in.Events)
	for _, a := range in.Attempts {
		if !a.Answered() {
			continue // no answer: a transport error is not a 5xx
		}
		c.Checked++
		if a.HTTP < 500 || backPressure(a) {
			continue
		}
		if anyOverlap(down[a.Instance], a) {
			continue // the instance was being killed or started
		}
		if a.HTTP == http.StatusServiceUnavailable && a.Code == wire.CodeUnavailable && anyOverlap(db, a) {
			continue
		}
		c.Violations = append(c.Violations, Violation{a.Key, fmt.Sprintf("instance %d answered %d %s at %s while up", a.Instance, a.HTTP, a.Code, offset(a.Start))})
	}
	return c
}

func anyOverlap(ws []window, a Attempt) bool {
	for _, w := range ws {
		if w.overlaps(a) {
			return true
		}
	}
	return false
}

func checkLedger(in Input) Check {
	c := Check{Name: "ledger_one_charge_per_effect", What: "the downstream's ledger holds exactly one charge per succeeded http-tool call, under its effect id, and no other charge"}
	if !in.Observed.LedgerRead {
		c.Skipped = "no downstream of the soak's own in this mode"
		return c
	}
	charges := map[string]int{}
	for _, ch := range in.Observed.Ledger {
		charges[ch.Key]++
	}
	effects := map[string]string{} // effect id → key
	for _, k := range in.Keys {
		got, found := in.Observed.Calls[k.Key]
		if !found || got.Tool != HTTPTool || got.Status != wire.StatusSucceeded {
			continue
		}
		c.Checked++
		effects[got.EffectID] = k.Key
		if n := charges[got.EffectID]; n != 1 {
			c.Violations = append(c.Violations, Violation{k.Key, fmt.Sprintf("call %s (effect %s) has %d charge(s) in the ledger, want 1", got.CallID, got.EffectID, n)})
		}
	}
	keys := make([]string, 0, len(charges))
	for key := range charges {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if _, ok := effects[key]; !ok {
			c.Violations = append(c.Violations, Violation{key, fmt.Sprintf("%d charge(s) under Idempotency-Key %q, which is no succeeded call's effect id", charges[key], key)})
		}
	}
	return c
}

func checkIntegrity(in Input) Check {
	c := Check{Name: "sqlite_integrity", What: "PRAGMA integrity_check answers ok"}
	if !in.Observed.IntegrityRead {
		c.Skipped = "not a SQLite database the soak can open"
		return c
	}
	c.Checked = 1
	if in.Observed.Integrity != "ok" {
		c.Violations = append(c.Violations, Violation{"database", "integrity_check: " + in.Observed.Integrity})
	}
	return c
}

func checkExits(in Input) Check {
	c := Check{Name: "no_unplanned_exit", What: "an instance exits only when the soak kills it, a crash hook fires (exit status 3), or it cannot open the database while starting in a database window (exit status 4)"}
	if !in.Servers {
		c.Skipped = "the servers of a --base deployment are not the soak's to watch"
		return c
	}
	db := dbWindows(in.Events)
	for _, e := range in.Events {
		if e.Kind != EventExit {
			continue
		}
		c.Checked++
		// serve exits 4 when it cannot open the database at start
		// (docs/cli.md, "Exit codes"); a supervisor starts it again.
		dbAway := e.Starting && e.Code == exitcode.Error && anyOverlap(db, Attempt{Start: e.At, End: e.At})
		if !e.Planned && !dbAway {
			c.Violations = append(c.Violations, Violation{fmt.Sprintf("instance %d", e.Instance), fmt.Sprintf("exited at %s: %s", offset(e.At), e.Detail)})
		}
	}
	return c
}

func checkSameKey(in Input) Check {
	c := Check{Name: "downstream_same_key", What: "every request the downstream received for one call presented the same Idempotency-Key, the call's effect_id"}
	if !in.Observed.RequestsRead {
		c.Skipped = "no downstream of the soak's own in this mode"
		return c
	}
	byRef := map[string][]string{}
	var refs []string
	for _, r := range in.Observed.Requests {
		if _, ok := byRef[r.Ref]; !ok {
			refs = append(refs, r.Ref)
		}
		byRef[r.Ref] = append(byRef[r.Ref], r.Key)
	}
	for _, ref := range refs {
		keys := byRef[ref]
		c.Checked++
		if ref == "" {
			c.Violations = append(c.Violations, Violation{"downstream", fmt.Sprintf("%d request(s) without a %q in the body: not the soak's", len(keys), ArgRef)})
			continue
		}
		want := keys[0]
		if got, ok := in.Observed.Calls[ref]; ok && got.EffectID != "" {
			want = got.EffectID
		}
		for _, k := range keys {
			if k != want {
				c.Violations = append(c.Violations, Violation{ref, fmt.Sprintf("%d request(s); one presented Idempotency-Key %q, another (or the call's effect_id) %q", len(keys), k, want)})
				break
			}
		}
	}
	return c
}

func checkOneApplied(in Input) Check {
	c := Check{Name: "downstream_one_effect", What: "the downstream applied at most one effect (ledger charge) per call, counted by the call's soak key in the body, whatever key it presented"}
	if !in.Observed.LedgerRead {
		c.Skipped = "no downstream of the soak's own in this mode"
		return c
	}
	n := map[string]int{}
	var refs []string
	for _, ch := range in.Observed.Ledger {
		if n[ch.Ref] == 0 {
			refs = append(refs, ch.Ref)
		}
		n[ch.Ref]++
	}
	for _, ref := range refs {
		c.Checked++
		if n[ref] > 1 {
			c.Violations = append(c.Violations, Violation{ref, fmt.Sprintf("%d charges in the ledger for one call, want at most 1", n[ref])})
		}
	}
	return c
}

// checkLookupOneRecord judges the on_unknown: lookup tool against a
// downstream that ignores Idempotency-Key and loses answers: only the
// lookup before each new attempt keeps a lost answer from becoming a
// second record, so the records are counted per call by the soak key in
// their body.
func checkLookupOneRecord(in Input) Check {
	c := Check{Name: "lookup_one_record_per_call", What: "the downstream behind the on_unknown: lookup tool, which ignores Idempotency-Key and loses answers, holds at most one record per call (counted by the call's soak key in the body)"}
	if !in.Observed.LookupLedgerRead {
		c.Skipped = "no downstream of the soak's own in this mode"
		return c
	}
	n := map[string]int{}
	var refs []string
	for _, ch := range in.Observed.LookupLedger {
		if n[ch.Ref] == 0 {
			refs = append(refs, ch.Ref)
		}
		n[ch.Ref]++
	}
	for _, k := range in.Keys {
		if k.Payload.Tool == LookupTool {
			c.Checked++
		}
	}
	for _, ref := range refs {
		switch {
		case ref == "":
			c.Violations = append(c.Violations, Violation{"downstream", fmt.Sprintf("%d record(s) without a %q in the body: not the soak's", n[ref], ArgRef)})
		case n[ref] > 1:
			detail := fmt.Sprintf("%d records for one call, want at most 1: a lost answer was followed by a new attempt, not a lookup", n[ref])
			if got, ok := in.Observed.Calls[ref]; ok {
				detail += fmt.Sprintf(" (call %s, %s at attempt %d)", got.CallID, got.Status, got.Attempt)
			}
			c.Violations = append(c.Violations, Violation{ref, detail})
		}
	}
	return c
}

func checkPausedFenced(in Input) Check {
	c := Check{Name: "paused_completion_fenced", What: "a call taken over while its worker was frozen past the lease (audit recover, or outcome_unknown abandoned, of that owner and attempt) has that worker's late completion fenced (audit fenced of that owner and attempt)"}
	if len(in.Pauses) == 0 {
		c.Skipped = "no pause faults in this run (--pauses)"
		return c
	}
	if in.Observed.Audit == nil {
		c.Skipped = "the audit is not readable over the API"
		return c
	}
	for _, p := range in.Pauses {
		for _, h := range p.Calls {
			rows := in.Observed.Audit[h.CallID]
			expired := fmt.Sprintf("(owner %s, attempt %d)", h.Owner, h.Attempt)
			refused := fmt.Sprintf("owner %s attempt %d refused", h.Owner, h.Attempt)
			// Taken over: recovered as an expired lease of that attempt
			// (recover), or claimed directly by another worker, which
			// audits the lapsed attempt as outcome_unknown "abandoned: …
			// lease expired (owner O, attempt N)" (docs/lifecycle.md).
			taken, fenced := false, false
			for _, r := range rows {
				switch {
				case (r.Event == "recover" || r.Event == "outcome_unknown") && strings.Contains(r.Detail, expired):
					taken = true
				case r.Event == "fenced" && strings.HasPrefix(r.Detail, refused):
					fenced = true
				}
			}
			if !taken {
				continue // it finished before its lease ran out, or its commit won: nobody else ran it
			}
			c.Checked++
			if fenced || cutOffSoonAfter(in.Events, p) || gaveUpInLookup(in.Observed.Calls, rows, h) {
				continue
			}
			c.Violations = append(c.Violations, Violation{h.CallID, fmt.Sprintf("frozen on instance %d at %s under owner %s attempt %d, taken over after its lease expired, but no fenced row for that attempt", p.Instance, offset(p.At), h.Owner, h.Attempt)})
		}
	}
	return c
}

// gaveUpInLookup reports whether h's frozen worker was in the lookup that
// starts an attempt after an unknown outcome (on_unknown: lookup): such an
// attempt records nothing when it wakes past its lease (its lookup is cut
// short, or its verdict refused as the lease is gone: internal/executor,
// unknown.go), so no late completion exists to be fenced. It is so when the
// call is of the soak's lookup tool, an unknown outcome came before the
// takeover, and no lookup verdict of that attempt was recorded.
func gaveUpInLookup(calls map[string]ObservedCall, rows []AuditRow, h HeldCall) bool {
	lookupTool := false
	for _, c := range calls {
		if c.CallID == h.CallID {
			lookupTool = c.Tool == LookupTool
			break
		}
	}
	if !lookupTool {
		return false
	}
	expired := fmt.Sprintf("(owner %s, attempt %d)", h.Owner, h.Attempt)
	verdict := fmt.Sprintf("attempt %d:", h.Attempt)
	unknownBefore := false
	for _, r := range rows {
		switch {
		case (r.Event == "recover" || r.Event == "outcome_unknown") && strings.Contains(r.Detail, expired):
			if !unknownBefore {
				return false // the takeover came first: the attempt began without a lookup
			}
		case r.Event == "outcome_unknown":
			unknownBefore = true
		case slices.Contains(store.LookupEvents, r.Event) && strings.HasPrefix(r.Detail, verdict):
			return false // the lookup answered for this attempt: a completion follows it
		}
	}
	return unknownBefore
}

// cutOffSoonAfter reports whether p's instance was killed, exited or was
// partitioned from the database within PauseExitGrace after it was thawed
// (before its worker's commit could reach the database).
func cutOffSoonAfter(events []Event, p Pause) bool {
	for _, e := range events {
		cut := e.Kind == EventKill || e.Kind == EventExit || e.Kind == EventPartition
		if cut && e.Instance == p.Instance && e.At >= p.At && e.At <= p.End+PauseExitGrace {
			return true
		}
	}
	return false
}

func checkPartitionAnswered(in Input) Check {
	c := Check{Name: "partition_answered_in_bound", What: fmt.Sprintf("a request to an instance cut off from its database is answered 503 unavailable (or 2xx) within %s", PartitionBound)}
	for _, p := range in.Probes {
		if !p.During {
			continue
		}
		c.Checked++
		took := p.End - p.Start
		switch {
		case p.HTTP == 0:
			c.Violations = append(c.Violations, Violation{p.Key, fmt.Sprintf("instance %d: no answer after %s (%s)", p.Instance, took.Round(time.Millisecond), p.Err)})
		case took > PartitionBound:
			c.Violations = append(c.Violations, Violation{p.Key, fmt.Sprintf("instance %d: answered %d %s after %s, over %s", p.Instance, p.HTTP, p.Code, took.Round(time.Millisecond), PartitionBound)})
		case p.HTTP/100 != 2 && !(p.HTTP == http.StatusServiceUnavailable && (p.Code == wire.CodeUnavailable || p.Code == wire.CodeOverloaded)):
			c.Violations = append(c.Violations, Violation{p.Key, fmt.Sprintf("instance %d: answered %d %s, want 503 unavailable", p.Instance, p.HTTP, p.Code)})
		}
	}
	if c.Checked == 0 {
		c.Skipped = "no partition faults in this run (--pg-partition)"
	}
	return c
}

func checkPartitionResumes(in Input) Check {
	c := Check{Name: "partition_service_resumes", What: fmt.Sprintf("an instance whose partition healed acknowledges a new key within %s of the heal", ResumeBound)}
	type resume struct {
		inst   int
		healed time.Duration
		ok     time.Duration
		last   Probe
	}
	var order []string
	byKey := map[string]*resume{}
	for _, p := range in.Probes {
		if p.During {
			continue
		}
		r := byKey[p.Key]
		if r == nil {
			r = &resume{inst: p.Instance, healed: p.Healed, ok: -1}
			byKey[p.Key] = r
			order = append(order, p.Key)
		}
		r.last = p
		if p.HTTP/100 == 2 && r.ok < 0 {
			r.ok = p.End - p.Healed
		}
	}
	for _, key := range order {
		r := byKey[key]
		c.Checked++
		switch {
		case r.ok < 0:
			c.Violations = append(c.Violations, Violation{key, fmt.Sprintf("instance %d acknowledged no new key after the heal (last answer %d %s %s)", r.inst, r.last.HTTP, r.last.Code, r.last.Err)})
		case r.ok > ResumeBound:
			c.Violations = append(c.Violations, Violation{key, fmt.Sprintf("instance %d acknowledged a new key %s after the heal, over %s", r.inst, r.ok.Round(time.Millisecond), ResumeBound)})
		}
	}
	if c.Checked == 0 {
		c.Skipped = "no partition faults in this run (--pg-partition)"
	}
	return c
}

// offset prints a run offset like "12.345s".
func offset(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }
