package main

import (
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// TestCallAndPollRefuseBadBase: a --base that is not an http(s) URL is a
// usage error (exit 2) before any request, not four retried "attempts"
// ending in retry_exhausted, nor a poll spinning until its deadline.
func TestCallAndPollRefuseBadBase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"call", "--key", "K", "--base", "nothttp"},
		{"call", "--key", "K", "--base", "ftp://127.0.0.1:8081"},
		{"poll", "c_0123456789abcdef", "--base", "nothttp", "--timeout", "1m"},
		{"poll", "--key", "K", "--base", "127.0.0.1:8081", "--timeout", "1m"},
	} {
		out, errOut, code := cliRun(t, args...)
		if code != exitcode.Usage || out != "" || !strings.Contains(errOut, "--base") {
			t.Errorf("idemctl %s: exit %d, stdout %q, stderr %q; want exit 2, no output, an error naming --base",
				strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestCallArgsNullSaysNull: --args null is refused with a message that says
// what was wrong, not "<nil>".
func TestCallArgsNullSaysNull(t *testing.T) {
	t.Parallel()
	o := callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Args: "null"}
	err := o.Validate()
	if err == nil || strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), "null") {
		t.Fatalf("Validate = %v, want an error saying --args was null", err)
	}
}

// TestInspectErrorHidesPassword: inspect's "opening DB" error printed the
// DSN as given, password included; serve already redacted it.
func TestInspectErrorHidesPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
		"postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=2&password=hunter2",
		"host=127.0.0.1 port=1 user=u password=hunter2 dbname=db sslmode=disable connect_timeout=2",
		"host=127.0.0.1 port=1 user=u password='hunter2 x' dbname=db sslmode=disable connect_timeout=2",
	} {
		_, errOut, code := cliRun(t, "inspect", "stats", "--db", dsn)
		if code != exitcode.Error || errOut == "" || strings.Contains(errOut, "hunter2") {
			t.Errorf("inspect --db %s: exit %d, stderr %q; want an error without the password", dsn, code, errOut)
		}
	}
}
