package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestBadInputStoresNothing walks every refusal of docs/api.md, "Submitting
// a call": status, code, and the database unchanged (a refused request
// stores nothing). Requests go
// straight to the handler, so header bytes a Go client refuses to send
// (control characters) can be tested too.
func TestBadInputStoresNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A known key in the database, so refusals are also checked against it.
	existing := b.post("existing", `{"tool":"charge","args":{"amount":5}}`).call(t)
	b.waitFinal(existing.CallID)

	ok := `{"tool":"charge","args":{"amount":1}}`
	big := `{"tool":"charge","args":{"amount":1},"client_id":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	const (
		noKey = "\x00none" // marker: send no Idempotency-Key header
	)
	cases := []struct {
		name    string
		method  string
		path    string
		key     string
		body    string
		chunked bool // no Content-Length: the limit must hold while reading
		status  int
		code    string
	}{
		{name: "no key", key: noKey, body: ok, status: 400, code: wire.CodeMissingIdempotencyKey},
		{name: "empty key", key: "", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key 256 chars", key: strings.Repeat("k", 256), body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key with space", key: "a b", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key with tab", key: "a\tb", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key with control char", key: "a\x01b", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key with DEL", key: "a\x7fb", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key non-ASCII", key: "ключ", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "key Latin-1 byte", key: "caf\xe9", body: ok, status: 400, code: wire.CodeBadRequest},
		{name: "bad JSON", body: `{"tool":`, status: 400, code: wire.CodeBadRequest},
		{name: "not JSON", body: `charge 100`, status: 400, code: wire.CodeBadRequest},
		{name: "empty body", body: ``, status: 400, code: wire.CodeBadRequest},
		{name: "invalid UTF-8", body: "{\"tool\":\"charge\",\"args\":{\"amount\":1},\"client_id\":\"\xff\"}", status: 400, code: wire.CodeBadRequest},
		{name: "trailing data", body: ok + ` {}`, status: 400, code: wire.CodeBadRequest},
		{name: "trailing garbage", body: ok + `x`, status: 400, code: wire.CodeBadRequest},
		{name: "top level array", body: `[` + ok + `]`, status: 400, code: wire.CodeBadRequest},
		{name: "top level string", body: `"charge"`, status: 400, code: wire.CodeBadRequest},
		{name: "unknown top-level field", body: `{"tool":"charge","args":{"amount":1},"amount":1}`, status: 400, code: wire.CodeBadRequest},
		{name: "duplicate top-level field", body: `{"tool":"charge","tool":"charge","args":{"amount":1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "duplicate top-level args", body: `{"tool":"charge","args":{"amount":1},"args":{"amount":2}}`, status: 400, code: wire.CodeBadRequest},
		{name: "duplicate field in args", body: `{"tool":"charge","args":{"amount":1,"amount":1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "duplicate field in args via escape", body: `{"tool":"send_email","args":{"to":"a@x","subject":"s","subjec\u0074":"t"}}`, status: 400, code: wire.CodeBadRequest},
		{name: "duplicate field in args after NFC", body: `{"tool":"send_email","args":{"to":"a@x","caf\u00e9":1,"cafe\u0301":2}}`, status: 400, code: wire.CodeBadRequest},
		{name: "args array", body: `{"tool":"charge","args":[1]}`, status: 400, code: wire.CodeBadRequest},
		{name: "args string", body: `{"tool":"charge","args":"amount=1"}`, status: 400, code: wire.CodeBadRequest},
		{name: "args number", body: `{"tool":"charge","args":1}`, status: 400, code: wire.CodeBadRequest},
		{name: "tool missing", body: `{"args":{"amount":1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "tool null", body: `{"tool":null,"args":{"amount":1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "tool not a string", body: `{"tool":7,"args":{"amount":1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "tool unknown", body: `{"tool":"refund","args":{"amount":1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "tool empty", body: `{"tool":"","args":{}}`, status: 400, code: wire.CodeBadRequest},
		{name: "client_id not a string", body: `{"tool":"charge","args":{"amount":1},"client_id":5}`, status: 400, code: wire.CodeBadRequest},
		{name: "seq fractional", body: `{"tool":"charge","args":{"amount":1},"seq":1.5}`, status: 400, code: wire.CodeBadRequest},
		{name: "seq string", body: `{"tool":"charge","args":{"amount":1},"seq":"1"}`, status: 400, code: wire.CodeBadRequest},
		// charge
		{name: "charge without amount", body: `{"tool":"charge","args":{}}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge args absent", body: `{"tool":"charge"}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge amount 0", body: `{"tool":"charge","args":{"amount":0}}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge amount negative", body: `{"tool":"charge","args":{"amount":-5}}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge amount fractional", body: `{"tool":"charge","args":{"amount":1.5}}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge amount string", body: `{"tool":"charge","args":{"amount":"100"}}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge unknown arg", body: `{"tool":"charge","args":{"amount":1,"currency":"EUR"}}`, status: 400, code: wire.CodeBadRequest},
		{name: "charge 2^53+1", body: `{"tool":"charge","args":{"amount":9007199254740993}}`, status: 400, code: wire.CodeBadRequest},
		{name: "number 1e400", body: `{"tool":"charge","args":{"amount":1e400}}`, status: 400, code: wire.CodeBadRequest},
		{name: "2^53+1 anywhere in args", body: `{"tool":"send_email","args":{"to":"a@x","subject":"s","n":9007199254740993}}`, status: 400, code: wire.CodeBadRequest},
		// send_email
		{name: "send_email without to", body: `{"tool":"send_email","args":{"subject":"hi"}}`, status: 400, code: wire.CodeBadRequest},
		{name: "send_email empty to", body: `{"tool":"send_email","args":{"to":""}}`, status: 400, code: wire.CodeBadRequest},
		{name: "send_email to number", body: `{"tool":"send_email","args":{"to":5}}`, status: 400, code: wire.CodeBadRequest},
		{name: "send_email subject number", body: `{"tool":"send_email","args":{"to":"a@x","subject":5}}`, status: 400, code: wire.CodeBadRequest},
		// sleep
		{name: "sleep without seconds", body: `{"tool":"sleep","args":{}}`, status: 400, code: wire.CodeBadRequest},
		{name: "sleep negative", body: `{"tool":"sleep","args":{"seconds":-1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "sleep too long", body: `{"tool":"sleep","args":{"seconds":11}}`, status: 400, code: wire.CodeBadRequest},
		{name: "sleep string", body: `{"tool":"sleep","args":{"seconds":"1"}}`, status: 400, code: wire.CodeBadRequest},
		// fail
		{name: "fail retryable string", body: `{"tool":"fail","args":{"retryable":"yes"}}`, status: 400, code: wire.CodeBadRequest},
		{name: "fail times negative", body: `{"tool":"fail","args":{"times":-1}}`, status: 400, code: wire.CodeBadRequest},
		{name: "fail times fractional", body: `{"tool":"fail","args":{"times":1.5}}`, status: 400, code: wire.CodeBadRequest},
		{name: "fail message number", body: `{"tool":"fail","args":{"message":5}}`, status: 400, code: wire.CodeBadRequest},
		// chaos hooks without --chaos
		{name: "_crash_after_commit without chaos", body: `{"tool":"charge","args":{"amount":1,"_crash_after_commit":true}}`, status: 400, code: wire.CodeBadRequest},
		{name: "_crash_before_commit without chaos", body: `{"tool":"charge","args":{"amount":1,"_crash_before_commit":true}}`, status: 400, code: wire.CodeBadRequest},
		{name: "underscore arg without chaos", body: `{"tool":"charge","args":{"amount":1,"_x":1}}`, status: 400, code: wire.CodeBadRequest},
		// refusals using a key that exists: still nothing changes
		{name: "existing key, invalid args", key: "existing", body: `{"tool":"charge","args":{"amount":0}}`, status: 400, code: wire.CodeBadRequest},
		// size
		{name: "body over 1 MiB", body: big, status: 413, code: wire.CodePayloadTooLarge},
		{name: "body over 1 MiB chunked", body: big, chunked: true, status: 413, code: wire.CodePayloadTooLarge},
		// method and path
		{name: "DELETE collection", method: http.MethodDelete, body: ``, status: 405, code: wire.CodeMethodNotAllowed},
		{name: "PUT collection", method: http.MethodPut, body: ok, status: 405, code: wire.CodeMethodNotAllowed},
		{name: "DELETE call", method: http.MethodDelete, path: "/v1/tool-calls/" + existing.CallID, status: 405, code: wire.CodeMethodNotAllowed},
		{name: "POST call", method: http.MethodPost, path: "/v1/tool-calls/" + existing.CallID, body: ok, status: 405, code: wire.CodeMethodNotAllowed},
		{name: "POST stats", method: http.MethodPost, path: "/stats", status: 405, code: wire.CodeMethodNotAllowed},
		{name: "unknown path", method: http.MethodPost, path: "/v1/tool-call", body: ok, status: 404, code: wire.CodeNotFound},
		{name: "unknown version", method: http.MethodPost, path: "/v2/tool-calls", body: ok, status: 404, code: wire.CodeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := b.snapshot()
			method, path, key := tc.method, tc.path, tc.key
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/tool-calls"
			}
			if key == "" && tc.name != "empty key" {
				key = "k-" + strings.ReplaceAll(tc.name, " ", "-")
			}
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length from NewRequest
			}
			req := httptest.NewRequest(method, path, body)
			if tc.chunked {
				req.ContentLength = -1
			}
			if key != noKey {
				req.Header["Idempotency-Key"] = []string{key} // raw: no canonicalization, no checks
			}
			rec := httptest.NewRecorder()
			b.srv.Handler().ServeHTTP(rec, req)

			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body.Bytes())
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q, want application/json", ct)
			}
			var e wire.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, rec.Body.Bytes())
			}
			if e.Error.Code != tc.code || e.Error.Message == "" {
				t.Fatalf("error %+v, want code %s with a message", e.Error, tc.code)
			}
			if rec.Code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
			if after := b.snapshot(); !after.equal(before) {
				t.Fatalf("the refused request changed the database:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// TestKeyLimitsAccepted: the edges of the key rule are accepted.
func TestKeyLimitsAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{
		strings.Repeat("k", MaxKeyLength),
		"!",
		"~",
		"a/b?c#d%20e", // any visible ASCII, including URL syntax
	} {
		r := b.post(key, `{"tool":"sleep","args":{"seconds":0}}`)
		if r.status != http.StatusAccepted {
			t.Fatalf("key %q: got %d, want 202: %s", key, r.status, r.body)
		}
	}
}

// TestFingerprintThroughHTTP: requests that differ only in spelling are the
// same call (a replay, never 409); requests that differ in meaning conflict.
func TestFingerprintThroughHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name     string
		first    string
		again    []string
		conflict bool
	}{
		{name: "member order in args",
			first: `{"tool":"send_email","args":{"to":"a@example.com","subject":"hi"}}`,
			again: []string{`{"tool":"send_email","args":{"subject":"hi","to":"a@example.com"}}`}},
		{name: "member order top level",
			first: `{"tool":"charge","args":{"amount":3}}`,
			again: []string{`{"args":{"amount":3},"tool":"charge"}`}},
		{name: "whitespace",
			first: `{"tool":"charge","args":{"amount":4}}`,
			again: []string{"{ \"tool\" : \"charge\" ,\n\t\"args\" : { \"amount\" : 4 } }\n"}},
		{name: "1 vs 1.0 vs 1e0",
			first: `{"tool":"charge","args":{"amount":1}}`,
			again: []string{`{"tool":"charge","args":{"amount":1.0}}`, `{"tool":"charge","args":{"amount":1e0}}`, `{"tool":"charge","args":{"amount":10E-1}}`}},
		{name: "NFC vs NFD",
			first: `{"tool":"send_email","args":{"to":"café@example.com"}}`, // U+00E9
			again: []string{
				"{\"tool\":\"send_email\",\"args\":{\"to\":\"cafe\u0301@example.com\"}}", // e + U+0301
				`{"tool":"send_email","args":{"to":"caf\u00e9@example.com"}}`,
				`{"tool":"send_email","args":{"to":"cafe\u0301@example.com"}}`,
			}},
		{name: "null member",
			first: `{"tool":"send_email","args":{"to":"n@example.com"}}`,
			again: []string{`{"tool":"send_email","args":{"to":"n@example.com","subject":null}}`}},
		{name: "args absent, null, empty",
			first: `{"tool":"fail","args":{"retryable":false}}`,
			again: []string{`{"tool":"fail","args":{"retryable":false,"times":null}}`}},
		{name: "args absent vs {}",
			first: `{"tool":"fail"}`,
			again: []string{`{"tool":"fail","args":{}}`, `{"tool":"fail","args":null}`}},
		{name: "client_id and seq are not part of it",
			first: `{"tool":"charge","args":{"amount":6},"client_id":"a","seq":1}`,
			again: []string{`{"tool":"charge","args":{"amount":6},"client_id":"b","seq":2}`, `{"tool":"charge","args":{"amount":6}}`}},
		{name: "different amount", conflict: true,
			first: `{"tool":"charge","args":{"amount":100}}`,
			again: []string{`{"tool":"charge","args":{"amount":101}}`}},
		{name: "different string", conflict: true,
			first: `{"tool":"send_email","args":{"to":"x@example.com"}}`,
			again: []string{`{"tool":"send_email","args":{"to":"X@example.com"}}`}},
		{name: "extra member", conflict: true,
			first: `{"tool":"send_email","args":{"to":"y@example.com"}}`,
			again: []string{`{"tool":"send_email","args":{"to":"y@example.com","subject":""}}`}},
		{name: "different tool", conflict: true,
			first: `{"tool":"fail","args":{}}`,
			again: []string{`{"tool":"sleep","args":{"seconds":0}}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "fp-" + strings.ReplaceAll(tc.name, " ", "-")
			first := b.post(key, tc.first)
			if first.status != http.StatusAccepted {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			id := first.call(t).CallID
			for _, body := range tc.again {
				r := b.post(key, body)
				if tc.conflict {
					if r.status != http.StatusConflict || r.errCode(t) != wire.CodeIdempotencyConflict {
						t.Fatalf("%s: got %d %s, want 409", body, r.status, r.body)
					}
					continue
				}
				if r.status != http.StatusOK && r.status != http.StatusAccepted {
					t.Fatalf("%s: got %d %s, want a replay (200/202)", body, r.status, r.body)
				}
				if got := r.call(t).CallID; got != id || r.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("%s: call %s replayed=%q, want %s replayed", body, got, r.header.Get("Idempotent-Replayed"), id)
				}
			}
		})
	}
}

// TestChaosArgsAcceptedWithChaos: with --chaos the hooks are valid args
// (and other "_" names still are not).
func TestChaosArgsAcceptedWithChaos(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Chaos = true })
	if r := b.post("k-chaos-other", `{"tool":"charge","args":{"amount":1,"_x":true}}`); r.status != http.StatusBadRequest {
		t.Fatalf("unknown chaos arg: got %d, want 400", r.status)
	}
	if r := b.post("k-chaos-str", `{"tool":"charge","args":{"amount":1,"_crash_after_commit":"yes"}}`); r.status != http.StatusBadRequest {
		t.Fatalf("non-boolean chaos arg: got %d, want 400", r.status)
	}
	// false is a valid value and crashes nothing.
	r := b.post("k-chaos-false", `{"tool":"charge","args":{"amount":1,"_crash_after_commit":false}}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if c := b.waitFinal(r.call(t).CallID); c.Status != "succeeded" {
		t.Fatalf("status %s", c.Status)
	}
	select {
	case code := <-b.exits:
		t.Fatalf("exit(%d) requested for _crash_after_commit:false", code)
	default:
	}
}

// TestLongNumberRefusedByLength: a number literal of almost 1 MiB that
// rounds to 2^53, under an argument name no tool knows, is refused with 400
// bad_request for its length — the limit comes before tool validation and
// before any big-number arithmetic — and stores nothing.
func TestLongNumberRefusedByLength(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.snapshot()
	digits := MaxBodyBytes - 200
	body := `{"tool":"charge","args":{"anything":9007199254740992.` + strings.Repeat("0", digits) + `1}}`
	r := b.post("k-long-number", body)
	if r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
		t.Fatalf("got %d %s, want 400 bad_request", r.status, r.body)
	}
	if !strings.Contains(string(r.body), "number literal too long") || len(r.body) > 500 {
		t.Fatalf("body %.300s: want the length refusal, without the literal", r.body)
	}
	if !b.snapshot().equal(before) {
		t.Fatal("a refused request changed the database")
	}
}

// TestManyValuesRefusedByCount: a body of more than fingerprint.MaxValues
// values is refused with 400 bad_request by the count, while parsing —
// before normalization, the canonical form and tool validation, which would
// cost about a second of CPU for 1 MiB of small members — and stores
// nothing.
func TestManyValuesRefusedByCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.snapshot()
	body := `{"tool":"charge","args":{"amount":1,"x":[` + strings.Repeat("0,", fingerprint.MaxValues) + `0]}}`
	r := b.post("k-many-values", body)
	if r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
		t.Fatalf("got %d %s, want 400 bad_request", r.status, r.body)
	}
	if !strings.Contains(string(r.body), "too many values") {
		t.Fatalf("body %.300s: want the value-count refusal", r.body)
	}
	if !b.snapshot().equal(before) {
		t.Fatal("a refused request changed the database")
	}
}

// TestPauseBeforeCommitNeedsChaos: without --chaos the pause argument is
// refused like any "_" argument, and nothing is stored.
func TestPauseBeforeCommitNeedsChaos(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post("k-pause-nochaos", `{"tool":"charge","args":{"amount":1,"_pause_before_commit":3}}`)
	if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
		t.Fatalf("got %d %s, want 400 bad_request", r.status, r.body)
	}
	if s := b.stats(); s.Calls != 0 {
		t.Fatalf("calls=%d after a refused request, want 0", s.Calls)
	}
	c := setup(t, func(c *Config) { c.Chaos = true })
	if r := c.post("k-pause-zero", `{"tool":"charge","args":{"amount":1,"_pause_before_commit":0}}`); r.status != http.StatusBadRequest {
		t.Fatalf("pause 0 with chaos: got %d %s, want 400", r.status, r.body)
	}
}
