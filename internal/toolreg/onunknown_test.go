package toolreg

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/tool"
)

// TestParseOnUnknown: on_unknown defaults to retry, takes the three
// policies on http and mcp entries, and a lookup block gets its defaults
// (GET, found [200], not_found [404]).
func TestParseOnUnknown(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte(`tools:
  - {name: a, kind: http, url: "http://127.0.0.1:9/x"}
  - {name: b, kind: http, url: "http://127.0.0.1:9/x", on_unknown: hold}
  - name: c
    kind: http
    url: "http://127.0.0.1:9/x"
    on_unknown: lookup
    lookup: {url: "http://127.0.0.1:9/charges?key={effect_id}&call={call_id}"}
  - {name: m, kind: mcp, url: "http://127.0.0.1:9/mcp", on_unknown: hold}
`), env())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": OnUnknownRetry, "b": OnUnknownHold, "c": OnUnknownLookup} {
		if tl, _ := r.Lookup(name); tl.OnUnknown != want {
			t.Errorf("%s: on_unknown %q, want %q", name, tl.OnUnknown, want)
		}
	}
	if got := r.up.entries[0].base.OnUnknown; got != OnUnknownHold {
		t.Errorf("mcp entry: on_unknown %q, want hold (copied into every imported tool)", got)
	}
	if tl, _ := Builtins().Lookup("charge"); tl.OnUnknown != "" {
		t.Errorf("builtin charge: on_unknown %q, want none (retry)", tl.OnUnknown)
	}
	// GET /v1/tools lists the policy, never the lookup's URL.
	listing, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(listing); !strings.Contains(s, `"name":"c",`) || !strings.Contains(s, `"on_unknown":"lookup"`) ||
		!strings.Contains(s, `"on_unknown":"hold"`) || strings.Contains(s, "/charges") ||
		strings.Count(s, `"on_unknown"`) != 3 {
		t.Errorf("listing %s: want on_unknown for the three http tools only, no lookup url", s)
	}
}

// TestParseOnUnknownErrors: every bad on_unknown or lookup is refused with
// a message naming the tool and the field.
func TestParseOnUnknownErrors(t *testing.T) {
	t.Parallel()
	const ok = `name: t, kind: http, url: "http://127.0.0.1:9/x"`
	const lk = `lookup: {url: "http://127.0.0.1:9/c/{effect_id}"`
	cases := []struct{ file, want string }{
		{`tools: [{` + ok + `, on_unknown: ask}]`, `tools[0] (t): on_unknown: must be one of retry, lookup, hold, got "ask"`},
		{`tools: [{` + ok + `, on_unknown: 1}]`, `tools[0] (t): on_unknown: must be one of retry, lookup, hold, got 1`},
		{`tools: [{` + ok + `, on_unknown: lookup}]`, `tools[0] (t): lookup: required with on_unknown: lookup`},
		{`tools: [{` + ok + `, lookup: 3}]`, `tools[0] (t): lookup: must be a mapping with url, method, found, not_found`},
		{`tools: [{` + ok + `, ` + lk + `, verb: GET}}]`, `tools[0] (t): lookup.verb: unknown field (allowed: url, method, found, not_found)`},
		{`tools: [{` + ok + `, lookup: {method: GET}}]`, `tools[0] (t): lookup.url: required, a string, got nothing`},
		{`tools: [{` + ok + `, lookup: {url: "http://127.0.0.1:9/c"}}]`, `tools[0] (t): lookup.url: must contain {effect_id} or {call_id}`},
		{`tools: [{` + ok + `, lookup: {url: "http://127.0.0.1:9/c/{id}"}}]`, `tools[0] (t): lookup.url: unknown placeholder {id}`},
		{`tools: [{` + ok + `, lookup: {url: "ftp://h/{call_id}"}}]`, `tools[0] (t): lookup.url: "ftp://h/c_0" must start with http:// or https://`},
		{`tools: [{` + ok + `, ` + lk + `, method: DELETE}}]`, `tools[0] (t): lookup.method: "DELETE" is not one of GET, HEAD, POST`},
		{`tools: [{` + ok + `, ` + lk + `, found: 200}}]`, `tools[0] (t): lookup.found: must be a list of HTTP statuses, got 200`},
		{`tools: [{` + ok + `, ` + lk + `, found: ["200"]}}]`, `tools[0] (t): lookup.found: "200" is not an HTTP status`},
		{`tools: [{` + ok + `, ` + lk + `, found: []}}]`, `tools[0] (t): lookup.found: must list at least one status`},
		{`tools: [{` + ok + `, ` + lk + `, not_found: [99]}}]`, `tools[0] (t): lookup.not_found: 99 is not an HTTP status`},
		{`tools: [{` + ok + `, ` + lk + `, found: [200, 404]}}]`, `tools[0] (t): lookup.not_found: 404 is also in found`},
		{`tools: [{name: m, kind: mcp, url: "http://127.0.0.1:9/mcp", on_unknown: lookup}]`, `tools[0] (m): on_unknown: an mcp entry cannot look up`},
		{`tools: [{name: m, kind: mcp, url: "http://127.0.0.1:9/mcp", ` + lk + `}}]`, `tools[0] (m): lookup: an mcp entry cannot look up`},
		{`tools: [{name: charge, kind: builtin, on_unknown: hold}]`, `tools[0] (charge): on_unknown: not allowed for a builtin tool`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file), env())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", c.file, err, c.want)
		}
	}
}

// TestLookupEffectRequest: the lookup asks the configured URL with the
// call's placeholders filled in, the tool's headers (secret resolved) and
// its key, and maps found / not_found / anything else.
func TestLookupEffectRequest(t *testing.T) {
	t.Parallel()
	var seen []*http.Request
	status := http.StatusOK
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Clone(context.Background()))
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"id":"ch_1","token":"` + secret + `"}`))
	}))
	defer ts.Close()
	r, err := Parse([]byte(`tools:
  - name: pay
    kind: http
    url: `+ts.URL+`/charges
    headers: {Authorization: "Bearer ${TOKEN}"}
    on_unknown: lookup
    lookup: {url: "`+ts.URL+`/charges?key={effect_id}&call={call_id}", found: [200, 203]}
`), env("TOKEN", secret))
	if err != nil {
		t.Fatal(err)
	}
	inv := tool.Invocation{CallID: "c_0123456789abcdef", Tool: "pay", Attempt: 2}
	eff := tool.EffectID(inv.CallID)
	ans, err := r.LookupEffect(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Method != http.MethodGet || seen[0].URL.Query().Get("key") != eff ||
		seen[0].URL.Query().Get("call") != inv.CallID || seen[0].Header.Get("Authorization") != "Bearer "+secret ||
		seen[0].Header.Get("Idempotency-Key") != eff {
		t.Fatalf("lookup request %+v", seen)
	}
	want := `{"status":200,"body":{"id":"ch_1","token":"[redacted]"},"effect_id":"` + eff + `"}`
	if ans.Verdict != tool.LookupFound || string(ans.Found.Result) != want || ans.Found.Effect == nil ||
		ans.Found.Effect.EffectID != eff || ans.Found.Effect.CallID != inv.CallID {
		t.Fatalf("found: %+v result %s", ans, ans.Found.Result)
	}
	for _, c := range []struct {
		status int
		want   tool.LookupVerdict
	}{{203, tool.LookupFound}, {404, tool.LookupNotFound}, {500, tool.LookupFailed}, {410, tool.LookupFailed}} {
		status = c.status
		ans, err := r.LookupEffect(context.Background(), inv)
		if err != nil || ans.Verdict != c.want || ans.Status != c.status || strings.Contains(ans.Detail, secret) {
			t.Errorf("status %d: %+v %v; want verdict %d", c.status, ans, err, c.want)
		}
	}
	ts.Close()
	ans, err = r.LookupEffect(context.Background(), inv)
	if err != nil || ans.Verdict != tool.LookupFailed || ans.Status != 0 || strings.Contains(ans.Detail, "127.0.0.1") {
		t.Errorf("downstream gone: %+v %v; want a failed lookup without the address", ans, err)
	}
	if _, err := r.LookupEffect(context.Background(), tool.Invocation{CallID: "c_1", Tool: "charge"}); err == nil {
		t.Error("a builtin has no lookup; want an error")
	}
}
