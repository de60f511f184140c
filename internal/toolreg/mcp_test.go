package toolreg

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/demomcp"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestParseMCPEntryErrors: each fault of an mcp entry is refused naming
// the tool and the field; a secret's value never shows.
func TestParseMCPEntryErrors(t *testing.T) {
	env := func(name string) (string, bool) {
		if name == "TOKEN" {
			return "tok-SECRET-1", true
		}
		return "", false
	}
	for _, tc := range []struct{ file, want string }{
		{`tools: [{name: b, kind: mcp}]`, `tools[0] (b): url: an mcp entry needs exactly one of url (streamable HTTP) and command`},
		{`tools: [{name: b, kind: mcp, url: "http://127.0.0.1:1/mcp", command: [x]}]`, `tools[0] (b): url: an mcp entry needs exactly one of url`},
		{`tools: [{name: b, kind: mcp, command: []}]`, `tools[0] (b): command: must be a non-empty list of strings`},
		{`tools: [{name: b, kind: mcp, url: "ftp://x/mcp"}]`, `tools[0] (b): url: "ftp://x/mcp" must start with http:// or https://`},
		{`tools: [{name: b, kind: mcp, url: "http://127.0.0.1:1/mcp", env: {A: x}}]`, `tools[0] (b): env: only for a stdio server (command)`},
		{`tools: [{name: b, kind: mcp, command: [x], headers: {Authorization: "Bearer ${TOKEN}"}}]`, `tools[0] (b): headers: only for an HTTP server (url)`},
		{`tools: [{name: b, kind: mcp, command: [x], env: {KEY: "${MISSING}"}}]`, `tools[0] (b): env.KEY: environment variable MISSING is not set`},
		{`tools: [{name: b, kind: mcp, command: [x], env: {KEY: 5}}]`, `tools[0] (b): env.KEY: must be a string, got a int`},
		{`tools: [{name: b, kind: mcp, command: [x], tools: []}]`, `tools[0] (b): tools: must be a non-empty list`},
		{`tools: [{name: b, kind: mcp, command: [x], rename: {a: "no spaces"}}]`, `tools[0] (b): rename.a: "no spaces" must be 1 to 64 letters`},
		{`tools: [{name: b, kind: mcp, command: [x], schema: {}}]`, `tools[0] (b): schema: unknown field (allowed: name, kind, timeout, retry, concurrency, rate, breaker, principals, effect, url, headers, on_unknown, command, env, tools, rename)`},
		{`tools: [{name: charge, kind: mcp, command: [x]}]`, `tools[0] (charge): name: "charge" is a built-in tool's name`},
	} {
		_, err := Parse([]byte(tc.file), env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", tc.file, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: the error shows a secret: %v", tc.file, err)
		}
	}
	if _, err := Parse([]byte(`tools: [{name: b, kind: mcp, url: "http://127.0.0.1:1/mcp", headers: {Authorization: "Bearer ${TOKEN}"}}]`), env); err != nil {
		t.Errorf("a good entry: %v", err)
	}
}

// TestRefreshBadImport: an upstream tool the registry cannot take (its
// name in idemctl taken by another tool, or too long) is ErrBadImport
// naming it, and the others are imported.
func TestRefreshBadImport(t *testing.T) {
	ts := httptest.NewServer(demomcp.New(false).Handler())
	t.Cleanup(ts.Close)
	long := strings.Repeat("x", 60)
	reg, err := Parse([]byte(`tools:
  - {name: demo, kind: mcp, url: "`+ts.URL+`/mcp", rename: {send_receipt: charge}}
  - {name: `+long+`, kind: mcp, url: "`+ts.URL+`/mcp", tools: [sleep]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	err = reg.Refresh(context.Background())
	if !errors.Is(err, ErrBadImport) {
		t.Fatalf("Refresh: %v; want ErrBadImport", err)
	}
	for _, want := range []string{`mcp upstream demo: tool "charge": the name is taken by another tool`,
		`tool "sleep": its name in idemctl, "` + long + `_sleep", is not 1 to 64`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Refresh error %q does not say …%s…", err, want)
		}
	}
	if _, ok := reg.Lookup("demo_refuse"); !ok {
		t.Errorf("the upstream's other tools were not imported: %v", reg.Names())
	}
	if c, _ := reg.Lookup("charge"); c == nil || c.Kind != KindBuiltin {
		t.Errorf("the built-in charge was replaced: %v", c)
	}
}

// TestRunAsksTheUpstreamBeforeJudgingAToolGone: two instances read one
// upstream; it adds a tool, one instance lists it and accepts a call, the
// other runs the call with its older list. The runner reads the lists
// again before judging, so the call runs; once the upstream really drops
// the tool, the call fails upstream_tool_gone.
func TestRunAsksTheUpstreamBeforeJudgingAToolGone(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	echo := func(name string) (*mcp.Tool, mcp.ToolHandler) {
		return &mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			}
	}
	up.AddTool(echo("first"))
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(ts.Close)
	instance := func() *Registry {
		reg, err := Parse([]byte(`tools:
  - {name: up, kind: mcp, url: "`+ts.URL+`/mcp"}
`), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close() })
		if err := reg.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	a, b := instance(), instance()
	up.AddTool(echo("second"))
	if err := a.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Lookup("up_second"); !ok {
		t.Fatal("instance a does not list up_second after its refresh")
	}
	if _, ok := b.Lookup("up_second"); ok {
		t.Fatal("instance b lists up_second before any refresh: the test proves nothing")
	}
	b.up.refreshed.Store(time.Now().Add(-missRefreshAge).UnixNano()) // b's lists are a refresh interval old
	inv := tool.Invocation{CallID: "c1", Tool: "up_second", Args: map[string]any{}, Attempt: 1}
	out, err := b.Run(context.Background(), inv)
	if err != nil || out.Err != nil || !strings.Contains(string(out.Result), `"text":"second"`) {
		t.Fatalf("instance b ran up_second: %s %+v %v; want the upstream's answer", out.Result, out.Err, err)
	}

	up.RemoveTools("second")
	b.up.refreshed.Store(time.Now().Add(-missRefreshAge).UnixNano())
	if _, ok := b.Lookup("up_second"); !ok {
		t.Fatal("b's refresh during the run did not list up_second")
	}
	if err := b.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err = b.Run(context.Background(), inv)
	if err != nil || out.Err == nil || out.Err.Code != wire.CodeUpstreamToolGone || out.Err.Retryable {
		t.Fatalf("a tool the upstream dropped: %+v %v; want upstream_tool_gone, not retryable", out.Err, err)
	}
}

// TestUnavailableKeepsToPrincipals: while an upstream restricted to some
// principals has not answered, its tools are "not listed yet" (503) to
// those principals only; to anyone else they are unknown (400), as they
// would be once listed: the 503 does not tell others the upstream exists.
func TestUnavailableKeepsToPrincipals(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	ts.Close() // nothing answers at its address
	reg, err := Parse([]byte(`tools:
  - {name: up, kind: mcp, url: "`+ts.URL+`/mcp", principals: [alice], rename: {refund: give_back}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := reg.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh of an upstream that is down succeeded")
	}
	for _, name := range []string{"up_refund", "give_back"} {
		if !reg.For("alice").Unavailable(name) {
			t.Errorf("alice, %s: not unavailable; want the 503 of a tool not listed yet", name)
		}
		if reg.For("bob").Unavailable(name) {
			t.Errorf("bob, %s: unavailable; want unknown to a principal the entry does not name", name)
		}
	}
	if reg.For("alice").Unavailable("other") {
		t.Error("a name outside the entry is unavailable")
	}
}
