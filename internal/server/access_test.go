package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// scopedTools restricts create_refund to alice and the built-in fail to
// bob; charge stays everyone's.
func scopedTools(t *testing.T) *toolreg.Registry {
	t.Helper()
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: create_refund
    kind: http
    url: http://127.0.0.1:9/refunds
    principals: [alice]
    schema: {type: object, required: [amount], properties: {amount: {type: integer, minimum: 1}}}
  - {name: fail, kind: builtin, principals: [bob]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestToolAccessAPI: a principal the tools file does not name gets 403
// tool_forbidden for the tool, before its args are looked at, and nothing
// is recorded; GET /v1/tools and the unknown-tool message show each
// principal only the tools it may call; a named principal's call goes
// through.
func TestToolAccessAPI(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t, func(c *Config) { c.Tools = scopedTools(t) })
	before := b.snapshot()
	for _, body := range []string{
		`{"tool":"create_refund","args":{"amount":3}}`,
		`{"tool":"create_refund","args":{"amount":"not even valid"}}`,
	} {
		r := b.post("bob-refund", body, "Authorization", bearer(bobToken))
		if r.status != 403 || r.errCode(t) != wire.CodeToolForbidden {
			t.Fatalf("bob calling create_refund: %d %s, want 403 %s", r.status, r.body, wire.CodeToolForbidden)
		}
	}
	if r := b.post("alice-fail", `{"tool":"fail","args":{}}`, "Authorization", bearer(aliceToken)); r.status != 403 || r.errCode(t) != wire.CodeToolForbidden {
		t.Fatalf("alice calling fail: %d %s", r.status, r.body)
	}
	if after := b.snapshot(); !before.equal(after) {
		t.Fatal("a forbidden call changed the database")
	}
	if _, err := b.st.GetByKey(context.Background(), "bob", "bob-refund"); err == nil {
		t.Fatal("bob's forbidden key was recorded")
	}

	for principal, token := range map[string]string{"alice": aliceToken, "bob": bobToken} {
		var got struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		r := b.get("/v1/tools", "Authorization", bearer(token))
		if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 {
			t.Fatalf("%s: GET /v1/tools: %d %s", principal, r.status, r.body)
		}
		var names []string
		for _, tool := range got.Tools {
			names = append(names, tool.Name)
		}
		want := map[string]string{"alice": "charge,create_refund,send_email,sleep", "bob": "charge,fail,send_email,sleep"}[principal]
		if strings.Join(names, ",") != want {
			t.Errorf("%s sees %v, want %s", principal, names, want)
		}
		u := b.post(principal+"-unknown", `{"tool":"nope"}`, "Authorization", bearer(token))
		if u.status != 400 || !strings.Contains(string(u.body), "(known: "+strings.ReplaceAll(want, ",", ", ")+")") {
			t.Errorf("%s: unknown tool: %d %s, want the tools it may call", principal, u.status, u.body)
		}
	}

	r := b.post("alice-refund", `{"tool":"create_refund","args":{"amount":3}}`, "Authorization", bearer(aliceToken))
	if r.status != 201 && r.status != 202 {
		t.Fatalf("alice calling create_refund: %d %s", r.status, r.body)
	}
}

// TestToolAccessMCP: through the MCP door, tools/list shows a principal
// only the tools it may call (and the helper tools), and a tools/call of
// another is refused as tool_forbidden with nothing recorded.
func TestToolAccessMCP(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t, func(c *Config) { c.Tools = scopedTools(t) })
	for principal, token := range map[string]string{"alice": aliceToken, "bob": bobToken} {
		cs := mustMCP(t, b, token)
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		slices.Sort(names)
		want := map[string][]string{
			"alice": {"charge", "create_refund", mcpdoor.GetCallTool, mcpdoor.ListCallsTool, "send_email", "sleep"},
			"bob":   {"charge", "fail", mcpdoor.GetCallTool, mcpdoor.ListCallsTool, "send_email", "sleep"},
		}[principal]
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: tools/list %v, want %v", principal, names, want)
		}
		if res.CacheScope != "private" {
			t.Errorf("%s: tools/list cacheScope %q, want private (the list depends on who asks)", principal, res.CacheScope)
		}
	}
	bob := mustMCP(t, b, bobToken)
	before := b.snapshot()
	res := callTool(t, bob, "create_refund", map[string]any{"amount": 3, mcpdoor.KeyArg: "bob-mcp"}, nil)
	if typ := errType(t, res); typ != wire.CodeToolForbidden {
		t.Fatalf("bob calling create_refund over MCP: type %q, want %s", typ, wire.CodeToolForbidden)
	}
	if after := b.snapshot(); !before.equal(after) {
		t.Fatal("a forbidden MCP call changed the database")
	}
	alice := mustMCP(t, b, aliceToken)
	if res := callTool(t, alice, "create_refund", map[string]any{"amount": 3, mcpdoor.KeyArg: "alice-mcp"}, nil); res.IsError &&
		structured(t, res)["type"] == wire.CodeToolForbidden {
		t.Fatalf("alice refused: %v", structured(t, res))
	}
	if _, err := b.st.GetByKey(context.Background(), "alice", "alice-mcp"); err != nil {
		t.Fatalf("alice's call not recorded: %v", err)
	}
}

// TestToolAccessNeedsAuth: a tools file that restricts a tool is refused
// on a server without tokens (every caller would be the default
// principal, which no list names), and so is a name no token could have.
func TestToolAccessNeedsAuth(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(Config{Tools: scopedTools(t)}, st); err == nil ||
		!strings.Contains(err.Error(), "tool create_refund: principals: restricting a tool needs auth tokens") {
		t.Fatalf("New without auth: %v", err)
	}
	reg, err := toolreg.Parse([]byte("tools:\n- {name: fail, kind: builtin, principals: [\"a:b\"]}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckToolAccess(reg, true); err == nil || !strings.Contains(err.Error(), `tool fail: principals: principal "a:b"`) {
		t.Fatalf("CheckToolAccess: %v", err)
	}
	if err := CheckToolAccess(toolreg.Builtins(), false); err != nil {
		t.Fatalf("unrestricted tools without auth: %v", err)
	}
}
