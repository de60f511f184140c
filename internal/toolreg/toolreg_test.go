package toolreg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func args(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := fingerprint.ParseJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	n, err := fingerprint.Normalize(v)
	if err != nil {
		t.Fatal(err)
	}
	return n.(map[string]any)
}

const refundYAML = `
tools:
  - name: create_refund
    kind: http
    url: %s
    headers: {Authorization: "Bearer ${REFUNDS_TOKEN}", X-Plain: plain}
    schema: {type: object, required: [amount], additionalProperties: false,
             properties: {amount: {type: integer, minimum: 1}, note: {type: string}}}
    timeout: 5s
    retry: {max_attempts: 5, initial_backoff: 200ms, max_backoff: 30s}
    concurrency: 16
    destructive: true
`

const secret = "s3cr3t-token-value"

func refundRegistry(t *testing.T, url string) *Registry {
	t.Helper()
	r, err := Parse([]byte(fmt.Sprintf(refundYAML, url)), env("REFUNDS_TOKEN", secret))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return r
}

func TestParseFields(t *testing.T) {
	r := refundRegistry(t, "http://127.0.0.1:9000/refunds")
	if got := strings.Join(r.Names(), ","); got != "charge,create_refund,fail,send_email,sleep" {
		t.Fatalf("names %s", got)
	}
	tool, _ := r.Lookup("create_refund")
	want := Retry{MaxAttempts: 5, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 30 * time.Second}
	if tool.Kind != KindHTTP || !tool.Effect || tool.Timeout != 5*time.Second || tool.Retry != want ||
		tool.Concurrency != 16 || tool.Method != "POST" || tool.Destructive == nil || !*tool.Destructive {
		t.Fatalf("tool %+v", tool)
	}
	// Defaults of an http tool with only what it needs.
	r2, err := Parse([]byte(`{"tools": [{"name": "t", "kind": "http", "url": "https://x.test/a", "effect": false}]}`), env())
	if err != nil {
		t.Fatal(err)
	}
	d, _ := r2.Lookup("t")
	if d.Timeout != defaultHTTPTimeout || d.Retry.MaxAttempts != 1 || d.Effect || d.Concurrency != 0 ||
		string(d.Schema()) != `{"type":"object"}` {
		t.Fatalf("defaults %+v schema %s", d, d.Schema())
	}
	// A builtin entry tunes the policy, keeps the rest.
	r3, err := Parse([]byte("tools:\n- {name: fail, kind: builtin, concurrency: 2, retry: {max_attempts: 3}}\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	f, _ := r3.Lookup("fail")
	if f.Concurrency != 2 || f.Retry.MaxAttempts != 3 || f.Kind != KindBuiltin {
		t.Fatalf("builtin override %+v", f)
	}
	if b, _ := Builtins().Lookup("fail"); b.Retry.MaxAttempts != 1 || b.Concurrency != 0 {
		t.Fatalf("override leaked into Builtins: %+v", b)
	}
}

// TestParseErrors: every bad file is refused with a message naming the tool
// and the field.
func TestParseErrors(t *testing.T) {
	const ok = `name: t, kind: http, url: "http://127.0.0.1:9/x"`
	cases := []struct{ file, want string }{
		{`tools: [{` + ok + `, timeout: abc}]`, `tools[0] (t): timeout: "abc" is not a duration`},
		{`tools: [{` + ok + `}, {` + ok + `}]`, `tools[1] (t): name: declared twice`},
		{`tools: [{` + ok + `, timeout: 10}]`, `tools[0] (t): timeout: 10 is not a duration`},
		{`tools: [{` + ok + `, timeout: 0s}]`, `tools[0] (t): timeout: "0s" must be above 0`},
		{`tools: [{` + ok + `, timout: 1s}]`, `tools[0] (t): timout: unknown field`},
		{`tools: [{` + ok + `, retry: {max_attempts: 0}}]`, `tools[0] (t): retry.max_attempts: must be an integer from 1 to 100, got 0`},
		{`tools: [{` + ok + `, retry: {tries: 2}}]`, `tools[0] (t): retry.tries: unknown field`},
		{`tools: [{` + ok + `, retry: {initial_backoff: 2s, max_backoff: 1s}}]`, `tools[0] (t): retry.max_backoff: 1s is shorter than initial_backoff 2s`},
		{`tools: [{` + ok + `, concurrency: -1}]`, `tools[0] (t): concurrency: must be an integer >= 0`},
		{`tools: [{` + ok + `, effect: "yes"}]`, `tools[0] (t): effect: must be true or false, got "yes"`},
		{`tools: [{` + ok + `, method: GET}]`, `tools[0] (t): method: "GET" is not one of POST, PUT, PATCH, DELETE`},
		{`tools: [{` + ok + `, schema: {type: objekt}}]`, `tools[0] (t): schema: not a valid JSON Schema: at /type: got string, want array; value must be one of`},
		{`tools: [{` + ok + `, schema: {properties: {a: {minimum: "1"}}}}]`, `tools[0] (t): schema: not a valid JSON Schema: at /properties/a/minimum: got string, want number`},
		{`tools: [{` + ok + `, schema: {$ref: "file:///etc/passwd"}}]`, `tools[0] (t): schema: failing loading "file:///etc/passwd": file:///etc/passwd: schemas must be self-contained`},
		{`tools: [{` + ok + `, schema: 3}]`, `tools[0] (t): schema: must be an object`},
		{`tools: [{` + ok + `, headers: {Authorization: "Bearer ${NOPE}"}}]`, `tools[0] (t): headers.Authorization: environment variable NOPE is not set`},
		{`tools: [{` + ok + `, headers: {Idempotency-Key: x}}]`, `tools[0] (t): headers.Idempotency-Key: idemctl sets this header itself`},
		{`tools: [{` + ok + `, headers: {X-N: 5}}]`, `tools[0] (t): headers.X-N: must be a string, got a int`},
		{`tools: [{name: t, kind: http}]`, `tools[0] (t): url: required for an http tool`},
		{`tools: [{` + ok + `, principals: []}]`, `tools[0] (t): principals: must be a non-empty list of principal names`},
		{`tools: [{` + ok + `, principals: alice}]`, `tools[0] (t): principals: must be a non-empty list`},
		{`tools: [{` + ok + `, principals: [alice, 7]}]`, `tools[0] (t): principals: 7 is not a principal name`},
		{`tools: [{` + ok + `, principals: [""]}]`, `tools[0] (t): principals: "" is not a principal name`},
		{`tools: [{name: t, kind: http, url: "ftp://x/y"}]`, `tools[0] (t): url: "ftp://x/y" must start with http:// or https://`},
		{`tools: [{name: t, kind: http, url: "http://u:pw@x/y"}]`, `tools[0] (t): url: must not contain credentials`},
		{`tools: [{name: t, kind: grpc}]`, `tools[0] (t): kind: required, one of http, mcp, builtin; got "grpc"`},
		{`tools: [{kind: http}]`, `tools[0]: name: required`},
		{`tools: [{name: "a b", kind: http}]`, `tools[0]: name: "a b" must be 1 to 64`},
		{`tools: [{name: charge, kind: http, url: "http://x/"}]`, `tools[0] (charge): name: "charge" is a built-in tool; declare it with kind: builtin`},
		{`tools: [{name: refund, kind: builtin}]`, `tools[0] (refund): name: "refund" is not a built-in tool`},
		{`tools: [{name: charge, kind: builtin, url: "http://x/"}]`, `tools[0] (charge): url: not allowed for a builtin tool`},
		{`tools: [{name: charge, kind: builtin, schema: {}}]`, `tools[0] (charge): schema: not allowed for a builtin tool`},
		{`tool: []`, `unknown key "tool"`},
		{`tools: {}`, `tools: must be a list`},
		{`tools: [{` + ok + `, ok: 1, ok: 2}]`, `not valid YAML or JSON`},
		{`[1]`, `must be a mapping`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file), env())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", c.file, err, c.want)
		}
	}
}

// TestSecretsNeverShown: the expanded header value is on the wire, and
// nowhere else: not in fmt output of the registry or tool, not in its JSON,
// not in a log line, not in a load error.
func TestSecretsNeverShown(t *testing.T) {
	var gotAuth string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		fmt.Fprint(w, `{}`)
	}))
	defer ts.Close()
	r := refundRegistry(t, ts.URL)
	rt, _ := r.Lookup("create_refund")

	var logBuf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logBuf, nil))
	log.Info("registry", "r", r, "tool", rt, "runner", rt.runner)
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	shown := []string{fmt.Sprint(r), fmt.Sprintf("%+v %#v", r, r), fmt.Sprintf("%+v %#v %v", rt, rt, rt),
		fmt.Sprintf("%+v %#v %v %+v %#v", rt.runner, rt.runner, *rt, *rt, *rt), string(js), logBuf.String()}
	for _, s := range shown {
		if strings.Contains(s, secret) {
			t.Fatalf("secret shown in %s", s)
		}
	}
	// A load error about a header quotes neither the value nor the secret.
	_, err = Parse([]byte(`tools: [{name: t, kind: http, url: "http://x/", headers: {X-A: "${T}\n"}}]`), env("T", secret))
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "headers.X-A") {
		t.Fatalf("header error %v", err)
	}
	// And on the wire it is there, expanded.
	out, err := r.Run(context.Background(), tool.Invocation{CallID: "c_0000000000000001", Tool: "create_refund",
		Args: args(t, `{"amount": 1}`), Attempt: 1})
	if err != nil || out.Err != nil {
		t.Fatalf("run: %v %+v", err, out.Err)
	}
	if gotAuth != "Bearer "+secret {
		t.Fatalf("Authorization on the wire %q", gotAuth)
	}
}

// TestValidateSchema: http tools are checked by their schema; the error
// names the failing JSON Pointer; chaos args follow the built-in rules.
func TestValidateSchema(t *testing.T) {
	r := refundRegistry(t, "http://127.0.0.1:9/refunds")
	cases := []struct {
		tool, args string
		chaos      bool
		want       error
		msg        string
	}{
		{"create_refund", `{"amount": 5}`, false, nil, ""},
		{"create_refund", `{"amount": 5, "note": "x"}`, false, nil, ""},
		{"create_refund", `{"amount": 5.0}`, false, nil, ""},
		{"create_refund", `{}`, false, tool.ErrInvalidArgs, "create_refund: at /args: missing property 'amount'"},
		{"create_refund", `{"amount": "5"}`, false, tool.ErrInvalidArgs, "at /args/amount: got string, want integer"},
		{"create_refund", `{"amount": 0}`, false, tool.ErrInvalidArgs, "at /args/amount: minimum"},
		{"create_refund", `{"amount": 1.5}`, false, tool.ErrInvalidArgs, "at /args/amount:"},
		{"create_refund", `{"amount": 1, "x": 1}`, false, tool.ErrInvalidArgs, "at /args: additional properties 'x' not allowed"},
		{"create_refund", `{"amount": 1, "note": 3}`, false, tool.ErrInvalidArgs, "at /args/note: got number, want string"},
		{"create_refund", `{"amount": 1, "_crash_before_commit": true}`, false, tool.ErrInvalidArgs, "reserved for chaos hooks"},
		{"create_refund", `{"amount": 1, "_crash_before_commit": true}`, true, nil, ""},
		{"create_refund", `{"amount": 1, "_pause_before_commit": 0}`, true, tool.ErrInvalidArgs, "_pause_before_commit must be a number"},
		{"refund", `{}`, false, tool.ErrUnknownTool, `unknown tool "refund" (known tools: charge, create_refund, fail, send_email, sleep)`},
		{"charge", `{"amount": 0}`, false, tool.ErrInvalidArgs, "amount must be an integer from 1 to"},
	}
	for _, c := range cases {
		err := r.Validate(c.tool, args(t, c.args), c.chaos)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s %s: %v", c.tool, c.args, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %s: got %v, want %v …%s…", c.tool, c.args, err, c.want, c.msg)
		}
	}
}

// TestBuiltinsAsToday: without a file the built-ins validate exactly as
// builtin.Validate does, message for message.
func TestBuiltinsAsToday(t *testing.T) {
	r := Builtins()
	if strings.Join(r.Names(), ",") != strings.Join(builtin.Names(), ",") {
		t.Fatalf("names %v", r.Names())
	}
	for _, c := range builtinCases {
		for _, chaos := range []bool{false, true} {
			a := args(t, c.args)
			got, want := r.Validate(c.tool, a, chaos), builtin.Validate(c.tool, a, chaos)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s %s chaos=%v: registry %v, tools %v", c.tool, c.args, chaos, got, want)
			}
		}
	}
}

var builtinCases = []struct{ tool, args string }{
	{"charge", `{"amount": 1}`}, {"charge", `{"amount": 1.0}`}, {"charge", `{"amount": 1000000000000}`},
	{"charge", `{"amount": 1000000000001}`}, {"charge", `{"amount": 0}`}, {"charge", `{"amount": "1"}`},
	{"charge", `{}`}, {"charge", `{"amount": 1, "x": 1}`}, {"charge", `{"amount": 1.5}`},
	{"send_email", `{"to": "a@b"}`}, {"send_email", `{"to": ""}`}, {"send_email", `{"to": 1}`},
	{"send_email", `{"to": "a", "subject": "s", "body": "b"}`}, {"send_email", `{"to": "a", "subject": 1}`},
	{"send_email", `{}`}, {"send_email", `{"to": "a", "cc": "b"}`},
	{"sleep", `{"seconds": 0}`}, {"sleep", `{"seconds": 10}`}, {"sleep", `{"seconds": 10.5}`},
	{"sleep", `{"seconds": -1}`}, {"sleep", `{}`}, {"sleep", `{"seconds": "1"}`},
	{"fail", `{}`}, {"fail", `{"retryable": false, "times": 2, "message": "m"}`}, {"fail", `{"times": -1}`},
	{"fail", `{"times": 1.5}`}, {"fail", `{"retryable": "no"}`}, {"fail", `{"message": 1}`}, {"fail", `{"count": 1}`},
	{"charge", `{"amount": 1, "_crash_before_commit": true}`}, {"charge", `{"amount": 1, "_pause_before_commit": 11}`},
}

// TestBuiltinSchemasAgree: the schema GET /v1/tools publishes for a
// built-in accepts exactly what builtin.Validate accepts (chaos args aside),
// except the one rule a schema cannot say: a send_email "to" of only
// whitespace (the schema's pattern \S catches it, so that one agrees too).
func TestBuiltinSchemasAgree(t *testing.T) {
	r := Builtins()
	for _, c := range builtinCases {
		a := args(t, c.args)
		tool, _ := r.Lookup(c.tool)
		if strings.Contains(c.args, `"_`) {
			continue
		}
		schemaOK := tool.schema.Validate(a) == nil
		validateOK := builtin.Validate(c.tool, a, false) == nil
		if schemaOK != validateOK {
			t.Errorf("%s %s: schema accepts=%v, builtin.Validate accepts=%v", c.tool, c.args, schemaOK, validateOK)
		}
	}
	for _, blank := range []string{`{"to": " "}`, `{"to": "\t\n"}`} {
		tool, _ := r.Lookup("send_email")
		if tool.schema.Validate(args(t, blank)) == nil {
			t.Errorf("send_email schema accepts %s", blank)
		}
	}
}

// TestListing: the public description has the schema and policy, and no URL.
func TestListing(t *testing.T) {
	r := refundRegistry(t, "http://127.0.0.1:9/internal-only")
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Tools) != 5 || got.Tools[1]["name"] != "create_refund" {
		t.Fatalf("listing %s", js)
	}
	cr := got.Tools[1]
	if cr["kind"] != "http" || cr["method"] != "POST" || cr["timeout"] != "5s" || cr["concurrency"] != float64(16) ||
		cr["schema"] == nil || cr["destructive"] != true {
		t.Fatalf("create_refund listed as %v", cr)
	}
	if strings.Contains(string(js), "internal-only") || strings.Contains(string(js), "Authorization") {
		t.Fatalf("listing shows the URL or headers: %s", js)
	}
}

// TestLoad reads a JSON file from disk, and names the file in errors.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/tools.json"
	writeFile(t, good, `{"tools": [{"name": "t", "kind": "http", "url": "http://127.0.0.1:9/x"}]}`)
	r, err := Load(good, env())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("t"); !ok {
		t.Fatal("t not loaded")
	}
	bad := dir + "/bad.yaml"
	writeFile(t, bad, "tools:\n- {name: t, kind: http, url: 'http://x/', timeout: abc}\n")
	if _, err := Load(bad, env()); err == nil || !strings.Contains(err.Error(), "bad.yaml: tools[0] (t): timeout:") {
		t.Fatalf("Load error %v", err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestParseDedup: a dedup rule is read (args sorted, repeats dropped),
// listed, and every bad one is refused naming the tool and the field.
func TestParseDedup(t *testing.T) {
	r, err := Parse([]byte(`tools:
  - {name: charge, kind: builtin, dedup: {args: [amount], window: 10m}}
  - name: pay
    kind: http
    url: "http://127.0.0.1:9/x"
    schema: {type: object, properties: {to: {type: string}, amount: {type: integer}, note: {type: string}}}
    dedup: {args: [to, amount, to], window: 90s}
`), env())
	if err != nil {
		t.Fatal(err)
	}
	pay, _ := r.Lookup("pay")
	if pay.Dedup == nil || strings.Join(pay.Dedup.Args, ",") != "amount,to" || pay.Dedup.Window != 90*time.Second {
		t.Fatalf("pay dedup %+v", pay.Dedup)
	}
	charge, _ := r.Lookup("charge")
	if charge.Dedup == nil || strings.Join(charge.Dedup.Args, ",") != "amount" || charge.Dedup.Window != 10*time.Minute {
		t.Fatalf("charge dedup %+v", charge.Dedup)
	}
	if sleep, _ := r.Lookup("sleep"); sleep.Dedup != nil {
		t.Fatalf("sleep has a dedup rule without one declared: %+v", sleep.Dedup)
	}
	js, err := json.Marshal(pay)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"dedup":{"args":["amount","to"],"window":"1m30s"}`) {
		t.Fatalf("listing %s", js)
	}

	const ok = `name: t, kind: http, url: "http://127.0.0.1:9/x", schema: {properties: {a: {}, b: {}}}`
	cases := []struct{ file, want string }{
		{`tools: [{` + ok + `, dedup: {args: [a], window: 10m, scope: x}}]`, `tools[0] (t): dedup.scope: unknown field (allowed: args, window)`},
		{`tools: [{` + ok + `, dedup: {args: [], window: 10m}}]`, `tools[0] (t): dedup.args: required, a non-empty list`},
		{`tools: [{` + ok + `, dedup: {window: 10m}}]`, `tools[0] (t): dedup.args: required`},
		{`tools: [{` + ok + `, dedup: {args: [c], window: 10m}}]`, `tools[0] (t): dedup.args: "c" is not a top-level property of the tool's schema (properties: a, b)`},
		{`tools: [{` + ok + `, dedup: {args: [3], window: 10m}}]`, `tools[0] (t): dedup.args: 3 is not an argument name`},
		{`tools: [{` + ok + `, dedup: {args: [a]}}]`, `tools[0] (t): dedup.window: required`},
		{`tools: [{` + ok + `, dedup: {args: [a], window: 0s}}]`, `tools[0] (t): dedup.window: "0s" must be above 0 and at most 24h0m0s`},
		{`tools: [{` + ok + `, dedup: {args: [a], window: -1m}}]`, `tools[0] (t): dedup.window: "-1m" must be above 0`},
		{`tools: [{` + ok + `, dedup: {args: [a], window: 25h}}]`, `tools[0] (t): dedup.window: "25h" must be above 0 and at most 24h0m0s`},
		{`tools: [{` + ok + `, dedup: {args: [a], window: 10}}]`, `tools[0] (t): dedup.window: 10 is not a duration`},
		{`tools: [{` + ok + `, dedup: [a]}]`, `tools[0] (t): dedup: must be a mapping with args and window`},
		{`tools: [{name: sleep, kind: builtin, dedup: {args: [amount], window: 1m}}]`, `tools[0] (sleep): dedup.args: "amount" is not a top-level property of the tool's schema (properties: seconds)`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file), env())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", c.file, err, c.want)
		}
	}
}

// TestBuiltinTimeout: a built-in tool's timeout from the tools file bounds
// its attempt: a sleep longer than it fails with tool_timeout (retryable),
// a shorter one succeeds, and a cancel by the caller stays the caller's
// (an error, no outcome to record).
func TestBuiltinTimeout(t *testing.T) {
	r, err := Parse([]byte("tools:\n  - {name: sleep, kind: builtin, timeout: 50ms}\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, seconds string) (tool.Outcome, error) {
		return r.Run(ctx, tool.Invocation{CallID: "c_1", Tool: "sleep", Args: args(t, `{"seconds": `+seconds+`}`), Attempt: 1})
	}
	out, err := run(context.Background(), "10")
	if err != nil {
		t.Fatalf("sleep past the timeout: error %v, want a failed outcome", err)
	}
	if out.Err == nil || out.Err.Code != errorCodeToolTimeout || !out.Err.Retryable {
		t.Fatalf("sleep past the timeout: outcome %+v, want a retryable %s", out, errorCodeToolTimeout)
	}
	if out, err := run(context.Background(), "0.001"); err != nil || out.Err != nil {
		t.Fatalf("sleep within the timeout: outcome %+v, error %v, want success", out, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out, err := run(ctx, "10"); err == nil || out.Err != nil {
		t.Fatalf("cancelled by the caller: outcome %+v, error %v, want the caller's error", out, err)
	}
	// Without a timeout a built-in is not bounded: the built-ins registry.
	if tl, _ := Builtins().Lookup("sleep"); tl.Timeout != 0 {
		t.Fatalf("built-in sleep has a default timeout %v, want none", tl.Timeout)
	}
}

// TestParseShapes: the file is read as YAML reads it, into the typed
// shapes, and refused field by field as the map it is: a key present with
// a null value is a wrong value (not an absent key), a null list item is
// refused under its own index (the items after it keep theirs), a merge key
// (<<) brings its fields in, unknown ones included, and a mapping keyed by
// numbers is not a mapping.
func TestParseShapes(t *testing.T) {
	const ok = `name: t, kind: http, url: "http://127.0.0.1:9/x"`
	cases := []struct{ file, want string }{
		{`tools: [{` + ok + `, timeout: ~}]`, `tools[0] (t): timeout: nothing is not a duration`},
		{`tools: [{` + ok + `, description: ~}]`, `tools[0] (t): description: must be a string, got nothing`},
		{`tools: [{` + ok + `, retry: ~}]`, `tools[0] (t): retry: must be a mapping with max_attempts, initial_backoff, max_backoff`},
		{`tools: [{` + ok + `, retry: {max_backoff: ~}}]`, `tools[0] (t): retry.max_backoff: nothing is not a duration`},
		{`tools: [{` + ok + `, schema: {properties: {a: {}}}, dedup: {args: [a], window: ~}}]`, `tools[0] (t): dedup.window: nothing is not a duration`},
		{`tools: [{name: t, kind: http, url: ~}]`, `tools[0] (t): url: must be a string, got nothing`},
		{`tools: [~, {` + ok + `, timeout: 0s}]`, "tools[0]: must be a mapping\ntools[1] (t): timeout: \"0s\" must be above 0"},
		{`tools: [{1: a}]`, `tools[0]: must be a mapping`},
		{"base: &b {timeout: 1s}\ntools: [{<<: *b, " + ok + "}]", `unknown key "base"`},
		{`tools: [{<<: {bogus: 1}, ` + ok + `}]`, `tools[0] (t): bogus: unknown field`},
		{`tools: [{<<: {url: "http://x/"}, name: charge, kind: builtin}]`, `tools[0] (charge): url: not allowed for a builtin tool`},
		{`tools: [{` + ok + `, retry: {tries: 1, max_attempts: 0}}]`, `tools[0] (t): retry.max_attempts: must be an integer from 1 to 100, got 0`},
		{`tools: [{` + ok + `, retry: {a: 1, max_attempts: 0}}]`, `tools[0] (t): retry.a: unknown field (allowed: max_attempts, initial_backoff, max_backoff)`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file), env())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", c.file, err, c.want)
		}
	}
	// A merge key brings a shared policy in, as YAML means it to.
	r, err := Parse([]byte("tools:\n- &a {name: a, kind: http, url: \"http://127.0.0.1:9/a\", timeout: 3s, retry: {max_attempts: 4}}\n- {<<: *a, name: b}\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := r.Lookup("b"); b.Timeout != 3*time.Second || b.Retry.MaxAttempts != 4 {
		t.Fatalf("merged tool %+v", b)
	}
}
