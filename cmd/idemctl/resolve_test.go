package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestResolveCommand: an on_unknown: hold tool whose downstream loses
// every answer leaves calls failed outcome_unknown; idemctl calls --code
// outcome_unknown lists them; idemctl resolve settles one through the API
// (--succeeded --result) and one on the database (--db --failed
// --message); the same key then replays the settled outcome; a call that
// is no longer unknown is refused with exit 1 and left alone; unclear
// flags are usage errors.
func TestResolveCommand(t *testing.T) {
	lost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // the request arrived; its answer is lost
		}
	}))
	defer lost.Close()
	reg, err := toolreg.Parse([]byte("tools:\n  - {name: pay, kind: http, url: \""+lost.URL+"\", on_unknown: hold}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlite.Open(t.Context(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := servertest.Start(t, servertest.Options{Config: server.Config{Tools: reg}, Store: st}).URL
	c, err := client.New(base, client.WithPreferWait(0))
	if err != nil {
		t.Fatal(err)
	}
	held := func(key string) string {
		res, _ := c.Submit(t.Context(), "pay", map[string]any{"amount": 1}, client.WithKey(key))
		waitCall(t, c, res.Call.CallID, wire.StatusFailed, 1)
		return res.Call.CallID
	}
	viaAPI, viaDB := held("api"), held("db")

	out, errOut, code := cliRun(t, "calls", "--base", base, "--code", wire.CodeOutcomeUnknown)
	if code != exitcode.OK || strings.Count(out, `"code":"outcome_unknown"`) != 2 || !strings.Contains(out, viaAPI) || !strings.Contains(out, viaDB) {
		t.Fatalf("calls --code outcome_unknown: exit %d\n%s%s; want both held calls", code, out, errOut)
	}
	if out, _, _ := cliRun(t, "calls", "--base", base, "--code", wire.CodeToolFailed); strings.TrimSpace(out) != "" {
		t.Fatalf("calls --code tool_failed printed %s; want nothing", out)
	}

	out, errOut, code = cliRun(t, "resolve", viaAPI, "--base", base, "--succeeded", "--result", `{"id":"ch_9"}`)
	var got wire.Call
	if code != exitcode.OK || json.Unmarshal([]byte(out), &got) != nil || got.Status != wire.StatusSucceeded ||
		string(got.Result) != `{"id":"ch_9"}` {
		t.Fatalf("resolve --succeeded: exit %d\n%s%s; want the call succeeded with the result", code, out, errOut)
	}
	out, errOut, code = cliRun(t, "resolve", viaDB, "--db", db, "--failed", "--message", "not in the ledger")
	if code != exitcode.OK || json.Unmarshal([]byte(out), &got) != nil || got.Status != wire.StatusFailed ||
		!strings.Contains(string(got.Error), `"code":"resolved_failed","message":"not in the ledger"`) {
		t.Fatalf("resolve --db --failed: exit %d\n%s%s; want the call failed resolved_failed", code, out, errOut)
	}
	for key, want := range map[string]string{"api": `{"id":"ch_9"}`, "db": wire.CodeResolvedFailed} {
		res, _ := c.Submit(t.Context(), "pay", map[string]any{"amount": 1}, client.WithKey(key))
		if !res.Replayed || !strings.Contains(string(res.Call.Result)+string(res.Call.Error), want) {
			t.Fatalf("same key %s after resolve: %+v; want the settled outcome replayed", key, res.Call)
		}
	}
	audit, err := st.Audit(t.Context(), viaDB, 0)
	if err != nil || audit[len(audit)-1].Event != store.EventResolved || !strings.HasPrefix(audit[len(audit)-1].Detail, "by (--db) as failed") {
		t.Fatalf("audit of the --db resolve: %+v %v", audit, err)
	}

	// Settled now: refused, unchanged, exit 1, the call printed as it is.
	out, errOut, code = cliRun(t, "resolve", viaAPI, "--base", base, "--failed")
	if code != exitcode.Failed || !strings.Contains(errOut, wire.CodeNotResolvable) || !strings.Contains(out, `"status":"succeeded"`) {
		t.Fatalf("resolve of a settled call: exit %d\n%s%s; want exit 1, not_resolvable", code, out, errOut)
	}
	_, errOut, code = cliRun(t, "resolve", viaDB, "--db", db, "--succeeded")
	if code != exitcode.Failed || !strings.Contains(errOut, wire.CodeNotResolvable) {
		t.Fatalf("resolve --db of a settled call: exit %d %s; want exit 1, not_resolvable", code, errOut)
	}
	for _, args := range [][]string{
		{"resolve", viaAPI, "--base", base},
		{"resolve", viaAPI, "--base", base, "--succeeded", "--failed"},
		{"resolve", viaAPI, "--base", base, "--failed", "--result", "{}"},
		{"resolve", viaAPI, "--base", base, "--succeeded", "--result", "{nope"},
		{"resolve", viaAPI, "--base", base, "--succeeded", "--result", "[1]"},
		{"resolve", viaAPI, "--base", base, "--succeeded", "--message", "m"},
		{"resolve", viaAPI, "--base", base, "--db", db, "--failed"},
		{"resolve", "--base", base, "--failed"},
	} {
		if _, errOut, code := cliRun(t, args...); code != exitcode.Usage {
			t.Errorf("%v: exit %d %s; want a usage error", args, code, errOut)
		}
	}
}
