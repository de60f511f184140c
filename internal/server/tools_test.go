package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/wire"

	"github.com/idemctl/idemctl/internal/toolreg"
)

const toolsFileSecret = "tok-3b1c9e"

func refundTools(t *testing.T) *toolreg.Registry {
	t.Helper()
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: create_refund
    kind: http
    url: http://127.0.0.1:9/refunds
    headers: {Authorization: "Bearer ${TOKEN}"}
    schema: {type: object, required: [amount], additionalProperties: false,
             properties: {amount: {type: integer, minimum: 1}}}
`), func(k string) (string, bool) { return toolsFileSecret, k == "TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestRegistryValidationAtAccept: a call to a registry tool is checked by
// its schema before anything is stored; a refusal is 400 bad_request naming
// the failing JSON Pointer.
func TestRegistryValidationAtAccept(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Tools = refundTools(t) })
	cases := []struct{ name, body, msg string }{
		{"missing", `{"tool":"create_refund","args":{}}`, "at /args: missing property 'amount'"},
		{"wrong type", `{"tool":"create_refund","args":{"amount":"1"}}`, "at /args/amount: got string, want integer"},
		{"too small", `{"tool":"create_refund","args":{"amount":0}}`, "at /args/amount: minimum"},
		{"extra", `{"tool":"create_refund","args":{"amount":1,"x":2}}`, "at /args: additional properties 'x' not allowed"},
		{"chaos without --chaos", `{"tool":"create_refund","args":{"amount":1,"_crash_before_commit":true}}`, "reserved for chaos hooks"},
		{"unknown tool", `{"tool":"refund","args":{}}`, `unknown tool "refund" (known: charge, create_refund, fail, send_email, sleep)`},
		{"built-in as today", `{"tool":"charge","args":{"amount":0}}`, "charge: amount must be an integer from 1 to"},
	}
	before := b.snapshot()
	for _, c := range cases {
		r := b.post("k-"+strings.ReplaceAll(c.name, " ", "-"), c.body)
		var e wire.Error
		_ = json.Unmarshal(r.body, &e)
		if r.status != 400 || e.Error.Code != wire.CodeBadRequest || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%s: %d %s, want 400 bad_request …%s…", c.name, r.status, r.body, c.msg)
		}
	}
	if after := b.snapshot(); !before.equal(after) {
		t.Fatalf("a refused request changed the database")
	}
	if r := b.post("k-ok", `{"tool":"create_refund","args":{"amount":3}}`); r.status != 201 && r.status != 202 {
		t.Fatalf("valid call: %d %s", r.status, r.body)
	}
}

// TestToolsListing: GET /v1/tools lists every tool with its schema and no
// secret, URL or header.
func TestToolsListing(t *testing.T) {
	t.Parallel()
	for _, withFile := range []bool{false, true} {
		b := setup(t, func(c *Config) {
			if withFile {
				c.Tools = refundTools(t)
			}
		})
		r := b.get("/v1/tools")
		var got struct {
			Tools []struct {
				Name   string          `json:"name"`
				Kind   string          `json:"kind"`
				Schema json.RawMessage `json:"schema"`
			} `json:"tools"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("GET /v1/tools: %d %s", r.status, r.body)
		}
		var names []string
		for _, tl := range got.Tools {
			names = append(names, tl.Name+":"+tl.Kind)
			if len(tl.Schema) == 0 {
				t.Errorf("%s has no schema", tl.Name)
			}
		}
		want := "charge:builtin,fail:builtin,send_email:builtin,sleep:builtin"
		if withFile {
			want = "charge:builtin,create_refund:http,fail:builtin,send_email:builtin,sleep:builtin"
		}
		if strings.Join(names, ",") != want {
			t.Errorf("listed %v, want %s", names, want)
		}
		for _, leak := range []string{toolsFileSecret, "127.0.0.1:9", "Authorization"} {
			if strings.Contains(string(r.body), leak) {
				t.Errorf("listing shows %q: %s", leak, r.body)
			}
		}
	}
}

// TestHTTPToolEndToEnd: a call to an http tool from the registry runs
// through the executor against the demo downstream: one charge in the
// downstream's ledger, carrying the call's effect_id as its
// Idempotency-Key, and the call succeeded with that effect and the
// downstream's answer as its result.
func TestHTTPToolEndToEnd(t *testing.T) {
	t.Parallel()
	ds := downstream.New(false)
	dsrv := httptest.NewServer(ds.Handler())
	t.Cleanup(dsrv.Close)
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: create_refund
    kind: http
    url: `+dsrv.URL+`/refunds
    schema: {type: object, required: [amount], properties: {amount: {type: integer, minimum: 1}}}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	call := b.post("refund-1", `{"tool":"create_refund","args":{"amount":7}}`).call(t)
	done := b.waitFinal(call.CallID)
	if done.Status != "succeeded" || done.EffectID == nil {
		t.Fatalf("http tool call = %s effect %v error %s, want succeeded with an effect", done.Status, done.EffectID, done.Error)
	}
	var res struct {
		Status   int             `json:"status"`
		Body     json.RawMessage `json:"body"`
		EffectID string          `json:"effect_id"`
	}
	if err := json.Unmarshal(done.Result, &res); err != nil || res.Status != 201 || res.EffectID != *done.EffectID {
		t.Fatalf("result %s (%v), want status 201 and effect_id %s", done.Result, err, *done.EffectID)
	}
	ledger := ds.Ledger()
	if len(ledger) != 1 || ledger[0].Key != *done.EffectID {
		t.Fatalf("downstream ledger = %+v, want one charge under key %s", ledger, *done.EffectID)
	}
	// A same-key replay runs nothing downstream.
	if again := b.post("refund-1", `{"tool":"create_refund","args":{"amount":7}}`).call(t); again.CallID != call.CallID {
		t.Fatalf("replay answered call %s, want %s", again.CallID, call.CallID)
	}
	if n := len(ds.Ledger()); n != 1 {
		t.Fatalf("ledger after a replay has %d charges, want 1", n)
	}
}

// TestHTTPToolServerSideRetry: the retry policy of a tools file reaches the
// executor: a downstream that answers 503 twice, then 201, ends the call
// succeeded at attempt 3, every attempt carrying the same Idempotency-Key.
func TestHTTPToolServerSideRetry(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	dsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	t.Cleanup(dsrv.Close)
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: flaky_charge
    kind: http
    url: `+dsrv.URL+`/charges
    retry: {max_attempts: 3, initial_backoff: 10ms, max_backoff: 20ms}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	call := b.post("flaky-1", `{"tool":"flaky_charge","args":{}}`).call(t)
	done := b.waitFinal(call.CallID)
	if done.Status != "succeeded" || done.Attempt != 3 || done.EffectID == nil {
		t.Fatalf("call = %s at attempt %d (error %s), want succeeded at attempt 3 with an effect", done.Status, done.Attempt, done.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 3 || keys[0] != *done.EffectID || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("Idempotency-Keys on the wire = %v, want the effect id %s three times", keys, *done.EffectID)
	}
}
