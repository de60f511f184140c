package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/apitest"
)

// TestServedByServer runs the console inside a real server with a token
// file: the sign-in cookie opens the console but not the API, the bearer
// header opens both, another principal's call is 404, a console cancel
// goes through the API's cancel path, and no page holds a token.
func TestServedByServer(t *testing.T) {
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
	base := apitest.Start(t, server.Config{NoUI: true})
	for _, p := range []string{"/ui", "/ui/calls", "/ui/static/console.js", "/console/"} {
		if r := do(t, nil, http.MethodGet, base+p, nil); r.code != http.StatusNotFound || !strings.Contains(r.raw, `"not_found"`) {
			t.Errorf("GET %s with NoUI: %d %s, want the API's 404", p, r.code, r.raw)
		}
	}
	on := apitest.Start(t, server.Config{})
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
