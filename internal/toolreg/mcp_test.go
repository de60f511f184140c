package toolreg

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/demomcp"
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
		{`tools: [{name: b, kind: mcp, command: [x], schema: {}}]`, `tools[0] (b): schema: unknown field (allowed: name, kind, timeout, retry, concurrency, rate, breaker, principals, effect, url, headers, command, env, tools, rename)`},
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
