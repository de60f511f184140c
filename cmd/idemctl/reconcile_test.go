package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/reconcile"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/tool"
)

// reconcileFixture is a database and a downstream for one tool: each
// call name of outcomes becomes a call of create_charge that ended so,
// and each of its downstream records is a charge made with its effect id.
type reconcileFixture struct {
	db, tools string
	st        store.Store
	calls     map[string]string // name -> call id
}

// fixtureCall is one call of the fixture: how it ended, and how many
// records the downstream made with its key.
type fixtureCall struct {
	name    string
	outcome string // "succeeded", "unknown" (failed outcome_unknown), "failed" (a known failure)
	records int
}

func newReconcileFixture(t *testing.T, calls []fixtureCall, strangers int) *reconcileFixture {
	t.Helper()
	ds := httptest.NewServer(downstream.New(true).Handler())
	t.Cleanup(ds.Close)
	dir := t.TempDir()
	f := &reconcileFixture{db: filepath.Join(dir, "idem.db"), tools: filepath.Join(dir, "tools.yaml"), calls: map[string]string{}}
	if err := os.WriteFile(f.tools, []byte(fmt.Sprintf(`tools:
  - name: create_charge
    kind: http
    url: %[1]s/charges
    reconcile:
      url: %[1]s/charges?since={since}&limit=2
      items: /data
      key: /idempotency_key
  - name: no_list
    kind: http
    url: %[1]s/charges
`, ds.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := backend.Open(t.Context(), f.db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st = st
	charge := func(key string) {
		req, _ := http.NewRequest(http.MethodPost, ds.URL+"/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set(downstream.HeaderIdempotencyKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ctx := t.Context()
	for i, c := range calls {
		id := fmt.Sprintf("c_%016x", i+1)
		f.calls[c.name] = id
		if _, _, err := st.CreateOrGet(ctx, store.NewCall{CallID: id, IdemKey: c.name, Fingerprint: "fp", Tool: "create_charge", ArgsJSON: json.RawMessage(`{"amount":1}`)}); err != nil {
			t.Fatal(err)
		}
		claimed, err := st.ClaimNext(ctx, "owner", time.Minute, 1)
		if err != nil || len(claimed) != 1 || claimed[0].CallID != id {
			t.Fatalf("claim %s: %v %v", id, claimed, err)
		}
		l := store.LeaseOf(claimed[0])
		for range c.records {
			charge(tool.EffectID(id))
		}
		switch c.outcome {
		case "succeeded":
			_, err = st.Succeed(ctx, store.Completion{Lease: l, Result: json.RawMessage(`{}`),
				Effect: &store.Effect{EffectID: tool.EffectID(id), CallID: id, Tool: "create_charge"}})
		case "unknown":
			_, err = st.Fail(ctx, store.Completion{Lease: l, Error: json.RawMessage(`{"code":"outcome_unknown","message":"lost","retryable":false,"unknown":"reset_after_send"}`)})
		default:
			_, err = st.Fail(ctx, store.Completion{Lease: l, Error: json.RawMessage(`{"code":"http_error","message":"refused","retryable":false}`)})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range strangers {
		charge(fmt.Sprintf("eff_stranger%d", i))
	}
	return f
}

// TestReconcileAgree: every record has its effect and every effect its
// record: exit 0, AGREE, in both output formats and from --db and --base.
func TestReconcileAgree(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, []fixtureCall{{"a", "succeeded", 1}, {"b", "succeeded", 1}, {"c", "succeeded", 1}}, 0)
	base := servertest.Start(t, servertest.Options{Store: f.st, Config: server.Config{}}).URL
	for _, side := range [][]string{{"--db", f.db}, {"--base", base}} {
		out, errOut, code := cliRun(t, append([]string{"reconcile", "--tools", f.tools, "--tool", "create_charge", "--since", "1h"}, side...)...)
		if code != exitcode.OK || !strings.Contains(out, "AGREE create_charge: 0 record(s) without effect") ||
			!strings.Contains(out, "3 downstream record(s), 3 effect(s) here") {
			t.Fatalf("%v: exit %d\n%s%s", side, code, out, errOut)
		}
		out, _, code = cliRun(t, append([]string{"reconcile", "--tools", f.tools, "--tool", "create_charge", "--output", "json"}, side...)...)
		var rep reconcile.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitcode.OK || !rep.Agree || rep.Records != 3 || rep.Effects != 3 {
			t.Fatalf("%v json: exit %d, %v %+v", side, code, err, rep)
		}
	}
}

// TestReconcileDiscrepancies: each of the four kinds is reported, with
// exit 1, from --db and from --base alike.
func TestReconcileDiscrepancies(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, []fixtureCall{
		{"ok", "succeeded", 1},
		{"twice", "succeeded", 2},   // shared key
		{"nowhere", "succeeded", 0}, // effect without record
		{"failed", "failed", 1},     // record without effect (a call that failed)
		{"held-done", "unknown", 1}, // held: the downstream has it
		{"held-not", "unknown", 0},  // held: the downstream does not
	}, 1) // a stranger's record: record without effect, no call
	base := servertest.Start(t, servertest.Options{Store: f.st, Config: server.Config{}}).URL
	id := func(name string) string { return f.calls[name] }
	eff := func(name string) string { return tool.EffectID(id(name)) }
	for _, side := range [][]string{{"--db", f.db}, {"--base", base}} {
		out, errOut, code := cliRun(t, append([]string{"reconcile", "--tools", f.tools, "--tool", "create_charge", "--output", "json"}, side...)...)
		if code != exitcode.Failed {
			t.Fatalf("%v: exit %d, want %d\n%s%s", side, code, exitcode.Failed, out, errOut)
		}
		var rep reconcile.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v: %v\n%s", side, err, out)
		}
		var noEffect []string
		for _, u := range rep.NoEffect {
			who := "-"
			if u.Call != nil {
				who = u.Call.CallID + "/" + string(u.Call.Status)
			}
			noEffect = append(noEffect, u.Key+"@"+who)
		}
		if got, want := strings.Join(noEffect, " "), eff("failed")+"@"+id("failed")+"/failed eff_stranger0@-"; got != want {
			t.Errorf("%v records without effect: %s, want %s", side, got, want)
		}
		if len(rep.NoRecord) != 1 || rep.NoRecord[0].EffectID != eff("nowhere") || rep.NoRecord[0].CallID != id("nowhere") {
			t.Errorf("%v effects without record: %+v, want %s", side, rep.NoRecord, eff("nowhere"))
		}
		if len(rep.SharedKeys) != 1 || rep.SharedKeys[0].Key != eff("twice") || len(rep.SharedKeys[0].Records) != 2 || rep.SharedKeys[0].CallID != id("twice") {
			t.Errorf("%v shared keys: %+v, want %s twice", side, rep.SharedKeys, eff("twice"))
		}
		held := map[string]int{}
		for _, h := range rep.Held {
			held[h.CallID] = h.Records
		}
		if len(held) != 2 || held[id("held-done")] != 1 || held[id("held-not")] != 0 {
			t.Errorf("%v held: %+v, want %s with 1 record and %s with none", side, rep.Held, id("held-done"), id("held-not"))
		}
		if rep.Agree || rep.Records != 6 || rep.Effects != 3 {
			t.Errorf("%v: agree %v, %d records, %d effects; want false, 6, 3", side, rep.Agree, rep.Records, rep.Effects)
		}
	}

	out, _, code := cliRun(t, "reconcile", "--tools", f.tools, "--tool", "create_charge", "--db", f.db)
	for _, want := range []string{
		"record without effect: key " + eff("failed") + ", call " + id("failed") + " is failed (http_error)",
		"record without effect: key eff_stranger0, no call here sent this key",
		"effect without record: " + eff("nowhere") + " of call " + id("nowhere"),
		"shared key: 2 records made with key " + eff("twice") + " (call " + id("twice") + ")",
		"held: call " + id("held-done") + " (outcome_unknown, key " + eff("held-done") + "): the downstream has 1 record",
		"held: call " + id("held-not") + " (outcome_unknown, key " + eff("held-not") + "): the downstream has no record",
		"DIFFERS create_charge: 2 record(s) without effect, 1 effect(s) without record, 1 shared key(s), 2 held call(s)",
	} {
		if !strings.Contains(out, want) || code != exitcode.Failed {
			t.Errorf("table output (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
}

// TestReconcileUsage: what cannot be reconciled is a usage error (exit 2)
// naming the flag; a downstream that cannot be read is a runtime error.
func TestReconcileUsage(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, nil, 0)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--tool", "create_charge", "--db", f.db}, exitcode.Usage, "--tools is required"},
		{[]string{"--tools", f.tools, "--db", f.db}, exitcode.Usage, "--tool is required"},
		{[]string{"--tools", f.tools, "--tool", "nope", "--db", f.db}, exitcode.Usage, `--tool "nope": not in`},
		{[]string{"--tools", f.tools, "--tool", "no_list", "--db", f.db}, exitcode.Usage, `--tool "no_list": has no reconcile block`},
		{[]string{"--tools", f.tools, "--tool", "create_charge", "--db", f.db, "--since", "yesterday"}, exitcode.Usage, `--since: "yesterday" is neither`},
		{[]string{"--tools", f.tools, "--tool", "create_charge", "--db", f.db, "--output", "xml"}, exitcode.Usage, `--output: unknown output format "xml"`},
		{[]string{"--tools", f.tools, "--tool", "create_charge", "--base", "ftp://x"}, exitcode.Usage, `--base`},
		{[]string{"--tools", filepath.Join(t.TempDir(), "none.yaml"), "--tool", "create_charge", "--db", f.db}, exitcode.Usage, `--tools:`},
	}
	for _, c := range cases {
		_, errOut, code := cliRun(t, append([]string{"reconcile"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	// The downstream gone: a runtime error naming the list, nothing printed.
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(tools, []byte("tools: [{name: t, kind: http, url: \"http://127.0.0.1:9/x\", reconcile: {url: \"http://127.0.0.1:9/l?since={since}\", items: /data, key: /k}}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cliRun(t, "reconcile", "--tools", tools, "--tool", "t", "--db", f.db)
	if code != exitcode.Error || out != "" || !strings.Contains(errOut, "the downstream's list: page 1") {
		t.Fatalf("downstream gone: exit %d, out %q, stderr %q", code, out, errOut)
	}
}
