package fault

// The downstream scenario: an http tool charges a real (demo) downstream,
// the server dies before it records the outcome, and the call runs again
// after the restart. The downstream must charge once: idemctl carries the
// call's effect id as the Idempotency-Key on every attempt (docs/tools.md,
// "The http kind", "The demo downstream").

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
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

const (
	// downstreamName is the scenario's name (its flag: --downstream).
	downstreamName = "downstream"
	// downstreamTool is the http tool the scenario declares.
	downstreamTool = "create_charge"
)

// downstreamScenario crashes with _crash_before_commit rather than pausing
// the worker and sending SIGKILL from here: the hook fires after the tool
// returned, before the completion transaction, on attempt 1 only — the
// exact moment, with no race between a pause and a kill. Its exit is
// os.Exit(3), as abrupt for the database as SIGKILL: nothing after it
// runs, no transaction is committed.
var downstreamScenario = scenario{
	name:  downstreamName,
	title: "an http tool charges the demo downstream, the server dies before recording it (_crash_before_commit); restarted, it runs the call again with the same Idempotency-Key, and the downstream charges once",
	plan: []string{
		"make a temp dir and database; start the demo downstream in-process on a free loopback port (it honours Idempotency-Key)",
		"write tools.yaml with an http tool " + downstreamTool + " → http://<downstream>/charges; start `idemctl serve --chaos --tools tools.yaml`",
		"client: key downstream-<unix time>, " + downstreamTool + " amount 100 with _crash_before_commit=true, Prefer: wait=5, same-key retries",
		"attempt 1 sends POST /charges with Idempotency-Key: <effect_id>; the downstream records the charge; the server exits (status 3) before its success transaction",
		"a supervisor restarts the server on the same database; recovery hands the call back; attempt 2 sends the same request with the same Idempotency-Key, and the downstream answers with the first charge (Idempotent-Replayed)",
		"print calls, effects, audit and dupes from the database, /stats, and the downstream's ledger (GET /ledger)",
		"PASS when the crash happened, calls=1, effects=1, the call succeeded at attempt 2, the ledger holds exactly one charge, and its key is the call's effect_id",
	},
	run:           func(ctx context.Context, e *env, rep *Report) error { return runDownstream(ctx, e, rep, false) },
	contrastTitle: "contrast: the same fault, but the downstream ignores Idempotency-Key (demo-downstream --ignore-keys)",
	contrastPlan:  "the same fault against a downstream that ignores Idempotency-Key (--ignore-keys) on a fresh database, expected calls=1 effects=1 but two charges in the ledger",
	contrast:      func(ctx context.Context, e *env, rep *Report) error { return runDownstream(ctx, e, rep, true) },
}

// startDownstream runs the demo downstream in-process on a free loopback
// port; env.close stops it.
func (e *env) startDownstream(ignoreKeys bool) (*downstream.Server, string, error) {
	ds := downstream.New(ignoreKeys)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	hs := &http.Server{Handler: ds.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	e.stops = append(e.stops, func() { _ = hs.Close(); <-served })
	base := "http://" + ln.Addr().String()
	mode := "honours Idempotency-Key"
	if ignoreKeys {
		mode = "IGNORES Idempotency-Key, --ignore-keys"
	}
	e.logf("downstream: %s (the demo downstream, in-process; %s)", base, mode)
	return ds, base, nil
}

// writeTools writes the scenario's tools file: one http tool charging url.
func (e *env) writeTools(url string) (string, error) {
	// JSON is YAML: no quoting questions about the URL.
	doc := map[string]any{"tools": []any{map[string]any{
		"name":    downstreamTool,
		"kind":    "http",
		"url":     url,
		"timeout": "5s",
		"schema": map[string]any{"type": "object", "required": []string{"amount"}, "additionalProperties": false,
			"properties": map[string]any{"amount": map[string]any{"type": "integer", "minimum": 1}}},
	}}}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(e.dir, "tools.yaml")
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return "", err
	}
	e.logf("tools file %s: %s, kind http, POST %s", path, downstreamTool, url)
	return path, nil
}

func runDownstream(ctx context.Context, e *env, rep *Report, ignoreKeys bool) error {
	ds, dsBase, err := e.startDownstream(ignoreKeys)
	if err != nil {
		return err
	}
	toolsFile, err := e.writeTools(dsBase + "/charges")
	if err != nil {
		return err
	}
	srv, err := e.startServer(ctx, serverOpts{label: "server", chaos: true, tools: toolsFile})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	restarted := e.restartOnExit(ctx, srv)

	key := fmt.Sprintf("downstream-%d", time.Now().Unix())
	// The held reply must not time out first: the client gives a held
	// POST its hold on top of the attempt timeout.
	c, err := e.client(srv.URL, "", client.WithPreferWait(crashWait), client.WithAttemptTimeout(2*time.Second),
		client.WithRetries(crashRetries))
	if err != nil {
		return err
	}
	args := chargeArgs(100)
	args[tool.ArgCrashBeforeCommit] = true
	e.logf("client: POST key %s, %s amount 100 with %s=true, Prefer: wait=%d, same-key retries",
		key, downstreamTool, tool.ArgCrashBeforeCommit, int(crashWait.Seconds()))

	res, callErr := c.Submit(ctx, downstreamTool, args, client.WithKey(key))
	rep.Attempts = len(res.Attempts)
	answers := answeredIDs(res)

	if _, err := awaitCrash(ctx, restarted, tool.ArgCrashBeforeCommit, rep); err != nil {
		return err
	}

	var final client.Call
	if callErr != nil {
		if err := noAnswer(ctx, rep, "the client", callErr); err != nil {
			return err
		}
	} else {
		if final, err = e.settle(ctx, c, res.Call); err != nil {
			if err := notFinal(ctx, rep, res.Call.CallID, err); err != nil {
				return err
			}
		}
		answers = append(answers, final.CallID)
	}

	if _, err := e.evidence(ctx, srv.URL, rep, expect{calls: 1, effects: 1}, answers); err != nil {
		return err
	}
	ledger := ds.Ledger()
	rep.Charges = len(ledger)
	e.printLedger(dsBase, ledger)

	if final.CallID != "" && final.Status != wire.StatusSucceeded {
		rep.fail("the call ended %s, want succeeded", final.Status)
	}
	if rep.Attempt != 2 {
		rep.fail("attempt=%d, want 2 (the crashed attempt, then the recovered one)", rep.Attempt)
	}
	effectID := ""
	if final.EffectID != nil {
		effectID = *final.EffectID
	} else if final.CallID != "" {
		rep.fail("the succeeded call has no effect_id")
	}

	if ignoreKeys {
		// The contrast: idemctl did its part (one call, one effect row),
		// but a downstream that ignores the key charged twice.
		if len(ledger) != 2 {
			rep.fail("the ledger holds %d charge(s), want 2 from a downstream that ignores keys", len(ledger))
		}
		rep.Verdict, rep.demo = Demo,
			"the call ran twice (attempt 1 crashed after the downstream charged), and a downstream that ignores Idempotency-Key charged twice; the key carried downstream is what makes a rerun safe"
		if len(rep.Failures) > 0 {
			rep.Verdict = NotReproduced
		}
		return nil
	}
	id := chargeID(final.Result)
	if id != "" {
		e.logf("the call's result names downstream charge %s (attempt 2's answer); the ledger holds %d charge(s)", id, len(ledger))
	}
	switch {
	case len(ledger) != 1:
		rep.fail("the downstream's ledger holds %d charges for one call, want exactly 1 — the effect key did not carry the rerun", len(ledger))
	case ledger[0].Key == "":
		rep.fail("the downstream's charge carries no Idempotency-Key")
	case effectID != "" && ledger[0].Key != effectID:
		rep.fail("the downstream's charge has Idempotency-Key %q, the call's effect_id is %q", ledger[0].Key, effectID)
	case final.CallID != "" && id != ledger[0].ID:
		rep.fail("the call's result names downstream charge %q, the ledger's one charge is %s", id, ledger[0].ID)
	}
	return nil
}

// printLedger prints the downstream's ledger as GET /ledger returns it.
func (e *env) printLedger(base string, ledger []downstream.Charge) {
	fmt.Fprintf(e.out, "--- downstream ledger (GET %s/ledger) ---\n", base)
	if len(ledger) == 0 {
		fmt.Fprintf(e.out, "(empty)\n")
	}
	for _, ch := range ledger {
		e.printJSON("", ch)
	}
}

// chargeID is the downstream charge id in an http tool's result
// ({"status": 201, "body": {"id": "ch_1", ...}}), "" if there is none.
func chargeID(result json.RawMessage) string {
	var r struct {
		Body struct {
			ID string `json:"id"`
		} `json:"body"`
	}
	if json.Unmarshal(result, &r) != nil {
		return ""
	}
	return r.Body.ID
}
