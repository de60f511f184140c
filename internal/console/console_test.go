package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemctl/idemctl/internal/console"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/apitest"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// principalHeader tells the test console who the request is from (the
// server's authentication does this in production).
const principalHeader = "X-Test-Principal"

type bundle struct {
	st  store.Store
	url string
}

// setup serves a console on a fresh SQLite store with a page size of
// pageSize, its principal taken from principalHeader.
func setup(t *testing.T, pageSize int) bundle {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := console.New(console.Config{
		Store:     st,
		Principal: func(r *http.Request) string { return r.Header.Get(principalHeader) },
		EncodeCursor: func(c store.Cursor) string {
			return strconv.FormatFloat(c.CreatedAt, 'g', -1, 64) + "_" + c.CallID
		},
		DecodeCursor: func(s string) (store.Cursor, error) {
			var c store.Cursor
			ts, id, ok := strings.Cut(s, "_")
			if !ok {
				return c, fmt.Errorf("bad cursor")
			}
			c.CallID = id
			c.CreatedAt, err = strconv.ParseFloat(ts, 64)
			return c, err
		},
		PageSize: pageSize,
	})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return bundle{st: st, url: ts.URL}
}

var seq int

// create records a pending call for principal and returns it.
func (b bundle) create(t *testing.T, principal, key, tool, args string) store.Call {
	t.Helper()
	seq++
	c, _, err := b.st.CreateOrGet(t.Context(), store.NewCall{
		CallID: fmt.Sprintf("c_%016x", seq), Principal: principal, IdemKey: key,
		Fingerprint: "fp", Tool: tool, ArgsJSON: json.RawMessage(args),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// claim claims every pending call and returns them by id.
func (b bundle) claim(t *testing.T) map[string]store.Call {
	t.Helper()
	got, err := b.st.ClaimNext(t.Context(), "owner-1", time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]store.Call{}
	for _, c := range got {
		m[c.CallID] = c
	}
	return m
}

// get fetches path with principal and returns the status and parsed page.
func (b bundle) get(t *testing.T, path, principal string) (int, *html.Node, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+path, nil)
	req.Header.Set(principalHeader, principal)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	doc, err := html.Parse(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("%s: Content-Security-Policy %q", path, csp)
	}
	return resp.StatusCode, doc, string(raw)
}

// text is the visible text of n, whitespace collapsed.
func text(n *html.Node) string {
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
			sb.WriteString(" ")
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(sb.String()), " ")
}

// find returns every element whose attribute attr equals val (or, with
// val "", that has attr), or whose tag is tag when attr is "".
func find(n *html.Node, tag, attr, val string) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && (tag == "" || n.Data == tag) {
			if attr == "" {
				out = append(out, n)
			} else {
				for _, a := range n.Attr {
					if a.Key == attr && (val == "" || a.Val == val) {
						out = append(out, n)
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func byID(t *testing.T, doc *html.Node, id string) string {
	t.Helper()
	n := find(doc, "", "id", id)
	if len(n) != 1 {
		t.Fatalf("want one element #%s, got %d", id, len(n))
	}
	return text(n[0])
}

// events is the timeline's event column, in order.
func events(doc *html.Node) []string {
	var out []string
	for _, td := range find(doc, "td", "class", "event") {
		out = append(out, text(td))
	}
	return out
}

// TestCallPageEachState renders a call in each state and checks its
// status, result or error, effect and timeline events in order.
func TestCallPageEachState(t *testing.T) {
	b := setup(t, 0)
	ctx := t.Context()
	pending := b.create(t, "", "k-pending", "echo", `{"n":1}`)
	running := b.create(t, "", "k-running", "sleep", `{"ms":5}`)
	ok := b.create(t, "", "k-ok", "charge", `{"amount":7}`)
	bad := b.create(t, "", "k-bad", "fail", `{}`)
	claimed := b.claim(t)
	// pending: create a new one after the claim so it stays pending
	_ = pending
	pending = b.create(t, "", "k-pending-2", "echo", `{"n":2}`)
	if _, err := b.st.Succeed(ctx, store.Completion{
		CallID: ok.CallID, Owner: "owner-1", Attempt: claimed[ok.CallID].Attempt,
		Result: json.RawMessage(`{"charged":7}`),
		Effect: &store.Effect{EffectID: "e_ok", CallID: ok.CallID, Tool: "charge"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Fail(ctx, store.Completion{
		CallID: bad.CallID, Owner: "owner-1", Attempt: claimed[bad.CallID].Attempt,
		Error: json.RawMessage(`{"code":"tool_failed","message":"boom","retryable":false}`),
	}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		call           store.Call
		status, effect string
		block, content string
		events         []string
	}{
		{pending, "pending", "—", "", "", []string{"created"}},
		{running, "running", "—", "", "", []string{"created", "claimed"}},
		{ok, "succeeded", "e_ok", "result", `"charged": 7`, []string{"created", "claimed", "succeeded"}},
		{bad, "failed", "—", "error", `"message": "boom"`, []string{"created", "claimed", "failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.status, func(t *testing.T) {
			code, doc, _ := b.get(t, "/console/calls/"+tc.call.CallID, "")
			if code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			h1 := text(find(doc, "h1", "", "")[0])
			if !strings.Contains(h1, tc.call.CallID) || !strings.HasSuffix(h1, tc.status) {
				t.Errorf("heading %q, want the id and %s", h1, tc.status)
			}
			if !strings.Contains(text(doc), "effect "+tc.effect) {
				t.Errorf("effect %q not shown", tc.effect)
			}
			if tc.block != "" && !strings.Contains(byID(t, doc, tc.block), tc.content) {
				t.Errorf("#%s = %q, want %q", tc.block, byID(t, doc, tc.block), tc.content)
			}
			for _, other := range []string{"result", "error"} {
				if other != tc.block && len(find(doc, "", "id", other)) != 0 {
					t.Errorf("a %s call shows a #%s block", tc.status, other)
				}
			}
			if got := events(doc); strings.Join(got, ",") != strings.Join(tc.events, ",") {
				t.Errorf("timeline %v, want %v", got, tc.events)
			}
		})
	}
}

// TestOverviewCounts checks the queue cards and the listed calls.
func TestOverviewCounts(t *testing.T) {
	b := setup(t, 0)
	b.create(t, "", "a", "echo", `{}`)
	b.create(t, "", "b", "echo", `{}`)
	b.claim(t)
	b.create(t, "", "c", "sleep", `{}`)
	b.create(t, "someone", "theirs", "echo", `{}`)
	code, doc, _ := b.get(t, "/console/", "")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want := map[string]string{"depth": "2", "count-pending": "2", "count-running": "2",
		"count-succeeded": "0", "count-failed": "0", "calls": "4", "effects": "0"}
	for id, v := range want {
		if got := byID(t, doc, id); got != v {
			t.Errorf("#%s = %q, want %q", id, got, v)
		}
	}
	keys := find(doc, "td", "class", "key")
	if len(keys) != 3 || text(keys[0]) != "c" {
		t.Errorf("listed %d calls (want 3, newest c first, not another principal's)", len(keys))
	}
	_, doc, _ = b.get(t, "/console/?status=running&tool=echo", "")
	if keys := find(doc, "td", "class", "key"); len(keys) != 2 {
		t.Errorf("filter status=running tool=echo listed %d calls, want 2", len(keys))
	}
	if code, _, _ := b.get(t, "/console/?status=bogus", ""); code != http.StatusBadRequest {
		t.Errorf("status=bogus: %d, want 400", code)
	}
	if code, _, _ := b.get(t, "/console/?after=nonsense", ""); code != http.StatusBadRequest {
		t.Errorf("after=nonsense: %d, want 400", code)
	}
}

// TestEscaping shows a hostile key, tool filter and args as text: no
// element comes from user data.
func TestEscaping(t *testing.T) {
	b := setup(t, 0)
	const hostile = `<script>alert(1)</script>`
	c := b.create(t, "", hostile, "echo", `{"x":"</pre><script>alert(2)</script>"}`)
	for _, path := range []string{"/console/", "/console/?tool=" + "%3Cscript%3E", "/console/calls/" + c.CallID} {
		_, doc, raw := b.get(t, path, "")
		if n := find(doc, "script", "", ""); len(n) != 0 {
			t.Errorf("%s: %d <script> elements", path, len(n))
		}
		if strings.Contains(raw, "<script>") {
			t.Errorf("%s: raw <script> in the page", path)
		}
		if path != "/console/?tool=%3Cscript%3E" && !strings.Contains(text(doc), hostile) {
			t.Errorf("%s: the key is not shown as text", path)
		}
	}
	_, doc, _ := b.get(t, "/console/calls/"+c.CallID, "")
	if got := byID(t, doc, "args"); !strings.Contains(got, "</pre><script>alert(2)</script>") {
		t.Errorf("args shown as %q", got)
	}
}

// TestOtherPrincipalNotFound: a call of another principal is 404, exactly
// like an unknown or malformed id.
func TestOtherPrincipalNotFound(t *testing.T) {
	b := setup(t, 0)
	c := b.create(t, "alice", "k", "echo", `{}`)
	if code, _, _ := b.get(t, "/console/calls/"+c.CallID, "alice"); code != http.StatusOK {
		t.Fatalf("owner: %d", code)
	}
	for _, p := range []string{"bob", ""} {
		code, _, raw := b.get(t, "/console/calls/"+c.CallID, p)
		if code != http.StatusNotFound || strings.Contains(raw, `"k"`) {
			t.Errorf("principal %q: %d, want 404", p, code)
		}
	}
	if code, _, _ := b.get(t, "/console/calls/c_ffffffffffffffff", "alice"); code != http.StatusNotFound {
		t.Errorf("unknown id: %d", code)
	}
	if code, _, _ := b.get(t, "/console/nowhere", "alice"); code != http.StatusNotFound {
		t.Errorf("unknown page: %d", code)
	}
}

// TestPagination walks every page by its "older" link and sees each call
// once, newest first.
func TestPagination(t *testing.T) {
	b := setup(t, 3)
	var want []string
	for i := range 8 {
		want = append([]string{fmt.Sprintf("key-%d", i)}, want...)
		b.create(t, "", fmt.Sprintf("key-%d", i), "echo", `{}`)
	}
	var got []string
	path, pages := "/console/", 0
	for path != "" {
		pages++
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		_, doc, _ := b.get(t, path, "")
		for _, td := range find(doc, "td", "class", "key") {
			got = append(got, text(td))
		}
		path = ""
		if next := find(doc, "a", "rel", "next"); len(next) == 1 {
			for _, a := range next[0].Attr {
				if a.Key == "href" {
					path = a.Val
				}
			}
		}
	}
	if pages != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%d pages listed %v, want 3 pages of %v", pages, got, want)
	}
}

// TestServedByServerWithAuth runs the console inside a real server with a
// token file: no token is 401, a token sees only its principal's calls,
// and no page holds the token.
func TestServedByServerWithAuth(t *testing.T) {
	const aliceToken, bobToken = "alice-secret-token-1", "bob-secret-token-2"
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("alice:"+server.HashToken(aliceToken)+"\nbob:"+server.HashToken(bobToken)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := server.LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	base := apitest.Start(t, server.Config{Auth: auth})
	do := func(method, path, token string, body io.Reader, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	code, raw := do(http.MethodPost, "/v1/tool-calls", aliceToken,
		strings.NewReader(`{"tool":"sleep","args":{"seconds":0}}`), "Idempotency-Key", "alice-key", "Content-Type", "application/json")
	if code != http.StatusCreated && code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("create: %d %s", code, raw)
	}
	var call struct {
		CallID string `json:"call_id"`
	}
	if err := json.Unmarshal([]byte(raw), &call); err != nil || call.CallID == "" {
		t.Fatalf("create answer %s: %v", raw, err)
	}
	if code, _ := do(http.MethodGet, "/console/", "", nil); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	code, page := do(http.MethodGet, "/console/", aliceToken, nil)
	if code != http.StatusOK || !strings.Contains(page, "alice-key") {
		t.Errorf("alice's overview: %d, key shown %v", code, strings.Contains(page, "alice-key"))
	}
	code, page2 := do(http.MethodGet, "/console/calls/"+call.CallID, aliceToken, nil)
	if code != http.StatusOK {
		t.Errorf("alice's call: %d", code)
	}
	code, bobs := do(http.MethodGet, "/console/", bobToken, nil)
	if code != http.StatusOK || strings.Contains(bobs, "alice-key") {
		t.Errorf("bob's overview: %d, shows alice's key %v", code, strings.Contains(bobs, "alice-key"))
	}
	if code, _ := do(http.MethodGet, "/console/calls/"+call.CallID, bobToken, nil); code != http.StatusNotFound {
		t.Errorf("bob reading alice's call: %d, want 404", code)
	}
	for _, p := range []string{page, page2, bobs} {
		if strings.Contains(p, aliceToken) || strings.Contains(p, bobToken) ||
			strings.Contains(p, server.HashToken(aliceToken)) {
			t.Error("a page holds a token or its hash")
		}
	}
	if code, _ := do(http.MethodPost, "/console/", aliceToken, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: %d, want 405", code)
	}
}
