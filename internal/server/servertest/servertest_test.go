package servertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// TestCrashThenRestartSameAddressAndDatabase: a chaos crash ends the
// process with exitcode.Crash; Restart brings the server back on the same
// URL and database, where the call committed before the crash is found.
func TestCrashThenRestartSameAddressAndDatabase(t *testing.T) {
	t.Parallel()
	bin := Binary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	p, err := serveproc.Start(t.Context(), Config{Binary: bin, DB: db, Chaos: true, WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	url := p.URL
	if !strings.Contains(p.CommandLine(), "--addr "+strings.TrimPrefix(url, "http://")+" --db "+db+" --chaos") {
		t.Fatalf("command line %q does not show the bound address, database and --chaos", p.CommandLine())
	}
	if err := p.Restart(t.Context()); err == nil {
		t.Fatal("Restart of a running server accepted")
	}

	c, err := client.New(url, client.WithAttemptTimeout(2*time.Second), client.WithRetries(0), client.WithPreferWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Submit(t.Context(), builtin.Charge, map[string]any{"amount": 1, tool.ArgCrashAfterCommit: true}, client.WithKey("K"))
	if code, err := p.Wait(10 * time.Second); err != nil || code != exitcode.Crash {
		t.Fatalf("exit = %d, %v; want the chaos crash status %d", code, err, exitcode.Crash)
	}
	first := p.Pid()

	if err := p.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p.URL != url || p.ExitCode() != -1 {
		t.Fatalf("after restart: URL %s (was %s), exit code %d (want -1: running)", p.URL, url, p.ExitCode())
	}
	call, err := c.GetByKey(t.Context(), "K")
	if err != nil || call.Status != wire.StatusSucceeded {
		t.Fatalf("the restarted server does not have the committed call: %+v, %v", call, err)
	}
	if pids := p.Pids(); len(pids) != 2 || pids[0] != first || pids[1] != p.Pid() || first == p.Pid() {
		t.Fatalf("pids = %v, want the first run's and the restart's", pids)
	}
}

// TestCallerEnvironmentIgnored: IDEMCTL_* variables of the caller (a test
// run, an idemctl fault user) do not reach the server's flags.
func TestCallerEnvironmentIgnored(t *testing.T) {
	bin := Binary(t)
	t.Setenv("IDEMCTL_WORKERS", "0") // serve would refuse it
	p, err := serveproc.Start(t.Context(), Config{Binary: bin, DB: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatalf("the caller's IDEMCTL_WORKERS reached the server: %v", err)
	}
	if code, err := p.Stop(10 * time.Second); err != nil || code != exitcode.OK {
		t.Fatalf("Stop = %d, %v; want a clean exit", code, err)
	}
}

// TestStartFailureCarriesOutput: a server that exits before serving is an
// error that shows why.
func TestStartFailureCarriesOutput(t *testing.T) {
	t.Parallel()
	bin := Binary(t)
	_, err := serveproc.Start(t.Context(), Config{Binary: bin, DB: filepath.Join(t.TempDir(), "idem.db"), Args: []string{"--workers", "0"}})
	if err == nil || !strings.Contains(err.Error(), "exited before serving") || !strings.Contains(err.Error(), "--workers") {
		t.Fatalf("err = %v, want the exit and the server's own message", err)
	}
}

// TestStartCancelled: the start context bounds the wait for the server.
func TestStartCancelled(t *testing.T) {
	t.Parallel()
	bin := Binary(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := serveproc.Start(ctx, Config{Binary: bin, DB: filepath.Join(t.TempDir(), "idem.db")})
	if !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), context.Canceled.Error())) {
		t.Fatalf("err = %v, want the cancellation", err)
	}
}

func TestSelfRefusesUnderGoTest(t *testing.T) {
	t.Parallel()
	if _, err := serveproc.Self(); err == nil {
		t.Fatal("Self returned the test binary as idemctl")
	}
}
