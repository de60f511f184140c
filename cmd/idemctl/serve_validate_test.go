package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// TestServeRefusesWhatTheServerRefuses: serve checks its flags with the
// server's own Validate, before anything starts: the refusal names the
// flag, is a usage error (exit 2), and leaves no database behind; that
// includes --instance-host, which only server.New used to check (a
// runtime error, after the port was bound). An unreadable token file is
// still a runtime error: the flags were fine.
func TestServeRefusesWhatTheServerRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "idem.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers must be at least 1, got 0"},
		{[]string{"--lease", "500ms"}, "--lease must be at least 1s, got 500ms"},
		{[]string{"--retention", "-1s"}, "--retention must not be negative"},
		{[]string{"--instance-host", "a/b"}, "--instance-host: "},
		{[]string{"--addr", "0.0.0.0:0"}, "without --auth-tokens anyone who can reach the port"},
		{[]string{"--addr", "0.0.0.0:0", "--insecure-no-auth", "--chaos"}, "--chaos makes the process exit on request"},
	} {
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db}, c.args...)
		// A serve that wrongly starts is stopped by the deadline (a hang
		// guard, not a timing assertion) and then exits 0, not 2.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, errOut, code := cliRunCtx(ctx, t, args...)
		cancel()
		if code != exitcode.Usage || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit %d and …%s…", c.args, code, errOut, exitcode.Usage, c.want)
		}
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("refused serve left %q behind", names)
	}
	_, errOut, code := cliRun(t, "serve", "--addr", "127.0.0.1:0", "--db", db, "--auth-tokens", filepath.Join(dir, "missing"))
	if code != exitcode.Error || !strings.Contains(errOut, "missing") {
		t.Errorf("serve with a missing token file: exit %d, stderr %q; want exit %d naming the file", code, errOut, exitcode.Error)
	}
}
