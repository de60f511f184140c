package console_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/console"
	"github.com/idemctl/idemctl/internal/store"
)

// signIn signs a cookie-keeping client in with token and returns it.
func signIn(t *testing.T, b bundle, token string) *http.Client {
	t.Helper()
	c := client(t)
	r := do(t, c, http.MethodPost, b.url+"/ui/signin", url.Values{"token": {token}, "next": {"/ui/calls"}})
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/ui/calls" {
		t.Fatalf("sign in: %d to %q", r.code, r.hdr.Get("Location"))
	}
	return c
}

// TestSignIn: without a credential a page sends the browser to the
// sign-in form; a wrong token is refused without a cookie; a right one
// sets an HttpOnly, SameSite=Strict cookie holding no plain token that
// then authenticates the pages; sign-out clears it.
func TestSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	b.create(t, "alice", "alice-key", "echo", `{}`)
	for _, p := range []string{"/ui", "/ui/calls", "/ui/calls/c_0000000000000001", "/ui/search?q=x"} {
		r := do(t, nil, http.MethodGet, b.url+p, nil)
		if r.code != http.StatusSeeOther || !strings.HasPrefix(r.hdr.Get("Location"), "/ui/signin?next=") {
			t.Errorf("GET %s without a credential: %d to %q, want 303 to the sign-in page", p, r.code, r.hdr.Get("Location"))
		}
	}
	if r := do(t, nil, http.MethodPost, b.url+"/ui/calls/c_0000000000000001/cancel", url.Values{}); r.code != http.StatusUnauthorized {
		t.Errorf("POST cancel without a credential: %d, want 401", r.code)
	}
	if r := b.get(t, "/ui", "wrong-token"); r.code != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token: %d, want 401", r.code)
	}
	form := do(t, nil, http.MethodGet, b.url+"/ui/signin?next=/ui/calls", nil)
	if form.code != http.StatusOK || len(find(form.doc, "input", "name", "token")) != 1 ||
		attr(find(form.doc, "input", "name", "token")[0], "type") != "password" {
		t.Fatalf("sign-in form: %d, want a password field", form.code)
	}
	if txt := text(form.doc); !strings.Contains(txt, "unused for 12 hours, or after 7 days") {
		t.Errorf("the sign-in page does not state the session's limits: %q", txt)
	}
	c := client(t)
	bad := do(t, c, http.MethodPost, b.url+"/ui/signin", url.Values{"token": {"tok-wrong-secret"}})
	if bad.code != http.StatusUnauthorized || len(bad.hdr.Values("Set-Cookie")) != 0 || strings.Contains(bad.raw, "tok-wrong-secret") {
		t.Errorf("wrong token: %d, cookies %v, echoed %v", bad.code, bad.hdr.Values("Set-Cookie"), strings.Contains(bad.raw, "tok-wrong-secret"))
	}
	r := do(t, c, http.MethodPost, b.url+"/ui/signin", url.Values{"token": {"tok-alice"}, "next": {"https://evil.example/"}})
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/ui" {
		t.Errorf("sign in with a foreign next: %d to %q, want /ui", r.code, r.hdr.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range (&http.Response{Header: r.hdr}).Cookies() {
		if ck.Name == console.SessionCookie {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/ui" ||
		strings.Contains(session.Value, "tok-alice") {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui, no plain token", session)
	}
	page := do(t, c, http.MethodGet, b.url+"/ui/calls", nil)
	if page.code != http.StatusOK || !strings.Contains(text(page.doc), "alice-key") || strings.Contains(page.raw, "tok-alice") {
		t.Fatalf("signed-in calls page: %d, shows alice's key %v", page.code, strings.Contains(text(page.doc), "alice-key"))
	}
	// Sign out: a wrong CSRF token changes nothing; the right one clears.
	if r := do(t, c, http.MethodPost, b.url+"/ui/signout", url.Values{"csrf": {"0000"}}); r.code != http.StatusForbidden {
		t.Errorf("sign-out with a wrong CSRF token: %d, want 403", r.code)
	}
	if r := do(t, c, http.MethodGet, b.url+"/ui", nil); r.code != http.StatusOK {
		t.Errorf("after a refused sign-out: %d, want still signed in", r.code)
	}
	out := do(t, c, http.MethodPost, b.url+"/ui/signout", url.Values{"csrf": {csrfOf(t, page.doc, "/ui/signout")}})
	if out.code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", out.code)
	}
	if r := do(t, c, http.MethodGet, b.url+"/ui", nil); r.code != http.StatusSeeOther {
		t.Errorf("after sign-out: %d, want 303 to the sign-in page", r.code)
	}
}

// TestCancelCSRF: a cancel is done only with the CSRF token of the
// browser's session, from the console's own origin; a missing, wrong or
// another session's token, or a cross-site request, is 403 and leaves the
// call as it was (Cancel is not even called).
func TestCancelCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	call := b.create(t, "alice", "to-cancel", "sleep", `{}`)
	action := "/ui/calls/" + call.CallID + "/cancel"
	alice := signIn(t, b, "tok-alice")
	confirm := do(t, alice, http.MethodGet, b.url+action, nil)
	good := csrfOf(t, confirm.doc, action)
	other := signIn(t, b, "tok-alice") // another browser of alice's
	otherTok := csrfOf(t, do(t, other, http.MethodGet, b.url+action, nil).doc, action)
	if otherTok == good {
		t.Fatal("two sessions got the same CSRF token")
	}
	for name, tc := range map[string]struct {
		form url.Values
		hdr  []string
	}{
		"missing":           {url.Values{}, nil},
		"wrong":             {url.Values{"csrf": {strings.Repeat("0", len(good))}}, nil},
		"another session's": {url.Values{"csrf": {otherTok}}, nil},
		"cross-site":        {url.Values{"csrf": {good}}, []string{"Sec-Fetch-Site", "cross-site"}},
		"foreign origin":    {url.Values{"csrf": {good}}, []string{"Origin", "https://evil.example"}},
	} {
		r := do(t, alice, http.MethodPost, b.url+action, tc.form, tc.hdr...)
		if r.code != http.StatusForbidden {
			t.Errorf("%s CSRF token: %d, want 403", name, r.code)
		}
		if cur, _ := b.st.GetAny(t.Context(), call.CallID); cur.Status != store.StatusPending {
			t.Fatalf("%s CSRF token: the call is now %s", name, cur.Status)
		}
	}
	if n := b.cancels.Load(); n != 0 {
		t.Fatalf("Cancel was called %d times for refused requests", n)
	}
	r := do(t, alice, http.MethodPost, b.url+action, url.Values{"csrf": {good}},
		"Sec-Fetch-Site", "same-origin", "Origin", b.url)
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/ui/calls/"+call.CallID+"?cancel=canceled" {
		t.Fatalf("cancel: %d to %q", r.code, r.hdr.Get("Location"))
	}
	if cur, _ := b.st.GetAny(t.Context(), call.CallID); cur.Status != store.StatusFailed {
		t.Errorf("after cancel the call is %s, want failed", cur.Status)
	}
	page := do(t, alice, http.MethodGet, b.url+r.hdr.Get("Location"), nil)
	if n := textByID(t, page.doc, "notice"); !strings.Contains(n, "failed with code canceled") {
		t.Errorf("notice %q", n)
	}
}

// TestSessionIsNotTheToken: the sign-in cookie holds a random session id,
// not the token in any encoding; after sign-out the same cookie, replayed,
// opens nothing; two sign-ins with one token get two sessions.
func TestSessionIsNotTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	c := signIn(t, b, "tok-alice")
	id := sessionCookie(t, c, b.url)
	if strings.Contains(id, "tok-alice") || strings.Contains(id, base64.RawURLEncoding.EncodeToString([]byte("tok-alice"))) ||
		strings.Contains(id, base64.StdEncoding.EncodeToString([]byte("tok-alice"))) {
		t.Fatalf("the session cookie %q holds the token", id)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(id); err != nil || len(raw) < 32 {
		t.Errorf("session id %q: want at least 32 random bytes, base64url", id)
	}
	if other := sessionCookie(t, signIn(t, b, "tok-alice"), b.url); other == id {
		t.Error("two sign-ins got the same session id")
	}
	replay := []string{"Cookie", console.SessionCookie + "=" + id}
	if r := do(t, nil, http.MethodGet, b.url+"/ui/calls", nil, replay...); r.code != http.StatusOK {
		t.Fatalf("the session cookie before sign-out: %d, want 200", r.code)
	}
	page := do(t, c, http.MethodGet, b.url+"/ui/calls", nil)
	if r := do(t, c, http.MethodPost, b.url+"/ui/signout", url.Values{"csrf": {csrfOf(t, page.doc, "/ui/signout")}}); r.code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", r.code)
	}
	if r := do(t, nil, http.MethodGet, b.url+"/ui/calls", nil, replay...); r.code != http.StatusSeeOther ||
		!strings.HasPrefix(r.hdr.Get("Location"), "/ui/signin") {
		t.Errorf("the session cookie replayed after sign-out: %d to %q, want 303 to the sign-in page", r.code, r.hdr.Get("Location"))
	}
}

// sessionCookie is the value of the client's session cookie for base.
func sessionCookie(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	u, _ := url.Parse(base + "/ui")
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == console.SessionCookie {
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}
