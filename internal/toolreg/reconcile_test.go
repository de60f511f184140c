package toolreg

import (
	"strings"
	"testing"
)

// TestParseReconcile: a reconcile block is read into the tool with its
// pointers and the tool's headers; next defaults to /next.
func TestParseReconcile(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte(`tools:
  - name: create_charge
    kind: http
    url: http://127.0.0.1:9000/charges
    headers: {Authorization: "Bearer ${TOK}"}
    reconcile:
      url: http://127.0.0.1:9000/charges?since={since}
      items: /data
      key: /idempotency_key
  - name: paged
    kind: http
    url: http://127.0.0.1:9000/charges
    reconcile: {url: "http://x/l?from={since}", items: "", key: /meta/key, next: /links/next}
`), env("TOK", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := r.Lookup("create_charge")
	rc := tl.Reconcile
	if rc == nil || rc.URL != "http://127.0.0.1:9000/charges?since={since}" || rc.Items.String() != "/data" ||
		rc.Key.String() != "/idempotency_key" || rc.Next.String() != "/next" ||
		len(rc.Headers) != 1 || rc.Headers[0].Value.Reveal() != "Bearer s3cret" {
		t.Fatalf("reconcile: %+v", rc)
	}
	tl, _ = r.Lookup("paged")
	if rc := tl.Reconcile; rc == nil || rc.Items.String() != "" || rc.Key.String() != "/meta/key" || rc.Next.String() != "/links/next" {
		t.Fatalf("paged: %+v", tl.Reconcile)
	}
	tl, _ = r.Lookup("charge")
	if tl.Reconcile != nil {
		t.Fatal("a builtin has a reconcile block")
	}
}

// TestParseReconcileErrors: every bad reconcile block is refused, naming
// the field.
func TestParseReconcileErrors(t *testing.T) {
	t.Parallel()
	const ok = `name: t, kind: http, url: "http://127.0.0.1:9/x"`
	const rc = `url: "http://h/l?since={since}", items: /data, key: /k`
	cases := []struct{ file, want string }{
		{`tools: [{` + ok + `, reconcile: 3}]`, `tools[0] (t): reconcile: must be a mapping with url, items, key, next`},
		{`tools: [{` + ok + `, reconcile: {` + rc + `, keys: /k}}]`, `tools[0] (t): reconcile.keys: unknown field (allowed: url, items, key, next)`},
		{`tools: [{` + ok + `, reconcile: {items: /data, key: /k}}]`, `tools[0] (t): reconcile.url: required, a string, got nothing`},
		{`tools: [{` + ok + `, reconcile: {url: "http://h/l", items: /data, key: /k}}]`, `tools[0] (t): reconcile.url: must contain {since}`},
		{`tools: [{` + ok + `, reconcile: {url: "ftp://h/{since}", items: /data, key: /k}}]`, `tools[0] (t): reconcile.url: "ftp://h/0" must start with http:// or https://`},
		{`tools: [{` + ok + `, reconcile: {url: "http://h/l?since={since}", key: /k}}]`, `tools[0] (t): reconcile.items: required, a JSON Pointer such as "/data", got nothing`},
		{`tools: [{` + ok + `, reconcile: {url: "http://h/l?since={since}", items: data, key: /k}}]`, `tools[0] (t): reconcile.items: "data" is not a JSON Pointer`},
		{`tools: [{` + ok + `, reconcile: {url: "http://h/l?since={since}", items: /data}}]`, `tools[0] (t): reconcile.key: required`},
		{`tools: [{` + ok + `, reconcile: {url: "http://h/l?since={since}", items: /data, key: ""}}]`, `tools[0] (t): reconcile.key: "" points to the whole record`},
		{`tools: [{` + ok + `, reconcile: {` + rc + `, next: 5}}]`, `tools[0] (t): reconcile.next: required, a JSON Pointer such as "/data", got 5`},
		{`tools: [{name: charge, kind: builtin, reconcile: {` + rc + `}}]`, `tools[0] (charge): reconcile: not allowed for a builtin tool`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file), env())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", c.file, err, c.want)
		}
	}
}
