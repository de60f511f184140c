package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/authlimit"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
)

// TestServedByServer runs the console inside a real server with a token
// file: the sign-in cookie opens the console but not the API, the bearer
// header opens both, another principal's call is 404, a console cancel
// goes through the API's cancel path, and no page holds a token.
func TestServedByServer(t *testing.T) {
	t.Parallel()
	const aliceToken, bobToken = "alice-secret-token-1", "bob-secret-token-2"
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("alice:"+server.HashToken(aliceToken)+"\nbob:"+server.HashToken(bobToken)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := server.LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	base := servertest.Start(t, servertest.Options{Config: server.Config{Auth: auth}}).URL
	req := strings.NewReader(`{"tool":"sleep","args":{"seconds":10}}`)
	hreq, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tool-calls", req)
	hreq.Header.Set("Authorization", "Bearer "+aliceToken)
	hreq.Header.Set("Idempotency-Key", "alice-sleep")
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	var call struct {
		CallID string `json:"call_id"`
	}
	if err := json.NewDecoder(hresp.Body).Decode(&call); err != nil || call.CallID == "" {
		t.Fatalf("create: %d %v", hresp.StatusCode, err)
	}
	hresp.Body.Close()

	alice := client(t)
	if r := do(t, alice, http.MethodPost, base+"/ui/signin", url.Values{"token": {aliceToken}}); r.code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", r.code)
	}
	page := do(t, alice, http.MethodGet, base+"/ui/calls/"+call.CallID, nil)
	if page.code != http.StatusOK || !strings.Contains(text(page.doc), "alice-sleep") {
		t.Fatalf("alice's call page: %d", page.code)
	}
	if curl := textByID(t, page.doc, "curl"); !strings.Contains(curl, `"Authorization: Bearer $IDEMCTL_TOKEN"`) {
		t.Errorf("curl %q does not use $IDEMCTL_TOKEN", curl)
	}
	// The cookie is sent to /ui only (Path); sent to the API by hand, it
	// is not a credential there.
	ck := alice.Jar.Cookies(mustURL(t, base+"/ui"))
	if len(ck) == 0 {
		t.Fatal("no cookie for /ui")
	}
	if len(alice.Jar.Cookies(mustURL(t, base+"/v1/tool-calls"))) != 0 {
		t.Error("the session cookie is sent to the API")
	}
	var hdr []string
	for _, c := range ck {
		hdr = append(hdr, "Cookie", c.Name+"="+c.Value)
	}
	if r := do(t, nil, http.MethodGet, base+"/v1/tool-calls/"+call.CallID, nil, hdr...); r.code != http.StatusUnauthorized {
		t.Errorf("the API with the console's cookie: %d, want 401", r.code)
	}
	// The bearer header opens the console too; bob sees 404.
	if r := do(t, nil, http.MethodGet, base+"/ui/calls/"+call.CallID, nil, "Authorization", "Bearer "+aliceToken); r.code != http.StatusOK {
		t.Errorf("console with alice's bearer header: %d", r.code)
	}
	if r := do(t, nil, http.MethodGet, base+"/ui/calls/"+call.CallID, nil, "Authorization", "Bearer "+bobToken); r.code != http.StatusNotFound {
		t.Errorf("bob reading alice's call: %d, want 404", r.code)
	}
	// Cancel from the console: the API then shows the call canceled
	// (running: cancel requested, then failed canceled by its worker).
	action := "/ui/calls/" + call.CallID + "/cancel"
	confirm := do(t, alice, http.MethodGet, base+action, nil)
	r := do(t, alice, http.MethodPost, base+action, url.Values{"csrf": {csrfOf(t, confirm.doc, action)}})
	if r.code != http.StatusSeeOther || !strings.Contains(r.hdr.Get("Location"), "?cancel=") {
		t.Fatalf("cancel: %d to %q", r.code, r.hdr.Get("Location"))
	}
	got := do(t, nil, http.MethodGet, base+"/v1/tool-calls/"+call.CallID+"?wait=10", nil,
		"Authorization", "Bearer "+aliceToken, "Prefer", "wait=10")
	if !strings.Contains(got.raw, `"canceled"`) {
		t.Errorf("after a console cancel the API shows %s", got.raw)
	}
	for _, p := range []resp{page, confirm} {
		if strings.Contains(p.raw, aliceToken) || strings.Contains(p.raw, server.HashToken(aliceToken)) {
			t.Error("a page holds the token or its hash")
		}
	}
}

// TestServerNoUI: with NoUI the console's paths are the API's 404.
func TestServerNoUI(t *testing.T) {
	t.Parallel()
	base := servertest.Start(t, servertest.Options{Config: server.Config{NoUI: true}}).URL
	for _, p := range []string{"/ui", "/ui/calls", "/ui/static/console.js", "/console/"} {
		if r := do(t, nil, http.MethodGet, base+p, nil); r.code != http.StatusNotFound || !strings.Contains(r.raw, `"not_found"`) {
			t.Errorf("GET %s with NoUI: %d %s, want the API's 404", p, r.code, r.raw)
		}
	}
	on := servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
	if r := do(t, nil, http.MethodGet, on+"/ui", nil); r.code != http.StatusOK {
		t.Errorf("GET /ui by default: %d", r.code)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// authServer starts a real server whose token file holds tokens (token to
// principal) and returns its URL, the file and the Auth that reads it.
func authServer(t *testing.T, cfg server.Config, tokens map[string]string) (string, string, *server.Auth) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokenFile(t, path, tokens)
	auth, err := server.LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth = auth
	return servertest.Start(t, servertest.Options{Config: cfg}).URL, path, auth
}

func writeTokenFile(t *testing.T, path string, tokens map[string]string) {
	t.Helper()
	var lines strings.Builder
	for tok, p := range tokens {
		lines.WriteString(p + ":" + server.HashToken(tok) + "\n")
	}
	if err := os.WriteFile(path, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSessionEndsWithItsToken: a token removed from the token file (and
// the file reloaded, as SIGHUP does) ends the console sessions signed in
// with it at their next page; another token's session goes on.
func TestSessionEndsWithItsToken(t *testing.T) {
	t.Parallel()
	const aliceToken, bobToken = "alice-secret-token-1", "bob-secret-token-2"
	base, path, auth := authServer(t, server.Config{}, map[string]string{aliceToken: "alice", bobToken: "bob"})
	alice, bob := client(t), client(t)
	for c, tok := range map[*http.Client]string{alice: aliceToken, bob: bobToken} {
		if r := do(t, c, http.MethodPost, base+"/ui/signin", url.Values{"token": {tok}}); r.code != http.StatusSeeOther {
			t.Fatalf("sign in: %d", r.code)
		}
	}
	writeTokenFile(t, path, map[string]string{bobToken: "bob"})
	if err := auth.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := do(t, alice, http.MethodGet, base+"/ui/calls", nil); r.code != http.StatusSeeOther || !strings.HasPrefix(r.hdr.Get("Location"), "/ui/signin") {
		t.Errorf("alice's session after her token was revoked: %d to %q, want the sign-in page", r.code, r.hdr.Get("Location"))
	}
	if r := do(t, bob, http.MethodGet, base+"/ui/calls", nil); r.code != http.StatusOK {
		t.Errorf("bob's session after alice's token was revoked: %d, want 200", r.code)
	}
}

// TestSecureCookieBehindProxy: the console's cookies are Secure when a
// trusted proxy says the client used HTTPS, and only then: the same
// header from a peer that is not a trusted proxy changes nothing.
func TestSecureCookieBehindProxy(t *testing.T) {
	t.Parallel()
	const token = "alice-secret-token-1"
	tokens := map[string]string{token: "alice"}
	proxied, _, _ := authServer(t, server.Config{TrustedProxies: []string{"127.0.0.0/8"}}, tokens)
	direct, _, _ := authServer(t, server.Config{}, tokens)
	for _, tc := range []struct {
		name, base string
		hdr        []string
		secure     bool
	}{
		{"trusted proxy, https", proxied, []string{"X-Forwarded-Proto", "https"}, true},
		{"trusted proxy, http", proxied, []string{"X-Forwarded-Proto", "http"}, false},
		{"trusted proxy, no header", proxied, nil, false},
		{"no trusted proxy, https header", direct, []string{"X-Forwarded-Proto", "https"}, false},
	} {
		r := do(t, nil, http.MethodPost, tc.base+"/ui/signin", url.Values{"token": {token}}, tc.hdr...)
		cookies := (&http.Response{Header: r.hdr}).Cookies()
		if r.code != http.StatusSeeOther || len(cookies) != 2 {
			t.Fatalf("%s: sign in %d with %d cookies", tc.name, r.code, len(cookies))
		}
		for _, ck := range cookies {
			if ck.Secure != tc.secure {
				t.Errorf("%s: cookie %s Secure=%v, want %v", tc.name, ck.Name, ck.Secure, tc.secure)
			}
		}
	}
}

// TestFailedSignInsThrottled: after its burst of wrong tokens (at the
// sign-in form or as a bearer header) a client address is refused 429
// with Retry-After, by the console and the API alike, even with the right
// token, and without the token being checked; another client (as a
// trusted proxy reports it) is not affected.
func TestFailedSignInsThrottled(t *testing.T) {
	t.Parallel()
	const token = "alice-secret-token-1"
	base, _, _ := authServer(t, server.Config{TrustedProxies: []string{"127.0.0.0/8"}}, map[string]string{token: "alice"})
	attacker := []string{"X-Forwarded-For", "198.51.100.7"}
	for i := range authlimit.DefaultBurst {
		var r resp
		if i%2 == 0 {
			r = do(t, nil, http.MethodPost, base+"/ui/signin", url.Values{"token": {fmt.Sprintf("guess-%d", i)}}, attacker...)
		} else {
			r = do(t, nil, http.MethodGet, base+"/v1/tool-calls", nil, append(attacker, "Authorization", fmt.Sprintf("Bearer guess-%d", i))...)
		}
		if r.code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, r.code)
		}
	}
	signin := do(t, nil, http.MethodPost, base+"/ui/signin", url.Values{"token": {token}}, attacker...)
	if signin.code != http.StatusTooManyRequests || signin.hdr.Get("Retry-After") == "" || len(signin.hdr.Values("Set-Cookie")) != 0 {
		t.Errorf("sign-in with the right token after the burst: %d, Retry-After %q, cookies %v; want 429 and no session",
			signin.code, signin.hdr.Get("Retry-After"), signin.hdr.Values("Set-Cookie"))
	}
	api := do(t, nil, http.MethodGet, base+"/v1/tool-calls", nil, append(attacker, "Authorization", "Bearer "+token)...)
	if api.code != http.StatusTooManyRequests || !strings.Contains(api.raw, `"auth_throttled"`) || api.hdr.Get("Retry-After") == "" {
		t.Errorf("the API with the right token after the burst: %d %s, Retry-After %q; want 429 auth_throttled", api.code, api.raw, api.hdr.Get("Retry-After"))
	}
	other := []string{"X-Forwarded-For", "203.0.113.9"}
	if r := do(t, nil, http.MethodGet, base+"/v1/tool-calls", nil, append(other, "Authorization", "Bearer "+token)...); r.code != http.StatusOK {
		t.Errorf("another client with the right token: %d, want 200", r.code)
	}
	if r := do(t, nil, http.MethodPost, base+"/ui/signin", url.Values{"token": {token}}, other...); r.code != http.StatusSeeOther {
		t.Errorf("another client signing in: %d, want 303", r.code)
	}
}
