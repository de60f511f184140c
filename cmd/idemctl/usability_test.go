package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// TestInspectMissingSQLiteFileSaysSo: a --db that does not exist is
// reported as such, with the --db value, as a runtime error (exit 4, not
// the usage status 2), and no file is created.
func TestInspectMissingSQLiteFileSaysSo(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.db")
	_, errOut, code := cliRun(t, "inspect", "stats", "--db", path)
	if code != exitcode.Error || !strings.Contains(errOut, "does not exist") || !strings.Contains(errOut, "--db "+path) {
		t.Errorf("exit %d, stderr %q; want exit %d saying --db %s does not exist", code, errOut, exitcode.Error, path)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("inspect created %s (stat: %v)", path, err)
	}
}

// TestInspectAuditUnknownCallNamesIt: "store: not found" alone did not say
// what was looked for.
func TestInspectAuditUnknownCallNamesIt(t *testing.T) {
	t.Parallel()
	path, _ := inspectDB(t)
	_, errOut, code := cliRun(t, "inspect", "audit", "c_ffffffffffffffff", "--db", path)
	if code != exitcode.Failed || !strings.Contains(errOut, "inspect audit c_ffffffffffffffff") || !strings.Contains(errOut, "no call c_ffffffffffffffff") {
		t.Errorf("exit %d, stderr %q; want exit %d naming the command and the call", code, errOut, exitcode.Failed)
	}
}

// TestInspectLimitNotice: a listing cut by --limit says so on stderr, with
// the total; stdout keeps only the rows (JSON stays an array of them); an
// uncut listing says nothing.
func TestInspectLimitNotice(t *testing.T) {
	t.Parallel()
	path, _ := inspectDB(t) // two calls, one effect, four audit rows
	out, errOut, code := cliRun(t, "inspect", "calls", "--db", path, "--limit", "1", "-o", "json")
	var rows []map[string]any
	if code != exitcode.OK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errOut, "showing 1 of 2 calls") {
		t.Errorf("calls --limit 1: stderr %q, want the truncation notice", errOut)
	}
	if _, errOut, _ := cliRun(t, "inspect", "calls", "--db", path, "--limit", "1"); !strings.Contains(errOut, "showing 1 of 2 calls") {
		t.Errorf("table: stderr %q, want the truncation notice", errOut)
	}
	if _, errOut, _ := cliRun(t, "inspect", "audit", "--db", path, "--limit", "2"); !strings.Contains(errOut, "showing the newest 2 audit rows") {
		t.Errorf("audit --limit 2: stderr %q, want the truncation notice", errOut)
	}
	for _, args := range [][]string{
		{"inspect", "calls", "--db", path, "--limit", "2"},
		{"inspect", "calls", "--db", path, "--status", "pending", "--limit", "1"},
		{"inspect", "effects", "--db", path, "--limit", "1"},
		{"inspect", "audit", "--db", path},
	} {
		if _, errOut, code := cliRun(t, args...); code != exitcode.OK || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q; want no notice for a complete listing", args, code, errOut)
		}
	}
}

// TestBadEnvValueNamesTheVariable: the error names IDEMCTL_RETRIES, not
// "config value for --retries", and is a usage error sent before anything.
func TestBadEnvValueNamesTheVariable(t *testing.T) {
	clearEnv(t)
	t.Setenv("IDEMCTL_RETRIES", "many")
	_, errOut, code := cliRun(t, "call", "--key", "K", "--base", "http://127.0.0.1:1")
	if code != exitcode.Usage || !strings.Contains(errOut, "environment variable IDEMCTL_RETRIES") {
		t.Errorf("exit %d, stderr %q; want exit 2 naming IDEMCTL_RETRIES", code, errOut)
	}
}

// TestUnknownEnvVariableWarns: a misspelled IDEMCTL_* variable gets a
// warning (and the command still runs); variables that name some command's
// flag, and those read on purpose, get none.
func TestUnknownEnvVariableWarns(t *testing.T) {
	clearEnv(t)
	t.Setenv("IDEMCTL_WORKER", "3") // typo of IDEMCTL_WORKERS
	t.Setenv("IDEMCTL_HELP", "1")   // a flag, but never read from the environment
	t.Setenv("IDEMCTL_WORKERS", "3")
	t.Setenv("IDEMCTL_BASE", "http://127.0.0.1:1")
	t.Setenv("IDEMCTL_DB", "x.db")
	t.Setenv("IDEMCTL_TEST_POSTGRES_URL", os.Getenv("IDEMCTL_TEST_POSTGRES_URL")+"x")
	out, errOut, code := cliRun(t, "version")
	if code != exitcode.OK || !strings.HasPrefix(out, "idemctl ") {
		t.Fatalf("version: exit %d, stdout %q", code, out)
	}
	for _, name := range []string{"IDEMCTL_WORKER", "IDEMCTL_HELP"} {
		if !strings.Contains(errOut, "warning: ignoring "+name+":") {
			t.Errorf("stderr %q, want a warning about %s", errOut, name)
		}
	}
	for _, name := range []string{"IDEMCTL_WORKERS", "IDEMCTL_BASE", "IDEMCTL_DB", "IDEMCTL_TEST_POSTGRES_URL"} {
		if strings.Contains(errOut, name+":") {
			t.Errorf("stderr %q warns about %s, which is read on purpose", errOut, name)
		}
	}
}

// TestDeprecatedTimeoutAlias: --timeout still sets call's per-attempt
// timeout, with a notice on stderr (never stdout); the new name, wherever it
// comes from, beats the old one.
func TestDeprecatedTimeoutAlias(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
		note bool
	}{
		{"old flag", nil, []string{"--timeout", "3s"}, "3s", true},
		{"old env", map[string]string{"IDEMCTL_TIMEOUT": "3s"}, nil, "3s", true},
		{"new flag beats old env", map[string]string{"IDEMCTL_TIMEOUT": "3s"}, []string{"--attempt-timeout", "4s"}, "4s", false},
		{"new env beats old env", map[string]string{"IDEMCTL_TIMEOUT": "3s", "IDEMCTL_ATTEMPT_TIMEOUT": "4s"}, nil, "4s", false},
		{"old flag beats new env", map[string]string{"IDEMCTL_ATTEMPT_TIMEOUT": "4s"}, []string{"--timeout", "3s"}, "3s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got string
			root := newRootCmd(&IOStreams{Out: &strings.Builder{}, ErrOut: &strings.Builder{}})
			var errOut strings.Builder
			root.SetErr(&errOut)
			probe := &cobra.Command{Use: "probe", RunE: func(c *cobra.Command, _ []string) error {
				got = c.Flags().Lookup("attempt-timeout").Value.String()
				return nil
			}}
			probe.Flags().Duration("attempt-timeout", 0, "")
			addDeprecatedAlias(probe.Flags(), "attempt-timeout", "timeout")
			root.AddCommand(probe)
			root.SetArgs(append([]string{"probe"}, tc.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("attempt-timeout = %s, want %s", got, tc.want)
			}
			if note := strings.Contains(errOut.String(), "--timeout (or IDEMCTL_TIMEOUT) is deprecated, use --attempt-timeout"); note != tc.note {
				t.Errorf("stderr %q: deprecation notice %v, want %v", errOut.String(), note, tc.note)
			}
		})
	}
}

// TestCallTimeoutFlagNames: each command's timeout has its own name, and
// the old --timeout still works (with the notice on stderr only).
func TestCallTimeoutFlagNames(t *testing.T) {
	clearEnv(t)
	for cmd, name := range map[string]string{"call": "attempt-timeout", "poll": "deadline", "bench": "request-timeout"} {
		c, _, err := newRootCmd(defaultStreams()).Find([]string{cmd})
		if err != nil || c.Flags().Lookup(name) == nil || aliasOf(c.Flags().Lookup("timeout")) != name {
			t.Errorf("%s: --%s missing or --timeout not its alias (%v)", cmd, name, err)
		}
	}
	fs := newCLIFakeServer(t, []func(http.ResponseWriter){cliAnswer(200, cliCall("succeeded"))}, nil)
	out, errOut, code := cliRun(t, "call", "--base", fs.URL, "--key", "K", "--timeout", "2s")
	if code != exitcode.OK || !strings.Contains(errOut, "deprecated") || strings.Contains(out, "deprecated") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCallAmountAndArgsAmountRefused: --amount 5 with {"amount":7} in
// --args used to send 5 silently; it is a usage error and sends nothing.
func TestCallAmountAndArgsAmountRefused(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t, []func(http.ResponseWriter){cliAnswer(200, cliCall("succeeded"))}, nil)
	out, errOut, code := cliRun(t, "call", "--base", fs.URL, "--key", "K", "--amount", "5", "--args", `{"amount":7}`)
	if code != exitcode.Usage || out != "" || !strings.Contains(errOut, "--amount") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 naming --amount", code, out, errOut)
	}
	if keys := fs.postKeys(); len(keys) != 0 {
		t.Errorf("a refused call sent %d requests", len(keys))
	}
}

// TestBenchRefusesInProcessFlagsWithBase: --workers and --lease set up the
// in-process server; with --base they were silently ignored.
func TestBenchRefusesInProcessFlagsWithBase(t *testing.T) {
	t.Parallel()
	base := benchFake(t, `{"calls":0,"effects":0,"by_status":{}}`)
	for _, extra := range [][]string{{"--workers", "32"}, {"--lease", "5s"}} {
		args := append([]string{"bench", "--base", base, "-n", "1"}, extra...)
		out, errOut, code := cliRun(t, args...)
		if code != exitcode.Usage || out != "" || !strings.Contains(errOut, "--workers and --lease") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2", args, code, out, errOut)
		}
	}
}

// TestVersion: `idemctl version` and `idemctl --version` print the same
// line, from the build info.
func TestVersion(t *testing.T) {
	clearEnv(t)
	out1, _, code1 := cliRun(t, "version")
	out2, _, code2 := cliRun(t, "--version")
	if code1 != 0 || code2 != 0 || out1 != out2 || out1 != buildVersion()+"\n" || !strings.HasPrefix(out1, "idemctl ") {
		t.Errorf("version: exit %d %q; --version: exit %d %q", code1, out1, code2, out2)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"},
		{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if got, want := formatVersion(bi, true), "idemctl v1.2.3 (rev 0123456789ab-dirty, 2026-11-30T10:00:00Z, go1.26.0)"; got != want {
		t.Errorf("formatVersion = %q, want %q", got, want)
	}
	if got := formatVersion(nil, false); !strings.Contains(got, "unknown") {
		t.Errorf("formatVersion without build info = %q", got)
	}
}

// TestServeKeyValueDSNIsPostgres: a libpq key=value --db used to become a
// SQLite file named after it (password in the name) and the banner printed
// it; now it goes to PostgreSQL, and the password is nowhere.
func TestServeKeyValueDSNIsPostgres(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	dsn := "host=127.0.0.1 port=1 user=u password='hun ter2' dbname=x connect_timeout=2 sslmode=disable"
	// Were the DSN taken for a SQLite path, serve would run: the timeout
	// stops it, and the exit status and the directory tell.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, errOut, code := cliRunCtx(ctx, t, "serve", "--addr", "127.0.0.1:0", "--db", dsn)
	if code != exitcode.Error || strings.Contains(out+errOut, "hun") || strings.Contains(out+errOut, "ter2") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d without the password", code, out, errOut, exitcode.Error)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("serve with a key=value DSN created %q", names)
	}
}

// TestServeBannerHidesPassword: the start-up banner names the database with
// its password hidden, for a URL and for a key=value DSN. PostgreSQL's
// trust authentication accepts any password, so the test can give one.
func TestServeBannerHidesPassword(t *testing.T) {
	raw := os.Getenv("IDEMCTL_TEST_POSTGRES_URL")
	if raw == "" {
		t.Skip("IDEMCTL_TEST_POSTGRES_URL not set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "hunter2")
	kv := fmt.Sprintf("host=%s port=%s user=%s password='hunter2 x' dbname=%s sslmode=disable",
		u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"))
	for _, dsn := range []string{u.String(), kv} {
		errOut := &serveBuffer{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		go func() {
			done <- execute(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", dsn}, &IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut})
		}()
		var banner string
		for banner == "" {
			for _, line := range strings.Split(errOut.String(), "\n") {
				if strings.HasPrefix(line, "idemctl serving on ") {
					banner = line
				}
			}
			select {
			case code := <-done:
				cancel()
				t.Fatalf("serve --db %s exited %d before its banner:\n%s", backend.Redact(dsn), code, errOut.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
		<-done
		if strings.Contains(errOut.String(), "hunter2") || !strings.Contains(banner, "xxxxx") {
			t.Errorf("banner %q (stderr %q): want the password replaced by xxxxx", banner, errOut.String())
		}
	}
}
