package fault

// The unknown-outcome scenario: a downstream that ignores Idempotency-Key
// makes a charge and loses its answer, so idemctl cannot know whether the
// charge happened (docs/lifecycle.md, "Unknown outcomes"). What happens
// next is the tool's on_unknown policy (docs/tools.md): lookup asks the
// downstream first and charges once; hold stops and leaves the call to an
// operator, charged once; retry (the contrast) sends the request again and
// charges twice, and idemctl reconcile finds the duplicate.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/reconcile"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// unknownName is the scenario's name (its flag: --unknown-outcome).
const unknownName = "unknown-outcome"

// The on_unknown policies the scenario runs; the tool of each is
// "charge_" + the policy.
const (
	policyLookup = "lookup"
	policyHold   = "hold"
	policyRetry  = "retry"
)

var unknownOutcomeScenario = scenario{
	name:  unknownName,
	title: "a downstream that ignores Idempotency-Key charges and loses its answer: on_unknown lookup asks it first and charges once, hold charges once and holds the call for an operator",
	plan: []string{
		"make a temp dir and database; start two demo downstreams in-process (--ignore-keys, the first answer lost: the charge is made, the connection closed)",
		"write tools.yaml: charge_lookup (on_unknown: lookup, lookup GET /charges?idempotency_key={effect_id}) and charge_hold (on_unknown: hold), each on its downstream, 3 attempts, each with a reconcile block; start `idemctl serve --tools tools.yaml`",
		"client: one call of each tool, amount 100, Prefer: wait, same-key retries",
		"charge_lookup: attempt 1's answer is lost (outcome_unknown); before attempt 2 idemctl asks the downstream, which has the charge: the call succeeds with it (audit lookup_found), no second POST",
		"charge_hold: attempt 1's answer is lost; the call ends failed outcome_unknown, retryable false, for idemctl resolve",
		"print calls, effects, audit and dupes, /stats, both ledgers, and reconcile charge_hold (the held call, and the downstream's one record of it)",
		"PASS when calls=2, effects=1, charge_lookup succeeded with 1 charge and a lookup_found audit row, charge_hold is held (failed, outcome_unknown, not retryable) with 1 charge, and reconcile reports it held with 1 downstream record",
	},
	run:           runUnknownOutcome,
	contrastTitle: "contrast: on_unknown retry (the default) against the same downstream: the retry charges again, and idemctl reconcile finds the duplicate",
	contrastPlan:  "charge_retry (on_unknown: retry, the default) against the same kind of downstream on a fresh database: expected calls=1 effects=1 but two charges in the ledger under one key, which reconcile reports as a shared key",
	contrast:      runUnknownRetry,
}

// unknownDownstream is one in-process demo downstream of the scenario.
type unknownDownstream struct {
	ds   *downstream.Server
	base string
}

// startLosingDownstream runs a demo downstream that ignores keys and loses
// its first answer, on a free loopback port; env.close stops it.
func (e *env) startLosingDownstream(policy string) (unknownDownstream, error) {
	ds, err := downstream.NewWith(downstream.Options{IgnoreKeys: true, LoseAnswers: 1, LoseLimit: 1})
	if err != nil {
		return unknownDownstream{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return unknownDownstream{}, err
	}
	hs := &http.Server{Handler: ds.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	e.stops = append(e.stops, func() { _ = hs.Close(); <-served })
	base := "http://" + ln.Addr().String()
	e.logf("downstream for charge_%s: %s (in-process; IGNORES Idempotency-Key, loses its first answer)", policy, base)
	return unknownDownstream{ds: ds, base: base}, nil
}

// writeUnknownTools writes one tool per policy, each charging its own
// downstream, with 3 attempts and a reconcile block.
func (e *env) writeUnknownTools(downs map[string]unknownDownstream, policies ...string) (string, error) {
	var tools []any
	for _, p := range policies {
		base := downs[p].base
		t := map[string]any{
			"name":    "charge_" + p,
			"kind":    "http",
			"url":     base + "/charges",
			"timeout": "5s",
			"retry":   map[string]any{"max_attempts": 3, "initial_backoff": "100ms", "max_backoff": "1s"},
			"schema": map[string]any{"type": "object", "required": []string{"amount"}, "additionalProperties": false,
				"properties": map[string]any{"amount": map[string]any{"type": "integer", "minimum": 1}}},
			"reconcile": map[string]any{"url": base + "/charges?since=" + toolreg.SincePlaceholder, "items": "/data", "key": "/idempotency_key"},
		}
		if p != policyRetry { // retry is the default
			t["on_unknown"] = p
		}
		if p == policyLookup {
			t["lookup"] = map[string]any{"url": base + "/charges?idempotency_key={effect_id}"}
		}
		tools = append(tools, t)
	}
	b, err := json.MarshalIndent(map[string]any{"tools": tools}, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(e.dir, "tools.yaml")
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return "", err
	}
	for _, p := range policies {
		e.logf("tools file %s: charge_%s, kind http, POST %s/charges, on_unknown %s, 3 attempts, reconcile GET %s/charges?since={since}",
			path, p, downs[p].base, p, downs[p].base)
	}
	return path, nil
}

// unknownCall makes one call of charge_<policy> and waits for its end.
func (e *env) unknownCall(ctx context.Context, rep *Report, c *client.Client, policy string) (client.Call, error) {
	key := fmt.Sprintf("unknown-%s-%d", policy, time.Now().UnixNano())
	e.logf("client: POST key %s, charge_%s amount 100", key, policy)
	res, err := c.Submit(ctx, "charge_"+policy, chargeArgs(100), client.WithKey(key))
	if err != nil {
		return client.Call{}, noAnswer(ctx, rep, "the client of charge_"+policy, err)
	}
	final, err := e.settle(ctx, c, res.Call)
	if err != nil {
		return final, notFinal(ctx, rep, res.Call.CallID, err)
	}
	return final, nil
}

// reconcileTool runs what idemctl reconcile --db runs for one tool of
// the scenario, prints its report and returns it.
func (e *env) reconcileTool(ctx context.Context, toolsFile, toolName string, since time.Time) (reconcile.Report, error) {
	reg, err := toolreg.Load(toolsFile, nil)
	if err != nil {
		return reconcile.Report{}, err
	}
	t, _ := reg.Lookup(toolName)
	if t == nil || t.Reconcile == nil {
		return reconcile.Report{}, fmt.Errorf("%s has no reconcile block", toolName)
	}
	st, err := e.openDB(ctx)
	if err != nil {
		return reconcile.Report{}, err
	}
	defer st.Close()
	local, err := reconcile.FromStore(ctx, st, toolName, since.Add(-reconcile.Grace))
	if err != nil {
		return reconcile.Report{}, err
	}
	records, err := reconcile.Fetch(ctx, nil, t.Reconcile, since)
	if err != nil {
		return reconcile.Report{}, err
	}
	rep := reconcile.Compare(toolName, since, records, local)
	fmt.Fprintf(e.out, "--- idemctl reconcile --tools %s --tool %s --db %s ---\n", toolsFile, toolName, e.db)
	return rep, rep.WriteText(e.out)
}

// callCode is a failed call's error object.
func callCode(c client.Call) wire.CallError {
	var ce wire.CallError
	_ = json.Unmarshal(c.Error, &ce)
	return ce
}

func runUnknownOutcome(ctx context.Context, e *env, rep *Report) error {
	since := time.Now().Add(-time.Minute)
	downs := map[string]unknownDownstream{}
	for _, p := range []string{policyLookup, policyHold} {
		d, err := e.startLosingDownstream(p)
		if err != nil {
			return err
		}
		downs[p] = d
	}
	toolsFile, err := e.writeUnknownTools(downs, policyLookup, policyHold)
	if err != nil {
		return err
	}
	srv, err := e.startServer(ctx, serverOpts{label: "server", tools: toolsFile})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	c, err := e.client(srv.URL, "", client.WithPreferWait(5*time.Second), client.WithAttemptTimeout(10*time.Second))
	if err != nil {
		return err
	}
	finals := map[string]client.Call{}
	for _, p := range []string{policyLookup, policyHold} {
		final, err := e.unknownCall(ctx, rep, c, p)
		if err != nil {
			return err
		}
		finals[p] = final
	}
	rows, err := e.evidence(ctx, srv.URL, rep, expect{calls: 2, effects: 1}, nil)
	if err != nil {
		return err
	}
	for _, p := range []string{policyLookup, policyHold} {
		ledger := downs[p].ds.Ledger()
		rep.Charges += len(ledger)
		fmt.Fprintf(e.out, "--- charge_%s: ", p)
		e.printLedger(downs[p].base, ledger)
		if len(ledger) != 1 {
			rep.fail("charge_%s: the downstream holds %d charge(s), want 1", p, len(ledger))
		}
	}

	look := finals[policyLookup]
	switch {
	case look.CallID == "":
	case look.Status != wire.StatusSucceeded:
		rep.fail("charge_lookup ended %s (%s), want succeeded from the lookup", look.Status, look.Error)
	case countEvents(callEvents(rows.events, look.CallID), store.EventLookupFound) != 1:
		rep.fail("charge_lookup: the audit has no %s row: the call did not succeed by the lookup", store.EventLookupFound)
	default:
		e.logf("charge_lookup: succeeded after a lookup found the charge (audit %s); the downstream holds 1 charge", store.EventLookupFound)
	}
	hold := finals[policyHold]
	if ce := callCode(hold); hold.CallID != "" && (hold.Status != wire.StatusFailed || ce.Code != wire.CodeOutcomeUnknown || ce.Retryable) {
		rep.fail("charge_hold ended %s %s, want failed outcome_unknown with retryable false", hold.Status, hold.Error)
	} else if hold.CallID != "" {
		e.logf("charge_hold: held (failed, outcome_unknown, retryable false) with 1 charge downstream: idemctl resolve %s --succeeded settles it", hold.CallID)
	}

	rc, err := e.reconcileTool(ctx, toolsFile, "charge_"+policyHold, since)
	if err != nil {
		return err
	}
	if hold.CallID != "" && (len(rc.Held) != 1 || rc.Held[0].CallID != hold.CallID || rc.Held[0].Records != 1) {
		rep.fail("reconcile charge_hold reported held %+v, want call %s with 1 downstream record", rc.Held, hold.CallID)
	}
	return nil
}

func runUnknownRetry(ctx context.Context, e *env, rep *Report) error {
	since := time.Now().Add(-time.Minute)
	d, err := e.startLosingDownstream(policyRetry)
	if err != nil {
		return err
	}
	toolsFile, err := e.writeUnknownTools(map[string]unknownDownstream{policyRetry: d}, policyRetry)
	if err != nil {
		return err
	}
	srv, err := e.startServer(ctx, serverOpts{label: "server", tools: toolsFile})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	c, err := e.client(srv.URL, "", client.WithPreferWait(5*time.Second), client.WithAttemptTimeout(10*time.Second))
	if err != nil {
		return err
	}
	final, err := e.unknownCall(ctx, rep, c, policyRetry)
	if err != nil {
		return err
	}
	if _, err := e.evidence(ctx, srv.URL, rep, expect{calls: 1, effects: 1}, nil); err != nil {
		return err
	}
	ledger := d.ds.Ledger()
	rep.Charges = len(ledger)
	e.printLedger(d.base, ledger)
	rc, err := e.reconcileTool(ctx, toolsFile, "charge_"+policyRetry, since)
	if err != nil {
		return err
	}
	if final.CallID != "" && final.Status != wire.StatusSucceeded {
		rep.fail("charge_retry ended %s, want succeeded at its second attempt", final.Status)
	}
	if len(ledger) != 2 {
		rep.fail("the ledger holds %d charge(s), want 2 from a retry against a downstream that ignores keys", len(ledger))
	}
	if len(rc.SharedKeys) != 1 || rc.SharedKeys[0].CallID != final.CallID || len(rc.SharedKeys[0].Records) != 2 {
		rep.fail("reconcile reported shared keys %+v, want the call's key with 2 records", rc.SharedKeys)
	}
	rep.Verdict, rep.demo = Demo,
		"the answer was lost, the retry sent the request again and a downstream that ignores Idempotency-Key charged twice; idemctl reconcile found the duplicate (a key shared by 2 records)"
	if len(rep.Failures) > 0 {
		rep.Verdict = NotReproduced
	}
	return nil
}

// callEvents keeps one call's audit rows.
func callEvents(events []store.AuditEvent, callID string) []store.AuditEvent {
	var out []store.AuditEvent
	for _, ev := range events {
		if ev.CallID == callID {
			out = append(out, ev)
		}
	}
	return out
}
