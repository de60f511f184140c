package fault

// The mcp-upstream scenario: a kind: mcp entry puts idemctl in front of
// the demo MCP server (internal/demomcp); the upstream performs the effect
// and its answer is lost on the way back; idemctl calls again under the
// same key, and the upstream performs one effect (docs/tools.md, "The mcp
// kind", "The demo MCP server").

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
	"github.com/idemctl/idemctl/internal/demomcp"
	"github.com/idemctl/idemctl/internal/wire"
)

const (
	// mcpUpstreamName is the scenario's name (its flag: --mcp-upstream).
	mcpUpstreamName = "mcp-upstream"
	// mcpUpstreamTool is the imported tool the scenario calls: the demo's
	// send_receipt under the entry "pay".
	mcpUpstreamTool = "pay_send_receipt"
)

var mcpUpstreamScenario = scenario{
	name:  mcpUpstreamName,
	title: "an upstream MCP server performs the effect and its answer is lost; idemctl calls it again under the same key, and the upstream performs one effect",
	plan: []string{
		"make a temp dir and database; start the demo MCP server in-process on a free loopback port (it honours idempotency keys) and make it drop its next tools/call answer after the effect",
		"write tools.yaml with a kind: mcp entry pay → http://<demo>/mcp; start `idemctl serve --tools tools.yaml`, which imports " + mcpUpstreamTool,
		"client: key mcp-upstream-<unix time>, " + mcpUpstreamTool + " to ann amount 100, Prefer: wait, same-key retries",
		"the first tools/call records a receipt and its answer is dropped; idemctl sends the tools/call again with the same key in params._meta and Idempotency-Key, and the demo answers with the first receipt",
		"print calls, effects, audit and dupes from the database, /stats, and the demo's ledger (GET /ledger)",
		"PASS when calls=1, effects=1, the call succeeded, the upstream saw at least two tools/call, all under the call's effect_id, and its ledger holds exactly one receipt",
	},
	run:           func(ctx context.Context, e *env, rep *Report) error { return runMCPUpstream(ctx, e, rep, false) },
	contrastTitle: "contrast: the same lost answer, but the MCP server ignores idempotency keys (demo-mcp --ignore-keys)",
	contrastPlan:  "the same fault against an MCP server that ignores keys (--ignore-keys) on a fresh database, expected calls=1 effects=1 but two receipts in its ledger",
	contrast:      func(ctx context.Context, e *env, rep *Report) error { return runMCPUpstream(ctx, e, rep, true) },
}

// startDemoMCP runs the demo MCP server in-process on a free loopback
// port; env.close stops it.
func (e *env) startDemoMCP(ignoreKeys bool) (*demomcp.Server, string, error) {
	ds := demomcp.New(ignoreKeys)
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
	mode := "honours idempotency keys"
	if ignoreKeys {
		mode = "IGNORES idempotency keys, --ignore-keys"
	}
	e.logf("upstream: %s/mcp (the demo MCP server, in-process; %s)", base, mode)
	return ds, base, nil
}

func runMCPUpstream(ctx context.Context, e *env, rep *Report, ignoreKeys bool) error {
	ds, base, err := e.startDemoMCP(ignoreKeys)
	if err != nil {
		return err
	}
	doc := map[string]any{"tools": []any{map[string]any{
		"name": "pay", "kind": "mcp", "url": base + "/mcp", "timeout": "5s", "tools": []string{"send_receipt"},
		"retry": map[string]any{"max_attempts": 3, "initial_backoff": "100ms", "max_backoff": "200ms"},
	}}}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	toolsFile := filepath.Join(e.dir, "tools.yaml")
	if err := os.WriteFile(toolsFile, append(b, '\n'), 0o600); err != nil {
		return err
	}
	e.logf("tools file %s: entry pay, kind mcp, %s/mcp, importing send_receipt as %s", toolsFile, base, mcpUpstreamTool)
	srv, err := e.startServer(ctx, serverOpts{label: "server", tools: toolsFile})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	ds.DropAnswers(1)
	e.logf("the demo MCP server will drop its next tools/call answer, after the effect")

	key := fmt.Sprintf("mcp-upstream-%d", time.Now().Unix())
	c, err := e.client(srv.URL, "", client.WithPreferWait(crashWait), client.WithAttemptTimeout(2*time.Second),
		client.WithRetries(crashRetries))
	if err != nil {
		return err
	}
	e.logf("client: POST key %s, %s to ann amount 100, Prefer: wait=%d, same-key retries", key, mcpUpstreamTool, int(crashWait.Seconds()))
	res, callErr := c.Submit(ctx, mcpUpstreamTool, map[string]any{"to": "ann", "amount": 100}, client.WithKey(key))
	rep.Attempts = len(res.Attempts)
	answers := answeredIDs(res)
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
	rep.Charges = len(ledger.Receipts)
	fmt.Fprintf(e.out, "--- upstream ledger (GET %s/ledger) ---\n", base)
	e.printJSON("", ledger)

	if final.CallID != "" && final.Status != wire.StatusSucceeded {
		rep.fail("the call ended %s, want succeeded", final.Status)
	}
	if len(ledger.Attempts) < 2 {
		rep.fail("the upstream saw %d tools/call, want at least 2 (the lost answer, then the call again)", len(ledger.Attempts))
	}
	if final.EffectID != nil {
		for i, a := range ledger.Attempts {
			if a.MetaKey != *final.EffectID || a.HeaderKey != *final.EffectID {
				rep.fail("tools/call %d carried key %q (_meta) / %q (header), the call's effect_id is %q", i+1, a.MetaKey, a.HeaderKey, *final.EffectID)
			}
		}
	}
	if ignoreKeys {
		if len(ledger.Receipts) != 2 {
			rep.fail("the ledger holds %d receipt(s), want 2 from an MCP server that ignores keys", len(ledger.Receipts))
		}
		rep.Verdict, rep.demo = Demo,
			"the upstream's answer was lost and idemctl called again under the same key; an MCP server that ignores keys sent two receipts"
		if len(rep.Failures) > 0 {
			rep.Verdict = NotReproduced
		}
		return nil
	}
	if len(ledger.Receipts) != 1 {
		rep.fail("the upstream's ledger holds %d receipts for one call, want exactly 1", len(ledger.Receipts))
	}
	return nil
}
