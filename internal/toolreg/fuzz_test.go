package toolreg

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// FuzzToolsFile feeds any bytes to Parse, with every environment variable
// set to a secret the fuzzer cannot guess, and checks: no panic; a refusal
// never quotes the secret; an accepted file lists every tool of the
// registry once, by name, with its schema, and the listing (and the
// registry's and tools' String forms) never shows the secret. Run it longer
// with go test -run='^$' -fuzz='^FuzzToolsFile$' -fuzztime=5m ./internal/toolreg
func FuzzToolsFile(f *testing.F) {
	seeds := []string{
		refundYAML,
		fmt.Sprintf(refundYAML, "http://127.0.0.1:9000/refunds"),
		`{"tools": [{"name": "t", "kind": "http", "url": "https://x.test/a", "effect": false}]}`,
		`tools: [{name: charge, kind: builtin, timeout: 2s, retry: {max_attempts: 3}, concurrency: 2}]`,
		`tools: [{name: t, kind: http, url: "http://x/", headers: {Authorization: "Bearer ${TOKEN}", X-A: "${A}-${B}"}}]`,
		`tools: [{name: t, kind: http, url: "http://x/", headers: {X-A: "${T}\n"}}]`,
		`tools: [{name: t, kind: http, url: "http://x/", headers: {X-A: "${1X}"}}]`,
		`tools: [{name: t, kind: http, url: "http://x/", headers: {X-A: 5}}]`,
		`tools: [{name: t, kind: http, url: "http://x/", method: PUT, description: d, destructive: false}]`,
		`tools: [{name: t, kind: http, url: "http://x/", schema: {type: object, properties: {a: {type: integer}}}}]`,
		`tools: [{name: t, kind: http, url: "http://x/", schema: {type: 5}}]`,
		`tools: [{name: t, kind: http, url: "http://x/", schema: {"$ref": "http://elsewhere/s.json"}}]`,
		`tools: [{name: t, kind: http, url: "ftp://x/"}]`,
		`tools: [{name: t, kind: http, url: "http://x/", timeout: -1s}]`,
		`tools: [{name: t, kind: http, url: "http://x/", retry: {max_attempts: 0, initial_backoff: 1h, max_backoff: 1ms}}]`,
		`tools: [{name: t, kind: http, url: "http://x/"}, {name: t, kind: http, url: "http://y/"}]`,
		`tools: [{name: echo, kind: http, url: "http://x/"}]`,
		`tools: [{name: "a b", kind: http, url: "http://x/"}]`,
		`tools: [{name: t, kind: builtin}]`,
		`tools: [{name: t, kind: other}]`,
		`tools: [{name: t, kind: builtin, url: "http://x/"}]`,
		`tools: []`,
		`tools: {}`,
		`tools: [5, "x", null]`,
		`other: 1`,
		`- 1`,
		``,
		"a: &a [*a]",
		"x: &x [1]\ntools: [*x, *x]",
		"tools:\n- name: t\n  kind: http\n  url: \"http://x/\"\n  headers:\n    X-Token: \"${TOKEN}\"\n",
		"\xff\xfe",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	secretValue := "S3CR3T" + hex.EncodeToString(b)
	getenv := func(string) (string, bool) { return secretValue, true }

	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data, getenv)
		if err != nil {
			if strings.Contains(err.Error(), secretValue) {
				t.Fatalf("the refusal shows the secret: %v", err)
			}
			return
		}
		listing, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("an accepted file cannot be listed: %v", err)
		}
		for _, shown := range []string{string(listing), r.String(), fmt.Sprintf("%v %+v %#v", r, r.Tools(), r)} {
			if strings.Contains(shown, secretValue) {
				t.Fatalf("the listing shows the secret: %s", shown)
			}
		}
		var got struct {
			Tools []struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(listing, &got); err != nil {
			t.Fatalf("the listing is not {\"tools\": [...]}: %v\n%s", err, listing)
		}
		var names []string
		for _, l := range got.Tools {
			names = append(names, l.Name)
			tool, ok := r.Lookup(l.Name)
			if !ok {
				t.Fatalf("listed tool %q cannot be looked up", l.Name)
			}
			if !jsonEqual(l.Schema, tool.Schema()) {
				t.Fatalf("tool %q: listed schema %s, registry's %s", l.Name, l.Schema, tool.Schema())
			}
		}
		if !slices.Equal(names, r.Names()) {
			t.Fatalf("listed %v, registered %v", names, r.Names())
		}
		for _, builtin := range Builtins().Names() {
			if !slices.Contains(names, builtin) {
				t.Fatalf("built-in %q missing from the listing %v", builtin, names)
			}
		}
	})
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
