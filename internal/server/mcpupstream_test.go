package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/demomcp"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// upstreamBundle is a server whose tools file has one mcp entry, demo,
// in front of a demo-mcp server (internal/demomcp).
type upstreamBundle struct {
	*bundle
	demo *demomcp.Server
	ts   *httptest.Server
	down atomic.Bool // the upstream drops every connection
	reg  *toolreg.Registry
}

// setupUpstream starts demo-mcp and a server in front of it; entry is
// the rest of the entry's YAML flow mapping (", timeout: 1s").
func setupUpstream(t *testing.T, ignoreKeys, downAtStart bool, entry string) *upstreamBundle {
	t.Helper()
	u := &upstreamBundle{demo: demomcp.New(ignoreKeys)}
	u.down.Store(downAtStart)
	h := u.demo.Handler()
	u.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.down.Load() {
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.ts.Close)
	reg, err := toolreg.Parse([]byte(fmt.Sprintf("tools:\n  - {name: demo, kind: mcp, url: %q%s}\n", u.ts.URL+"/mcp", entry)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	u.reg = reg
	err = reg.Refresh(context.Background())
	if (err != nil) != downAtStart {
		t.Fatalf("Refresh: %v (upstream down at start: %v)", err, downAtStart)
	}
	u.bundle = setup(t, func(c *Config) { c.Tools = reg })
	return u
}

// callError is a failed call's error object.
func callError(t *testing.T, c wire.Call) wire.CallError {
	t.Helper()
	var e wire.CallError
	if c.Status != wire.StatusFailed || json.Unmarshal(c.Error, &e) != nil {
		t.Fatalf("call %s is %s, not failed with an error object: %s", c.CallID, c.Status, c.Error)
	}
	return e
}

// TestMCPUpstreamDroppedAnswersOneEffect: the upstream performs the
// effect and its answer is lost three times; idemctl retries under one
// key and the upstream, which honours keys, performs one effect, having
// seen the same key (in _meta and in the header) on every attempt. The
// contrast: an upstream that ignores keys performs one per attempt.
func TestMCPUpstreamDroppedAnswersOneEffect(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignoreKeys=%v", ignore), func(t *testing.T) {
			u := setupUpstream(t, ignore, false, ", retry: {max_attempts: 5, initial_backoff: 10ms, max_backoff: 20ms}")
			u.demo.DropAnswers(3)
			r := u.post("k-drop", `{"tool":"demo_send_receipt","args":{"to":"ann","amount":500}}`)
			if r.status != http.StatusAccepted && r.status != http.StatusOK {
				t.Fatalf("POST: %d %s", r.status, r.body)
			}
			c := u.waitFinal(r.call(t).CallID)
			if c.Status != wire.StatusSucceeded {
				t.Fatalf("call %s: %s", c.Status, c.Error)
			}
			led := u.demo.Ledger()
			if len(led.Attempts) < 4 {
				t.Fatalf("the upstream saw %d attempts, want at least 4 (three answers dropped)", len(led.Attempts))
			}
			key := tool.EffectID(c.CallID)
			for i, a := range led.Attempts {
				if a.MetaKey != key || a.HeaderKey != key {
					t.Errorf("attempt %d: _meta key %q, header key %q; want %q in both", i, a.MetaKey, a.HeaderKey, key)
				}
			}
			want := 1
			if ignore {
				want = len(led.Attempts)
			}
			if len(led.Receipts) != want {
				t.Errorf("%d effects upstream over %d attempts, want %d", len(led.Receipts), len(led.Attempts), want)
			}
			if st := u.stats(); st.Effects != 1 || st.Calls != 1 {
				t.Errorf("idemctl recorded %d calls, %d effects; want 1, 1", st.Calls, st.Effects)
			}
		})
	}
}

// TestMCPUpstreamOutcomes: each upstream answer maps to the outcome table
// of docs/tools.md, "The mcp kind".
func TestMCPUpstreamOutcomes(t *testing.T) {
	u := setupUpstream(t, false, false, ", timeout: 300ms")
	run := func(key, body string) wire.Call {
		t.Helper()
		r := u.post(key, body)
		return u.waitFinal(r.call(t).CallID)
	}

	c := run("k-ok", `{"tool":"demo_send_receipt","args":{"to":"bo","amount":1}}`)
	var res mcp.CallToolResult
	if c.Status != wire.StatusSucceeded || json.Unmarshal(c.Result, &res) != nil || res.StructuredContent == nil {
		t.Fatalf("send_receipt: %s %s %s", c.Status, c.Result, c.Error)
	}

	e := callError(t, run("k-refuse", `{"tool":"demo_refuse","args":{}}`))
	if e.Code != wire.CodeUpstreamToolError || e.Retryable || !strings.Contains(string(e.Body), "the demo always refuses") {
		t.Errorf("isError: %+v body %s; want upstream_tool_error, not retryable, the content kept", e, e.Body)
	}

	e = callError(t, run("k-slow", `{"tool":"demo_sleep","args":{"millis":3000}}`))
	if e.Code != wire.CodeOutcomeUnknown || e.Unknown != wire.UnknownTimeoutAfterSend || !e.Retryable ||
		!strings.Contains(e.Message, wire.CodeUpstreamTimeout) {
		t.Errorf("too slow: %+v; want outcome_unknown timeout_after_send (upstream_timeout), retryable", e)
	}

	// The upstream's inputSchema is checked before anything is stored.
	before := u.stats().Calls
	if r := u.post("k-badargs", `{"tool":"demo_sleep","args":{"millis":"x"}}`); r.status != http.StatusBadRequest ||
		!strings.Contains(string(r.body), "/args/millis") {
		t.Errorf("args against the upstream's schema: %d %s; want 400 naming /args/millis", r.status, r.body)
	}
	if after := u.stats().Calls; after != before {
		t.Errorf("a refused call was stored: %d calls, then %d", before, after)
	}
}

// TestMCPUpstreamDownAtStart: an upstream that does not answer at start
// stops neither the server nor the other tools; a call of one of its
// tools gets 503 upstream_unavailable and stores nothing, and once the
// upstream answers a refresh brings its tools in.
func TestMCPUpstreamDownAtStart(t *testing.T) {
	u := setupUpstream(t, false, true, "")
	r := u.post("k-1", `{"tool":"demo_send_receipt","args":{"to":"cy","amount":2}}`)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeUpstreamUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("tool of an upstream down at start: %d %s; want 503 upstream_unavailable with Retry-After", r.status, r.body)
	}
	if r := u.post("k-other", `{"tool":"demo_nosuch","args":{}}`); r.status != http.StatusServiceUnavailable {
		t.Errorf("any <entry>_ name while the list is not loaded: %d, want 503", r.status)
	}
	if r := u.post("k-builtin", `{"tool":"charge","args":{"amount":1}}`); r.status >= 300 {
		t.Errorf("a built-in tool beside the down upstream: %d %s", r.status, r.body)
	}
	if n := u.stats().Calls; n != 1 {
		t.Errorf("%d calls stored, want 1 (the built-in's only)", n)
	}

	cs := mustMCP(t, u.bundle, "")
	doorHas := func(name string) bool {
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list.Tools, func(tl *mcp.Tool) bool { return tl.Name == name })
	}
	if doorHas("demo_send_receipt") {
		t.Fatal("the door lists a tool of an upstream that never answered")
	}
	// Called all the same (an agent that listed it on another instance),
	// the door answers as the API does, in a result the agent reads.
	res := callTool(t, cs, "demo_send_receipt", map[string]any{"to": "cy", "amount": 2}, map[string]any{mcpdoor.MetaKey: "k-early"})
	if sc, _ := res.StructuredContent.(map[string]any); !res.IsError || sc["type"] != wire.CodeUpstreamUnavailable {
		t.Fatalf("door call of a tool not listed yet: %+v; want isError with type upstream_unavailable", res)
	}
	if n := u.stats().Calls; n != 1 {
		t.Errorf("%d calls stored after the door's refusal, want 1", n)
	}

	u.down.Store(false)
	if err := u.reg.Refresh(context.Background()); err != nil {
		t.Fatalf("Refresh once the upstream is up: %v", err)
	}
	// The door follows the refresh: same session, new tools.
	if !doorHas("demo_send_receipt") {
		t.Fatal("after the refresh, the door does not list demo_send_receipt")
	}
	res = callTool(t, cs, "demo_send_receipt", map[string]any{"to": "cy", "amount": 2}, map[string]any{mcpdoor.MetaKey: "k-door"})
	if res.IsError || res.StructuredContent == nil {
		t.Fatalf("door call after the refresh: %+v", res)
	}
	r = u.post("k-1", `{"tool":"demo_send_receipt","args":{"to":"cy","amount":2}}`)
	if c := u.waitFinal(r.call(t).CallID); c.Status != wire.StatusSucceeded {
		t.Fatalf("after the refresh: %s %s", c.Status, c.Error)
	}
	if r := u.post("k-other", `{"tool":"demo_nosuch","args":{}}`); r.status != http.StatusBadRequest {
		t.Errorf("a tool the loaded upstream does not offer: %d, want 400 unknown tool", r.status)
	}
}

// TestMCPUpstreamKilledMidCall: the upstream's connections are cut while
// it runs the call: the tools/call was sent and never answered, so the
// outcome is unknown (reset_after_send, upstream_unreachable in the
// message), retryable.
func TestMCPUpstreamKilledMidCall(t *testing.T) {
	u := setupUpstream(t, false, false, "")
	r := u.post("k-kill", `{"tool":"demo_sleep","args":{"millis":5000}}`)
	id := r.call(t).CallID
	eventually(t, "the call runs", func() bool {
		return u.get(wire.CallPath(id)).call(t).Status == wire.StatusRunning
	})
	u.down.Store(true) // the retry within the attempt finds it down too
	u.ts.CloseClientConnections()
	e := callError(t, u.waitFinal(id))
	if e.Code != wire.CodeOutcomeUnknown || e.Unknown != wire.UnknownResetAfterSend || !e.Retryable ||
		!strings.Contains(e.Message, wire.CodeUpstreamUnreachable) || strings.Contains(e.Message, "127.0.0.1") {
		t.Errorf("killed mid-call: %+v; want outcome_unknown reset_after_send (upstream_unreachable), retryable, no address", e)
	}
}

// TestMCPUpstreamSessionExpired: the upstream forgets its sessions (404
// for the old one); the next call opens a new session and succeeds.
func TestMCPUpstreamSessionExpired(t *testing.T) {
	u := setupUpstream(t, false, false, "")
	for i, key := range []string{"k-s1", "k-s2"} {
		if i == 1 {
			u.demo.ForgetSessions()
		}
		r := u.post(key, `{"tool":"demo_send_receipt","args":{"to":"di","amount":3}}`)
		if c := u.waitFinal(r.call(t).CallID); c.Status != wire.StatusSucceeded {
			t.Fatalf("call %d: %s %s", i+1, c.Status, c.Error)
		}
	}
	if n := len(u.demo.Ledger().Receipts); n != 2 {
		t.Errorf("%d receipts, want 2", n)
	}
}

// TestMCPUpstreamAllowListAndListing: the allow-list imports only the
// named tools; a named tool the upstream does not offer answers 503
// upstream_unavailable; GET /v1/tools lists the imported tools with their
// upstream, description and annotations, and readOnlyHint means no effect.
func TestMCPUpstreamAllowListAndListing(t *testing.T) {
	u := setupUpstream(t, false, false, ", tools: [send_receipt, sleep, coming_soon]")
	var list wire.Tools
	if err := json.Unmarshal(u.get(wire.PathTools).body, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]wire.Tool{}
	for _, tl := range list.Tools {
		if tl.Kind == toolreg.KindMCP {
			got[tl.Name] = tl
		}
	}
	if len(got) != 2 || got["demo_send_receipt"].Upstream != "demo" || got["demo_sleep"].Name == "" {
		t.Fatalf("imported: %v; want demo_send_receipt and demo_sleep only", got)
	}
	if s := got["demo_send_receipt"]; !s.Effect || !strings.Contains(s.Description, "receipt") {
		t.Errorf("send_receipt: effect %v, description %q", s.Effect, s.Description)
	}
	if s := got["demo_sleep"]; s.Effect || !strings.Contains(string(s.Annotations), `"readOnlyHint":true`) {
		t.Errorf("sleep (readOnlyHint): effect %v, annotations %s; want no effect, the hint carried", s.Effect, s.Annotations)
	}
	if r := u.post("k-soon", `{"tool":"demo_coming_soon","args":{}}`); r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeUpstreamUnavailable {
		t.Errorf("an allow-listed tool not offered yet: %d %s", r.status, r.body)
	}
	if r := u.post("k-refuse", `{"tool":"demo_refuse","args":{}}`); r.status != http.StatusBadRequest {
		t.Errorf("a tool left out by the allow-list: %d, want 400", r.status)
	}
}

// TestMCPUpstreamHold: an mcp entry with on_unknown: hold, against an
// upstream that ignores keys and loses the answer after the effect: the
// tools/call is sent once (not again within the attempt, nor by a later
// one), and the call ends failed outcome_unknown, not retryable, one
// receipt upstream. An expired session (the upstream refuses the call
// unread) is still tried again on a new session and succeeds.
func TestMCPUpstreamHold(t *testing.T) {
	u := setupUpstream(t, true, false, ", on_unknown: hold, retry: {max_attempts: 3, initial_backoff: 10ms, max_backoff: 20ms}")
	u.demo.DropAnswers(1)
	c := u.waitFinal(u.post("k-hold", `{"tool":"demo_send_receipt","args":{"to":"ann","amount":5}}`).call(t).CallID)
	e := callError(t, c)
	if e.Code != wire.CodeOutcomeUnknown || e.Retryable || e.Unknown != wire.UnknownResetAfterSend || c.Attempt != 1 {
		t.Fatalf("held call: attempt %d, %+v; want failed at attempt 1, outcome_unknown reset_after_send, not retryable", c.Attempt, e)
	}
	if led := u.demo.Ledger(); len(led.Attempts) != 1 || len(led.Receipts) != 1 {
		t.Fatalf("upstream saw %d tools/call, made %d receipts; want one of each", len(led.Attempts), len(led.Receipts))
	}
	u.demo.ForgetSessions()
	ok := u.waitFinal(u.post("k-hold-2", `{"tool":"demo_send_receipt","args":{"to":"bo","amount":5}}`).call(t).CallID)
	if ok.Status != wire.StatusSucceeded {
		t.Fatalf("after an expired session: %s %s; want succeeded on a new session", ok.Status, ok.Error)
	}
}
