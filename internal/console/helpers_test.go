package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemctl/idemctl/internal/console"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// Test tokens of the console-level tests (the server's own token file is
// exercised in server_test.go).
var testTokens = map[string]string{"tok-alice": "alice", "tok-bob": "bob"}

type bundle struct {
	st      store.Store
	url     string
	cancels *atomic.Int64 // calls of Config.Cancel
}

// setup serves a console on a fresh SQLite store; with auth, requests
// authenticate with testTokens.
func setup(t *testing.T, pageSize int, auth bool) bundle {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b := bundle{st: st, cancels: &atomic.Int64{}}
	cfg := console.Config{
		Store: st,
		Cancel: func(ctx context.Context, principal, id string) (store.Call, store.CancelOutcome, error) {
			b.cancels.Add(1)
			cur, err := st.GetAny(ctx, id)
			if err == nil && cur.Principal != principal {
				err = store.ErrNotFound
			}
			if err != nil {
				return store.Call{}, 0, err
			}
			return st.Cancel(ctx, id, json.RawMessage(`{"code":"canceled","message":"canceled by request","retryable":false}`), nil)
		},
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
			var err error
			c.CreatedAt, err = strconv.ParseFloat(ts, 64)
			return c, err
		},
		PageSize: pageSize,
	}
	if auth {
		cfg.Authenticate = func(h [sha256.Size]byte) (string, bool) {
			for tok, p := range testTokens {
				if sha256.Sum256([]byte(tok)) == h {
					return p, true
				}
			}
			return "", false
		}
	}
	ts := httptest.NewServer(console.New(cfg))
	t.Cleanup(ts.Close)
	b.url = ts.URL
	return b
}

var seq atomic.Int64

// create records a pending call for principal and returns it.
func (b bundle) create(t *testing.T, principal, key, tool, args string) store.Call {
	t.Helper()
	c, _, err := b.st.CreateOrGet(t.Context(), store.NewCall{
		CallID: fmt.Sprintf("c_%016x", seq.Add(1)), Principal: principal, IdemKey: key,
		Fingerprint: "fp", Tool: tool, ArgsJSON: json.RawMessage(args),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// claim claims every pending call and returns them by id.
func (b bundle) claim(t *testing.T, owner string) map[string]store.Call {
	t.Helper()
	got, err := b.st.ClaimNext(t.Context(), owner, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]store.Call{}
	for _, c := range got {
		m[c.CallID] = c
	}
	return m
}

// client is a browser-like client: it keeps cookies, and does not follow
// redirects (tests look at them).
func client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type resp struct {
	code int
	doc  *html.Node
	raw  string
	hdr  http.Header
}

// do sends a request; hdr are name, value pairs ("Authorization" gets
// the bearer prefix added when the value does not have it).
func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr ...string) resp {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	raw, _ := io.ReadAll(r.Body)
	doc, err := html.Parse(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return resp{code: r.StatusCode, doc: doc, raw: string(raw), hdr: r.Header}
}

// get is an unauthenticated GET (auth off) or one with a bearer token.
func (b bundle) get(t *testing.T, path, token string) resp {
	t.Helper()
	var hdr []string
	if token != "" {
		hdr = []string{"Authorization", "Bearer " + token}
	}
	r := do(t, nil, http.MethodGet, b.url+path, nil, hdr...)
	if r.code != http.StatusSeeOther {
		if csp := r.hdr.Get("Content-Security-Policy"); csp != console.CSP || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	return r
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
					if a.Key == attr && (val == "" || a.Val == val || (attr == "class" && hasWord(a.Val, val))) {
						out = append(out, n)
						break
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

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func byID(t *testing.T, doc *html.Node, id string) *html.Node {
	t.Helper()
	n := find(doc, "", "id", id)
	if len(n) != 1 {
		t.Fatalf("want one element #%s, got %d", id, len(n))
	}
	return n[0]
}

func textByID(t *testing.T, doc *html.Node, id string) string {
	t.Helper()
	return text(byID(t, doc, id))
}

// csrfOf is the CSRF token of the page's form posting to action.
func csrfOf(t *testing.T, doc *html.Node, action string) string {
	t.Helper()
	for _, f := range find(doc, "form", "action", action) {
		for _, in := range find(f, "input", "name", "csrf") {
			return attr(in, "value")
		}
	}
	t.Fatalf("no form to %s with a csrf field", action)
	return ""
}
