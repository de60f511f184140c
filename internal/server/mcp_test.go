package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	bearerauth "github.com/idemctl/idemctl/internal/bearer"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// mcpConnect opens an MCP session on the bundle's /mcp over the SDK's
// streamable HTTP client transport; token "" sends no Authorization.
func mcpConnect(t *testing.T, b *bundle, token string) (*mcp.ClientSession, error) {
	t.Helper()
	var hc *http.Client
	if token != "" {
		hc = bearerauth.Client(nil, token)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: b.ts.URL + wire.PathMCP, HTTPClient: hc, MaxRetries: -1}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func mustMCP(t *testing.T, b *bundle, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcpConnect(t, b, token)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	return cs
}

// callTool calls a tool; meta, if not nil, is params._meta.
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, meta map[string]any) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if meta != nil {
		p.Meta = meta
	}
	res, err := cs.CallTool(context.Background(), p)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return res
}

// structured decodes a result's structuredContent.
func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	return m
}

// errType is the type of a tool error, failing the test on a success.
func errType(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("result is no error: %+v", structured(t, res))
	}
	typ, _ := structured(t, res)["type"].(string)
	return typ
}

func TestMCPListTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	var names []string
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
		names = append(names, tool.Name)
	}
	want := append(b.srv.cfg.Tools.Names(), mcpdoor.GetCallTool, mcpdoor.ListCallsTool)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
	charge := byName["charge"]
	schema, _ := json.Marshal(charge.InputSchema)
	var s struct {
		Type       string                     `json:"type"`
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "object" || !slices.Equal(s.Required, []string{"amount"}) || s.Properties["amount"] == nil {
		t.Fatalf("charge schema lost the registry's: %s", schema)
	}
	if !strings.Contains(string(s.Properties[mcpdoor.KeyArg]), `"string"`) {
		t.Fatalf("charge schema has no optional %s string: %s", mcpdoor.KeyArg, schema)
	}
	if charge.Description == "" {
		t.Fatal("charge has no description")
	}
	a := charge.Annotations
	if a == nil || !a.IdempotentHint || a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Fatalf("charge annotations = %+v, want idempotent and destructive", a)
	}
	if a := byName["sleep"].Annotations; a == nil || a.DestructiveHint == nil || *a.DestructiveHint {
		t.Fatalf("sleep (no effect) annotations = %+v, want destructiveHint false", a)
	}
	for _, h := range []string{mcpdoor.GetCallTool, mcpdoor.ListCallsTool} {
		if a := byName[h].Annotations; a == nil || !a.ReadOnlyHint {
			t.Fatalf("%s annotations = %+v, want read-only", h, a)
		}
	}
}

func TestMCPSameKeyTwiceOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	args := map[string]any{"amount": 7, mcpdoor.KeyArg: "mcp-k1"}
	first := callTool(t, cs, "charge", args, nil)
	second := callTool(t, cs, "charge", args, nil)
	for i, r := range []*mcp.CallToolResult{first, second} {
		if r.IsError {
			t.Fatalf("call %d: error %v", i+1, structured(t, r))
		}
		if r.Meta["io.idemctl/status"] != "succeeded" {
			t.Fatalf("call %d: status %v, want succeeded", i+1, r.Meta["io.idemctl/status"])
		}
	}
	if first.Meta["io.idemctl/replayed"] != false || second.Meta["io.idemctl/replayed"] != true {
		t.Fatalf("replayed = %v then %v, want false then true", first.Meta["io.idemctl/replayed"], second.Meta["io.idemctl/replayed"])
	}
	if first.Meta["io.idemctl/call-id"] != second.Meta["io.idemctl/call-id"] {
		t.Fatalf("two calls: %v and %v", first.Meta["io.idemctl/call-id"], second.Meta["io.idemctl/call-id"])
	}
	if got, want := structured(t, second), structured(t, first); !jsonEqual(got, want) {
		t.Fatalf("replay result %v, first %v", got, want)
	}
	if st := b.stats(); st.Calls != 1 || st.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", st.Calls, st.Effects)
	}
	// The key argument is not part of the args: the API's POST with the
	// same key and args is a replay of the same call.
	r := b.post("mcp-k1", `{"tool":"charge","args":{"amount":7}}`)
	if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("POST with the MCP call's key: %d %s", r.status, r.body)
	}
	// The only difference between the doors: the call records which one.
	if c := r.call(t); c.Via != store.ViaMCP {
		t.Fatalf("via = %q for a call made through MCP, want %q", c.Via, store.ViaMCP)
	}
	if c := b.post("http-k1", `{"tool":"charge","args":{"amount":7}}`).call(t); c.Via != store.ViaHTTP {
		t.Fatalf("via = %q for a call made through the API, want %q", c.Via, store.ViaHTTP)
	}
	// idemctl mcp forwards over the API and says so; other values are
	// the API's own door.
	if c := b.post("stdio-k1", `{"tool":"charge","args":{"amount":7}}`, wire.HeaderVia, "mcp").call(t); c.Via != store.ViaMCP {
		t.Fatalf("via = %q with %s: mcp, want %q", c.Via, wire.HeaderVia, store.ViaMCP)
	}
	if c := b.post("odd-k1", `{"tool":"charge","args":{"amount":7}}`, wire.HeaderVia, "carrier-pigeon").call(t); c.Via != store.ViaHTTP {
		t.Fatalf("via = %q with an unknown %s, want %q", c.Via, wire.HeaderVia, store.ViaHTTP)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestMCPKeyCarriers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	// _meta alone.
	r := callTool(t, cs, "charge", map[string]any{"amount": 1}, map[string]any{mcpdoor.MetaKey: "meta-key"})
	if r.IsError || r.Meta[mcpdoor.MetaKey] != "meta-key" {
		t.Fatalf("_meta carrier: %+v %v", r.Meta, structured(t, r))
	}
	// The argument alone.
	r = callTool(t, cs, "charge", map[string]any{"amount": 2, mcpdoor.KeyArg: "arg-key"}, nil)
	if r.IsError || r.Meta[mcpdoor.MetaKey] != "arg-key" {
		t.Fatalf("argument carrier: %+v %v", r.Meta, structured(t, r))
	}
	// Both: _meta wins, and the argument is still removed from the args.
	r = callTool(t, cs, "charge", map[string]any{"amount": 3, mcpdoor.KeyArg: "loser"}, map[string]any{mcpdoor.MetaKey: "winner"})
	if r.IsError || r.Meta[mcpdoor.MetaKey] != "winner" {
		t.Fatalf("both carriers: %+v %v", r.Meta, structured(t, r))
	}
	for key, args := range map[string]string{"meta-key": `{"amount":1}`, "arg-key": `{"amount":2}`, "winner": `{"amount":3}`} {
		c, err := b.st.GetByKey(context.Background(), "", key)
		if err != nil {
			t.Fatalf("key %s not recorded: %v", key, err)
		}
		if string(c.ArgsJSON) != args {
			t.Fatalf("key %s: args %s, want %s", key, c.ArgsJSON, args)
		}
	}
	if st := b.stats(); st.Calls != 3 {
		t.Fatalf("calls = %d, want 3 (the losing argument key recorded nothing)", st.Calls)
	}
	// A key the API could never record is refused, nothing stored.
	r = callTool(t, cs, "charge", map[string]any{"amount": 4, mcpdoor.KeyArg: "has space"}, nil)
	if typ := errType(t, r); typ != mcpdoor.TypeInvalidKey {
		t.Fatalf("bad key: type %q, want %s", typ, mcpdoor.TypeInvalidKey)
	}
	if st := b.stats(); st.Calls != 3 {
		t.Fatalf("calls = %d after a bad key, want 3", st.Calls)
	}
}

func TestMCPConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	first := callTool(t, cs, "charge", map[string]any{"amount": 5, mcpdoor.KeyArg: "conflict-k"}, nil)
	r := callTool(t, cs, "charge", map[string]any{"amount": 6, mcpdoor.KeyArg: "conflict-k"}, nil)
	if typ := errType(t, r); typ != mcpdoor.TypeConflict {
		t.Fatalf("type %q, want %s", typ, mcpdoor.TypeConflict)
	}
	if got := structured(t, r)["call_id"]; got != first.Meta["io.idemctl/call-id"] {
		t.Fatalf("conflict names call %v, want %v", got, first.Meta["io.idemctl/call-id"])
	}
	if st := b.stats(); st.Calls != 1 || st.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", st.Calls, st.Effects)
	}
}

func TestMCPNoKeyOnEffectToolRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	r := callTool(t, cs, "charge", map[string]any{"amount": 5}, nil)
	if typ := errType(t, r); typ != mcpdoor.TypeKeyRequired {
		t.Fatalf("type %q, want %s", typ, mcpdoor.TypeKeyRequired)
	}
	if st := b.stats(); st.Calls != 0 || st.Effects != 0 {
		t.Fatalf("calls=%d effects=%d, want nothing stored", st.Calls, st.Effects)
	}
	// A tool without effects runs without a key, under a fresh one each time.
	r1 := callTool(t, cs, "sleep", map[string]any{"seconds": 0}, nil)
	r2 := callTool(t, cs, "sleep", map[string]any{"seconds": 0}, nil)
	for _, r := range []*mcp.CallToolResult{r1, r2} {
		if r.IsError || r.Meta["io.idemctl/status"] != "succeeded" {
			t.Fatalf("key-less sleep: %+v %v", r.Meta, structured(t, r))
		}
		if k, _ := r.Meta[mcpdoor.MetaKey].(string); !strings.HasPrefix(k, "mcp-auto-") {
			t.Fatalf("key-less sleep key = %q, want mcp-auto-...", k)
		}
	}
	if r1.Meta[mcpdoor.MetaKey] == r2.Meta[mcpdoor.MetaKey] {
		t.Fatal("two key-less calls shared a key")
	}
}

func TestMCPSlowToolStillRunningThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.MCPWait = 20 * time.Millisecond })
	cs := mustMCP(t, b, "")
	args := map[string]any{"seconds": 1, mcpdoor.KeyArg: "slow-k"}
	r := callTool(t, cs, "sleep", args, nil)
	if r.IsError {
		t.Fatalf("slow call: %v", structured(t, r))
	}
	body := structured(t, r)
	if body["type"] != mcpdoor.TypeRunning || body["call_id"] == nil || body["idempotency_key"] != "slow-k" {
		t.Fatalf("first answer %v, want still running with call id and key", body)
	}
	callID := body["call_id"]
	var last *mcp.CallToolResult
	eventually(t, "a retry returns the final result", func() bool {
		last = callTool(t, cs, "sleep", args, nil)
		if last.Meta["io.idemctl/replayed"] != true || last.Meta["io.idemctl/call-id"] != callID {
			t.Fatalf("retry was not a replay of %v: %+v", callID, last.Meta)
		}
		return last.Meta["io.idemctl/status"] == "succeeded"
	})
	if last.IsError {
		t.Fatalf("final: %v", structured(t, last))
	}
	if st := b.stats(); st.Calls != 1 {
		t.Fatalf("calls = %d, want 1", st.Calls)
	}
}

func TestMCPFailedCallIsToolError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	r := callTool(t, cs, "fail", map[string]any{"message": "boom", mcpdoor.KeyArg: "fail-k"}, nil)
	if typ := errType(t, r); typ != mcpdoor.TypeToolFailed {
		t.Fatalf("type %q, want %s", typ, mcpdoor.TypeToolFailed)
	}
	e, _ := structured(t, r)["error"].(map[string]any)
	if e == nil || !strings.Contains(e["message"].(string), "boom") {
		t.Fatalf("error object %v does not carry the tool's error", structured(t, r))
	}
}

func TestMCPBadArgsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	r := callTool(t, cs, "charge", map[string]any{"amount": "lots", mcpdoor.KeyArg: "bad-args"}, nil)
	if typ := errType(t, r); typ != wire.CodeBadRequest {
		t.Fatalf("type %q, want %s", typ, wire.CodeBadRequest)
	}
	if st := b.stats(); st.Calls != 0 {
		t.Fatalf("calls = %d, want nothing stored", st.Calls)
	}
}

func TestMCPHelperTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := mustMCP(t, b, "")
	callTool(t, cs, "charge", map[string]any{"amount": 9, mcpdoor.KeyArg: "helper-k"}, nil)
	callTool(t, cs, "sleep", map[string]any{"seconds": 0, mcpdoor.KeyArg: "helper-s"}, nil)
	r := callTool(t, cs, mcpdoor.GetCallTool, map[string]any{"key": "helper-k"}, nil)
	got := structured(t, r)
	if r.IsError || got["idem_key"] != "helper-k" || got["status"] != "succeeded" {
		t.Fatalf("get by key: %v", got)
	}
	r = callTool(t, cs, mcpdoor.GetCallTool, map[string]any{"call_id": got["call_id"]}, nil)
	if byID := structured(t, r); r.IsError || byID["idem_key"] != "helper-k" {
		t.Fatalf("get by id: %v", byID)
	}
	r = callTool(t, cs, mcpdoor.GetCallTool, map[string]any{"key": "never-used"}, nil)
	if typ := errType(t, r); typ != wire.CodeNotFound {
		t.Fatalf("unknown key: type %q, want %s", typ, wire.CodeNotFound)
	}
	r = callTool(t, cs, mcpdoor.ListCallsTool, map[string]any{"tool": "charge"}, nil)
	calls, _ := structured(t, r)["calls"].([]any)
	if r.IsError || len(calls) != 1 || calls[0].(map[string]any)["idem_key"] != "helper-k" {
		t.Fatalf("list charge: %v", structured(t, r))
	}
	if st := b.stats(); st.Calls != 2 {
		t.Fatalf("calls = %d, want 2: the helpers record nothing", st.Calls)
	}
}

func TestMCPAuth(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t)
	if _, err := mcpConnect(t, b, ""); err == nil {
		t.Fatal("MCP session without a token was accepted")
	}
	if _, err := mcpConnect(t, b, "not-a-token"); err == nil {
		t.Fatal("MCP session with an unknown token was accepted")
	}
	alice := mustMCP(t, b, aliceToken)
	bob := mustMCP(t, b, bobToken)
	a := callTool(t, alice, "charge", map[string]any{"amount": 1, mcpdoor.KeyArg: "shared"}, nil)
	// The principal scopes keys: bob's same key with other args is no
	// conflict, and his call is his own.
	r := callTool(t, bob, "charge", map[string]any{"amount": 2, mcpdoor.KeyArg: "shared"}, nil)
	if r.IsError || r.Meta["io.idemctl/replayed"] != false || r.Meta["io.idemctl/call-id"] == a.Meta["io.idemctl/call-id"] {
		t.Fatalf("bob's call under alice's key: %+v %v", r.Meta, structured(t, r))
	}
	c, err := b.st.GetByKey(context.Background(), "alice", "shared")
	if err != nil || c.CallID != a.Meta["io.idemctl/call-id"] {
		t.Fatalf("alice's call not recorded under her principal: %v %v", c.CallID, err)
	}
	g := callTool(t, bob, mcpdoor.GetCallTool, map[string]any{"call_id": c.CallID}, nil)
	if typ := errType(t, g); typ != wire.CodeNotFound {
		t.Fatalf("bob reading alice's call: type %q, want %s", typ, wire.CodeNotFound)
	}
}

func TestMCPDestructiveHintFromToolConfig(t *testing.T) {
	t.Parallel()
	reg, err := toolreg.Parse([]byte(`tools: [{name: charge, kind: builtin, destructive: false},
  {name: sleep, kind: builtin, destructive: true}]`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	res, err := mustMCP(t, b, "").ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"charge": false, "sleep": true, "send_email": true, "fail": false}
	for _, tool := range res.Tools {
		w, ok := want[tool.Name]
		if !ok {
			continue
		}
		if a := tool.Annotations; a == nil || a.DestructiveHint == nil || *a.DestructiveHint != w {
			t.Fatalf("%s: annotations %+v, want destructiveHint %v", tool.Name, a, w)
		}
	}
}
