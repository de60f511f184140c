package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
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
		{[]string{"--webhook-retry-for", "0s"}, "--webhook-retry-for and --webhook-timeout must be positive"},
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
