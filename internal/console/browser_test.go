package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/tool"
)

// screenshots, when set, is where TestBrowser also writes its PNGs: the
// README's images are made with
//
//	go test ./internal/console -run TestBrowser -args -screenshots=$PWD/docs/img
var screenshots = flag.String("screenshots", "", "also write the browser test's screenshots to this directory")

// findBrowser is the Chromium the browser test drives: $IDEMCTL_CHROME, or
// the first of the usual names on PATH.
func findBrowser() string {
	if p := os.Getenv("IDEMCTL_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestBrowser opens the overview and a call page in headless Chromium,
// waits for the charts and the timeline, checks the visible text, sees the
// overview refresh itself after a new call, saves screenshots, and fails
// on any JavaScript error, console error or CSP violation on the pages.
func TestBrowser(t *testing.T) {
	ctx, browserErrors := startBrowser(t)
	base, showcase := startDemoServer(t)

	dir := t.TempDir()
	// shot saves a screenshot in the test's temp dir and, for the README's
	// pictures (docs true), in -screenshots.
	shot := func(name string, docs bool) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		for _, d := range []string{dir, *screenshots} {
			if d == "" || (d == *screenshots && !docs) {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("screenshot %s (%d bytes) in %s", name, len(png), dir)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("counting %s: %v", sel, err)
		}
		return n
	}

	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui"),
		chromedp.WaitVisible(chromedp.CSS("#rates-chart polyline.created")),
		chromedp.WaitVisible(chromedp.CSS("#attempts-chart rect.bar")),
	); err != nil {
		t.Fatalf("overview: %v", err)
	}
	succeeded, legend, calls := text("#count-succeeded"), text("#rates .legend"), text("#calls")
	if succeeded == "" || succeeded == "0" || count("#attempts-chart rect.bar") < 2 || !strings.Contains(legend, "accepted") {
		t.Errorf("overview shows succeeded %q, %d attempt bars, legend %q", succeeded, count("#attempts-chart rect.bar"), legend)
	}
	// A new call: the overview's call count follows without a reload (a
	// mark set on the document survives only an in-place refresh).
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.body.dataset.marker = "same-document"`)); err != nil {
		t.Fatal(err)
	}
	postCall(t, base, "late-call")
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		fmt.Sprintf(`document.getElementById("calls").textContent.trim() !== %q`, calls),
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(200*time.Millisecond))); err != nil {
		t.Fatalf("the overview did not refresh after a new call (calls %q): %v", calls, err)
	}
	if m, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.marker || ""`)); err != nil || m != "same-document" {
		t.Errorf("the overview was reloaded, not refreshed in place (%q, %v)", m, err)
	}
	// Let the new call finish, so the picture shows a quiet queue.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("depth").textContent.trim() === "0"`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(200*time.Millisecond))); err != nil {
		t.Fatalf("queue depth did not return to 0: %v", err)
	}
	shot("console-overview.png", true)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/calls/"+showcase),
		chromedp.WaitVisible(chromedp.CSS("#timeline")),
	); err != nil {
		t.Fatalf("call page: %v", err)
	}
	heading, timeline, curl := text("h1"), text("#timeline"), text("#curl")
	if !strings.Contains(heading, showcase) || !strings.Contains(heading, "succeeded") {
		t.Errorf("call heading %q", heading)
	}
	for _, want := range []string{"claimed", "retry_scheduled", "fenced", "outcome_unknown", "recover", "heartbeats"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("timeline lacks %q: %q", want, timeline)
		}
	}
	if n := count("#timeline li.ev"); n != 9 || !strings.Contains(curl, "/v1/tool-calls/"+showcase) {
		t.Errorf("%d timeline events (want 9), curl %q", n, curl)
	}
	shot("console-call.png", true)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/calls?key=order-"),
		chromedp.WaitVisible(chromedp.CSS("#calls-table")),
	); err != nil {
		t.Fatalf("calls page: %v", err)
	}
	shot("console-calls.png", false)
	for _, e := range browserErrors() {
		t.Errorf("browser reported an error: %s", e)
	}
}

// startBrowser starts headless Chromium for the test (skipping it when
// there is none) and returns a context to drive it with, and a function
// that lists every console error, uncaught exception and browser-log error
// (a CSP violation, a failed load) the pages have reported so far.
func startBrowser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	bin := findBrowser()
	if bin == "" {
		t.Skip("console browser test: no Chromium found (install Debian's chromium, or set IDEMCTL_CHROME); .ci/run installs it and fails if this test skips")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// The first action starts the browser and must run without a timeout
	// (the browser lives as long as that context); later ones get one.
	messages := chromedp.Console(bctx)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)
	var (
		mu   sync.Mutex
		errs []string
	)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String()+" at "+m.URL)
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// postCall submits a charge call through the API.
func postCall(t *testing.T, base, key string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tool-calls",
		strings.NewReader(`{"tool":"charge","args":{"amount":5}}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: %d", key, resp.StatusCode)
	}
}

// startDemoServer runs a real server (auth off) on a SQLite database
// holding half an hour of made-up traffic, and returns its URL and the id
// of a call with an eventful history (a retry with heartbeats, a fenced
// completion, a recovery, then success).
func startDemoServer(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlite.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // if seeding fails; Start closes it too
	showcase := seed(t, st, path)
	srv := servertest.Start(t, servertest.Options{Store: st, Config: server.Config{Logger: slog.New(slog.DiscardHandler)}})
	return srv.URL, showcase
}

// seed writes the demo traffic straight through the store, then spreads
// the calls' times over the last 30 minutes with plain SQL.
func seed(t *testing.T, st store.Store, path string) string {
	t.Helper()
	ctx := t.Context()
	n := 0
	newCall := func(key, tool, args string) store.Call {
		n++
		c, _, err := st.CreateOrGet(ctx, store.NewCall{CallID: fmt.Sprintf("c_%016x", 0xa11ce000+n), IdemKey: key,
			Fingerprint: "fp-" + key, Tool: tool, ArgsJSON: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	claim := func(id, owner string) store.Call {
		for range 200 {
			got, err := st.ClaimNext(ctx, owner, time.Minute, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 1 {
				if got[0].CallID != id {
					t.Fatalf("claimed %s, want %s", got[0].CallID, id)
				}
				return got[0]
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("could not claim %s", id)
		return store.Call{}
	}
	succeed := func(c store.Call, ext int64) {
		var args struct{ Amount int64 }
		_ = json.Unmarshal(c.ArgsJSON, &args)
		comp := store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt}, Extensions: ext,
			Result: json.RawMessage(`{"ok":true}`)}
		if c.Tool == "charge" {
			comp.Result = json.RawMessage(fmt.Sprintf(`{"charged":%d,"effect_id":%q}`, args.Amount, tool.EffectID(c.CallID)))
			comp.Effect = &store.Effect{EffectID: tool.EffectID(c.CallID), CallID: c.CallID, Tool: "charge", Amount: &args.Amount}
		}
		if _, err := st.Succeed(ctx, comp); err != nil {
			t.Fatal(err)
		}
	}
	downstream := json.RawMessage(`{"code":"downstream_error","message":"503 Service Unavailable","retryable":true}`)
	owners := []string{"web-1/4121", "web-2/977", "web-3/3310"}
	for i := range 90 {
		tool := []string{"charge", "send_email", "sleep"}[i%3]
		args := []string{fmt.Sprintf(`{"amount":%d}`, 100+i), fmt.Sprintf(`{"to":"customer%d@example.com","subject":"Your receipt"}`, i), `{"seconds":0.2}`}[i%3]
		c := newCall(fmt.Sprintf("order-%04d", 1000+i), tool, args)
		c = claim(c.CallID, owners[i%3])
		switch {
		case i%11 == 0: // a retry, then success
			if _, err := st.ScheduleRetry(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt}, Error: downstream}, 0); err != nil {
				t.Fatal(err)
			}
			succeed(claim(c.CallID, owners[(i+1)%3]), 0)
		case i%13 == 5: // a final failure
			if _, err := st.Fail(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt},
				Error: json.RawMessage(`{"code":"tool_failed","message":"card declined","retryable":false}`)}); err != nil {
				t.Fatal(err)
			}
		default:
			succeed(c, int64(i%2))
		}
	}
	// The showcase: attempt 1 fails retryably after two heartbeats and is
	// retried; attempt 2's owner dies and the call is recovered; attempt
	// 1's late completion is fenced; attempt 3 succeeds.
	c := newCall("invoice-2041", "charge", `{"amount":2041,"currency":"EUR","customer":"cus_8812"}`)
	a1 := claim(c.CallID, owners[0])
	if _, err := st.ScheduleRetry(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: owners[0], Attempt: a1.Attempt}, Extensions: 2, Error: downstream},
		150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	a2 := claim(c.CallID, owners[1])
	if err := st.Release(ctx, store.Lease{CallID: c.CallID, Owner: owners[1], Attempt: a2.Attempt}, "owner web-2/977 exited (pid gone)"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Succeed(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: owners[0], Attempt: a1.Attempt}, Result: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("a stale completion was not fenced")
	}
	succeed(claim(c.CallID, owners[2]), 1)

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Spread the traffic over 30 minutes, busier lately; the showcase
	// stays as it happened.
	if _, err := db.ExecContext(ctx, `UPDATE calls SET
		created_at = created_at - ((abs(random()) % 1000) / 1000.0) * ((abs(random()) % 1000) / 1000.0) * 1750,
		updated_at = created_at + 0.05 WHERE idem_key LIKE 'order-%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE calls SET updated_at = created_at + 0.4 + (abs(random()) % 100) / 100.0
		WHERE idem_key LIKE 'order-%'`); err != nil {
		t.Fatal(err)
	}
	return c.CallID
}
