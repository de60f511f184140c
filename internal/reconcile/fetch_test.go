package reconcile

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/toolreg"
)

// block parses a one-tool file and returns its reconcile block.
func block(t *testing.T, reconcileYAML string) *toolreg.Reconcile {
	t.Helper()
	reg, err := toolreg.Parse([]byte(`tools:
  - name: t
    kind: http
    url: http://127.0.0.1:9/x
    headers: {Authorization: "Bearer ${TOK}"}
    reconcile: `+reconcileYAML+"\n"), func(string) (string, bool) { return "s3cret", true })
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := reg.Lookup("t")
	return tl.Reconcile
}

// TestFetchPages: every page is read through its next link (relative or
// absolute), with the tool's headers and the window's start in the URL;
// records without a string key get "".
func TestFetchPages(t *testing.T) {
	t.Parallel()
	var gotSince, gotAuth []string
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotSince = append(gotSince, r.URL.Query().Get("from"))
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		switch r.URL.Query().Get("p") {
		case "":
			fmt.Fprint(w, `{"result": {"items": [{"meta": {"k": "eff_1"}}, {"meta": {"k": 7}}]}, "links": {"next": "?p=2&from=x"}}`)
		case "2":
			fmt.Fprintf(w, `{"result": {"items": [{"meta": {"k": "eff_2"}}]}, "links": {"next": "%s/l?p=3"}}`, ts.URL)
		default:
			fmt.Fprint(w, `{"result": {"items": [{}]}, "links": {"next": null}}`)
		}
	}))
	defer ts.Close()
	rc := block(t, `{url: "`+ts.URL+`/l?from={since}", items: /result/items, key: /meta/k, next: /links/next}`)
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("x", 3600))
	recs, err := Fetch(t.Context(), nil, rc, since)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key+"="+string(r.Record))
	}
	if got := strings.Join(keys, " "); got != `eff_1={"meta":{"k":"eff_1"}} ={"meta":{"k":7}} eff_2={"meta":{"k":"eff_2"}} ={}` {
		t.Fatalf("records: %s", got)
	}
	if len(gotSince) != 3 || gotSince[0] != "2026-12-01T09:00:00Z" || gotAuth[2] != "Bearer s3cret" {
		t.Fatalf("since %v, auth %v", gotSince, gotAuth)
	}
}

// TestFetchRefuses: a list that cannot be read is an error naming the page
// and what is wrong, never the headers or the body.
func TestFetchRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct{ body, status, want string }{
		{`{"data": []}`, "500", "the downstream answered 500 Internal Server Error, want 200"},
		{`not json`, "200", "the answer is not JSON"},
		{`{"items": []}`, "200", `items "/data": not in the answer`},
		{`{"data": {"a": 1}}`, "200", `items "/data": not an array`},
		{`{"data": [], "next": 5}`, "200", `next "/next": not a string`},
		{`{"data": [], "next": "http://elsewhere.example/l"}`, "200", `a link to another origin (http://elsewhere.example) is not followed`},
		{`{"data": [], "next": "/l?since=0"}`, "200", "repeats an earlier page"},
	}
	for _, c := range cases {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.status != "200" {
				w.WriteHeader(500)
			}
			fmt.Fprint(w, c.body)
		}))
		rc := block(t, `{url: "`+ts.URL+`/l?since={since}", items: /data, key: /k}`)
		_, err := Fetch(t.Context(), nil, rc, time.Unix(0, 0))
		ts.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "page ") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: got %v, want …%s…", c.body, err, c.want)
		}
	}
}
