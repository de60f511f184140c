package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/store"
)

// TestBrowserForms submits the console's forms in headless Chromium as a
// person does, against a real server with a token file: opening a call's
// page leads to the sign-in form, where the token is typed and Enter
// pressed; the browser lands signed in on that page; Cancel and its
// confirmation then cancel the pending call, which the API shows failed
// with code canceled. A browser's own request headers (Origin,
// Sec-Fetch-Site, the Referrer-Policy's effect on them) are what the
// console's CSRF checks see here, which no Go client reproduces.
func TestBrowserForms(t *testing.T) {
	ctx, browserErrors := startBrowser(t)
	const token = "alice-browser-token-1"
	base := startAuthServer(t, map[string]string{token: "alice"})
	id := apiCreate(t, base, token, "browser-cancel", `{"tool":"charge","args":{"amount":7}}`)

	// Signing in: the call's page sends the browser to the form, which
	// sends it back there once the typed token is accepted.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/calls/"+id),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
	); err != nil {
		t.Fatalf("opening the call's page signed out: %v", err)
	}
	signinURL, _ := chromedp.Run(ctx, chromedp.Location())
	if !strings.Contains(signinURL, "/ui/signin?next=") {
		t.Fatalf("signed out, the call's page led to %s, want the sign-in form", signinURL)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token+kb.Enter)); err != nil {
		t.Fatalf("typing the token: %v", err)
	}
	if !settled(t, ctx, "#timeline") {
		t.Fatalf("typing the token and pressing Enter did not sign in: the browser shows %q", pageText(ctx))
	}
	heading, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1")))
	location, _ := chromedp.Run(ctx, chromedp.Location())
	if !strings.HasSuffix(location, "/ui/calls/"+id) || !strings.Contains(heading, id) {
		t.Fatalf("after signing in: %s with heading %q, want the call's page", location, heading)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action="/ui/signout"]').length`)); err != nil || n != 1 {
		t.Errorf("signed-in page has %d sign-out forms (%v), want 1", n, err)
	}

	// Canceling: the call page's Cancel, then the confirmation's button.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-cancel")),
		chromedp.Click(chromedp.CSS("#confirm-cancel")),
	); err != nil {
		t.Fatalf("clicking Cancel and its confirmation: %v", err)
	}
	if !settled(t, ctx, "#notice") {
		t.Fatalf("clicking Cancel and confirming did not cancel: the browser shows %q", pageText(ctx))
	}
	if notice, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#notice"))); !strings.Contains(notice, "canceled") {
		t.Errorf("notice after cancel: %q", notice)
	}
	call := apiGet(t, base, token, id)
	if call.Status != store.StatusFailed || call.Error.Code != "canceled" {
		t.Errorf("the API shows the call %s with error %q, want failed canceled", call.Status, call.Error.Code)
	}
	for _, e := range browserErrors() {
		t.Errorf("browser reported an error: %s", e)
	}
}

// settled waits until the page the browser is on is loaded and is either
// the one that holds want (true) or an error page or the sign-in form with
// its complaint (false), so a refused form fails at once with the page's
// own words rather than at a timeout.
func settled(t *testing.T, ctx context.Context, want string) bool {
	t.Helper()
	js := fmt.Sprintf(`document.readyState === "complete" && (document.querySelector(%q) ? "want" :
		document.querySelector("p.message, #signin-error") ? "refused" : "")`, want)
	// Evaluated again and again, not polled in the page: a poll started
	// while the form's navigation is under way loses its page.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		switch got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](js)); got {
		case "want":
			return true
		case "refused":
			return false
		}
	}
	t.Fatalf("waiting for %s or a refusal: the browser shows %q", want, pageText(ctx))
	return false
}

// pageText is the visible text of the browser's page, for a failure.
func pageText(ctx context.Context) string {
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	return strings.Join(strings.Fields(s), " ")
}

// startAuthServer serves the real API and console with a token file of
// tokens (token to principal) on a fresh SQLite database, without its
// executor: calls stay pending, so a test can cancel one.
func startAuthServer(t *testing.T, tokens map[string]string) string {
	t.Helper()
	var lines strings.Builder
	for tok, principal := range tokens {
		lines.WriteString(principal + ":" + server.HashToken(tok) + "\n")
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := server.LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, servertest.Options{NoExecutor: true,
		Config: server.Config{Auth: auth, Logger: slog.New(slog.DiscardHandler)}}).URL
}

// apiCall is what the form tests read of a call through the API.
type apiCall struct {
	CallID string       `json:"call_id"`
	Status store.Status `json:"status"`
	Error  struct {
		Code string `json:"code"`
	} `json:"error"`
}

// apiCreate records a call through the API and returns its id.
func apiCreate(t *testing.T, base, token, key, body string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tool-calls", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	c := apiDo(t, req)
	if c.CallID == "" {
		t.Fatalf("POST %s: no call id", key)
	}
	return c.CallID
}

// apiGet reads a call through the API.
func apiGet(t *testing.T, base, token, id string) apiCall {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/tool-calls/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return apiDo(t, req)
}

func apiDo(t *testing.T, req *http.Request) apiCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var c apiCall
	if resp.StatusCode >= 300 || json.Unmarshal(raw, &c) != nil {
		t.Fatalf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, raw)
	}
	return c
}
