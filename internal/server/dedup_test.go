package server

import (
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// dedupTools gives charge an intent-deduplication rule on its amount.
func dedupTools(t *testing.T) *toolreg.Registry {
	t.Helper()
	reg, err := toolreg.Parse([]byte(`
tools:
  - {name: charge, kind: builtin, dedup: {args: [amount], window: 10m}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestIntentDedupHTTP: with a dedup rule, a new key with the same intent
// is answered with the first call (as a replay, Idemctl-Deduplicated-By:
// intent), counted and audited; the new key then replays or conflicts as
// a key of its own; other args are another call; a tool without a rule is
// as before.
func TestIntentDedupHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Tools = dedupTools(t) })
	first := b.post("k1", `{"tool":"charge","args":{"amount":5}}`)
	if first.status != http.StatusAccepted && first.status != http.StatusOK {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if first.header.Get(wire.HeaderDeduplicatedBy) != "" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first call answered as a replay: %v", first.header)
	}
	id := first.call(t).CallID
	b.waitFinal(id)

	dup := b.post("k2", `{"tool":"charge","args":{"amount":5}}`)
	if dup.status != http.StatusOK || dup.call(t).CallID != id ||
		dup.header.Get("Idempotent-Replayed") != "true" || dup.header.Get(wire.HeaderDeduplicatedBy) != "intent" {
		t.Fatalf("same intent, new key: %d %v %s; want 200, the first call, replayed, deduplicated by intent",
			dup.status, dup.header, dup.body)
	}
	if got := b.metricValue(`idemctl_calls_total{outcome="deduplicated"}`); got != 1 {
		t.Fatalf("deduplicated metric = %v, want 1", got)
	}
	if evs := b.events(id); !contains(evs, "deduplicated") {
		t.Fatalf("audit %v, want a deduplicated event", evs)
	}

	// The alias key replays (a plain replay: no dedup header) and reads.
	again := b.post("k2", `{"tool":"charge","args":{"amount":5}}`)
	if again.status != http.StatusOK || again.call(t).CallID != id || again.header.Get("Idempotent-Replayed") != "true" ||
		again.header.Get(wire.HeaderDeduplicatedBy) != "" {
		t.Fatalf("alias key replay: %d %v %s", again.status, again.header, again.body)
	}
	if r := b.get("/v1/tool-calls/by-key/k2"); r.status != http.StatusOK || r.call(t).CallID != id {
		t.Fatalf("GET by alias key: %d %s", r.status, r.body)
	}
	// The alias key with other args: 409 as for a real key.
	if r := b.post("k2", `{"tool":"charge","args":{"amount":6}}`); r.status != http.StatusConflict || r.errCode(t) != wire.CodeIdempotencyConflict {
		t.Fatalf("alias key, other args: %d %s, want 409 conflict", r.status, r.body)
	}
	// Other args: a new call.
	other := b.post("k3", `{"tool":"charge","args":{"amount":6}}`)
	if other.header.Get(wire.HeaderDeduplicatedBy) != "" || other.call(t).CallID == id {
		t.Fatalf("other args deduplicated: %v %s", other.header, other.body)
	}
	b.waitFinal(other.call(t).CallID)
	if st := b.stats(); st.Calls != 2 || st.Effects != 2 {
		t.Fatalf("calls=%d effects=%d, want 2 and 2", st.Calls, st.Effects)
	}
	// A tool without a rule: a new key is a new call, as before.
	s1 := b.post("s1", `{"tool":"sleep","args":{"seconds":0}}`)
	s2 := b.post("s2", `{"tool":"sleep","args":{"seconds":0}}`)
	if s1.call(t).CallID == s2.call(t).CallID || s2.header.Get(wire.HeaderDeduplicatedBy) != "" {
		t.Fatalf("sleep without a rule deduplicated: %s %s", s1.body, s2.body)
	}
}

// TestIntentDedupMCP: a key-less tools/call of a tool with effects and a
// dedup rule runs (under a fresh key), and a second one with the same
// args is the same call, one effect; without a rule it is refused
// (TestMCPNoKeyOnEffectToolRefused).
func TestIntentDedupMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Tools = dedupTools(t) })
	cs := mustMCP(t, b, "")
	r1 := callTool(t, cs, "charge", map[string]any{"amount": 9}, nil)
	r2 := callTool(t, cs, "charge", map[string]any{"amount": 9}, nil)
	for i, r := range []*mcp.CallToolResult{r1, r2} {
		if r.IsError {
			t.Fatalf("key-less call %d: error %v", i+1, structured(t, r))
		}
	}
	if r1.Meta["io.idemctl/call-id"] != r2.Meta["io.idemctl/call-id"] {
		t.Fatalf("two calls for one intent: %v and %v", r1.Meta["io.idemctl/call-id"], r2.Meta["io.idemctl/call-id"])
	}
	if r1.Meta["io.idemctl/replayed"] != false || r2.Meta["io.idemctl/replayed"] != true {
		t.Fatalf("replayed = %v then %v, want false then true", r1.Meta["io.idemctl/replayed"], r2.Meta["io.idemctl/replayed"])
	}
	b.waitFinal(r1.Meta["io.idemctl/call-id"].(string))
	if st := b.stats(); st.Calls != 1 || st.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", st.Calls, st.Effects)
	}
	// A tool with effects and no rule still needs a key.
	if typ := errType(t, callTool(t, cs, "send_email", map[string]any{"to": "a@b.test"}, nil)); typ != mcpdoor.TypeKeyRequired {
		t.Fatalf("send_email without key: type %q, want %s", typ, mcpdoor.TypeKeyRequired)
	}
}
