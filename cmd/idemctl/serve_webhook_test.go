package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/webhook"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestServeWebhookFlags: a bad --webhook-allow or --webhook-default stops
// serve with a usage error (exit 2) naming the problem, before anything
// starts, and never shows a secret: one given literally instead of as
// ${VAR}, or the value of the variable named.
func TestServeWebhookFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "idem.db")
	// PATH stands for a variable that is set: its value must not appear.
	secret := os.Getenv("PATH")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook-allow", "https://hooks.example.com/ whsec_literal_value"}, "must be given as ${VAR}"},
		{[]string{"--webhook-allow", "https://hooks.example.com/"}, "every endpoint needs a signing secret"},
		{[]string{"--webhook-allow", "https://hooks.example.com/ ${WEBHOOK_TEST_SURELY_UNSET}"}, "WEBHOOK_TEST_SURELY_UNSET is not set or empty"},
		{[]string{"--webhook-allow", "ftp://hooks.example.com/ ${PATH}"}, "absolute http or https URL"},
		{[]string{"--webhook-allow", "https://hooks.*.com/ ${PATH}"}, "'*' may only begin the host"},
		{[]string{"--webhook-default", "*=https://hooks.example.com/"}, "delivers no webhooks"},
		{[]string{"--webhook-allow", "https://hooks.example.com/a ${PATH}", "--webhook-default", "alice=https://hooks.example.com/b"}, "no --webhook-allow pattern"},
		{[]string{"--webhook-retry-for", "-1s"}, "--webhook-retry-for and --webhook-timeout must not be negative"},
	} {
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db}, c.args...)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a hang guard
		_, errOut, code := cliRunCtx(ctx, t, args...)
		cancel()
		if code != exitcode.Usage || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit %d and …%s…", c.args, code, errOut, exitcode.Usage, c.want)
		}
		if strings.Contains(errOut, "whsec_literal_value") || (secret != "" && strings.Contains(errOut, secret)) {
			t.Errorf("serve %v: stderr shows the secret: %q", c.args, errOut)
		}
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("refused serve left %q behind", names)
	}
}

// TestCallNotifyURL: `idemctl call --notify-url` against a real server
// that allows it delivers the final call there, signed; against one that
// does not, the call is refused (exit 1, notify_url_not_allowed) and
// nothing is recorded.
func TestCallNotifyURL(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec_cli_test")
	got := make(chan client.Webhook, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook, err := client.ReadWebhook(r, secret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- hook
	}))
	t.Cleanup(recv.Close)
	ep, err := webhook.ParseEndpoint(recv.URL+"/ ${S}", func(string) string { return string(secret) })
	if err != nil {
		t.Fatal(err)
	}
	allow, err := webhook.NewAllow([]webhook.Endpoint{ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	on := servertest.Start(t, servertest.Options{Config: server.Config{Webhooks: webhook.Config{Allow: allow, Poll: 20 * time.Millisecond}}})
	out, errOut, code := cliRun(t, "call", "--base", on.URL, "--key", "cli-hook", "--amount", "3", "--notify-url", recv.URL+"/hooks")
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	lines := cliLines(t, out)
	callID, _ := lines[len(lines)-1]["call_id"].(string)
	select {
	case hook := <-got:
		if hook.Call.CallID != callID || hook.Call.Status != wire.StatusSucceeded {
			t.Fatalf("delivered %s %s, want %s succeeded", hook.Call.CallID, hook.Call.Status, callID)
		}
	case <-time.After(10 * time.Second): // a hang guard
		t.Fatal("no delivery")
	}

	off := servertest.Start(t, servertest.Options{})
	out, errOut, code = cliRun(t, "call", "--base", off.URL, "--key", "cli-hook", "--amount", "3", "--notify-url", recv.URL+"/hooks")
	if code != exitcode.Failed || !strings.Contains(out+errOut, wire.CodeNotifyURLNotAllowed) {
		t.Fatalf("on a server without webhooks: exit %d, %s %s; want 1 and notify_url_not_allowed", code, out, errOut)
	}
	if st, err := off.Store.Stats(t.Context()); err != nil || st.Calls != 0 {
		t.Fatalf("a refused call was recorded: %+v, %v", st, err)
	}
}
