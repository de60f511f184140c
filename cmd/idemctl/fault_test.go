package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/chaos/fault"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server/servertest"
)

func TestFaultDryRunPrintsPlansOnly(t *testing.T) {
	t.Parallel()
	out, errOut, code := cliRun(t, "fault", "--dry-run", "--crash")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "[fault] --crash:") || strings.Contains(out, "--drop-response:") ||
		!strings.Contains(out, "nothing was started") {
		t.Fatalf("output:\n%s", out)
	}
	out, _, code = cliRun(t, "fault", "--dry-run")
	if code != 0 || !strings.Contains(out, "--lease-expiry:") || !strings.Contains(out, "--duplicate-request:") {
		t.Fatalf("dry run of all: exit %d\n%s", code, out)
	}
}

func TestFaultNeedsAScenario(t *testing.T) {
	t.Parallel()
	_, errOut, code := cliRun(t, "fault")
	if code != exitcode.Usage || !strings.Contains(errOut, "choose a scenario") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
}

func TestFaultOptionsAllSelectsEveryScenario(t *testing.T) {
	t.Parallel()
	opts := &faultOptions{Selected: map[string]*bool{}, All: true, Timeout: 1, Concurrency: 1}
	for _, name := range fault.Names() {
		opts.Selected[name] = new(bool)
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opts.names, fault.Names()) || len(opts.names) != 9 || !slices.Contains(opts.names, "downstream") || !slices.Contains(opts.names, "mcp-upstream") || !slices.Contains(opts.names, "unknown-outcome") {
		t.Fatalf("names = %v", opts.names)
	}
	opts.All, opts.Concurrency = false, 1
	*opts.Selected["crash"] = true
	if err := opts.Validate(); err != nil || !slices.Equal(opts.names, []string{"crash"}) {
		t.Fatalf("names = %v, %v", opts.names, err)
	}
}

// TestFaultCommandRunsAScenario runs a real scenario through the command,
// with a freshly built idemctl as --binary (a test binary has no serve
// command, so the default, the running executable, is refused here).
func TestFaultCommandRunsAScenario(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts real idemctl serve processes; skipped under -short")
	}
	_, errOut, code := cliRun(t, "fault", "--crash")
	if code == exitcode.OK || !strings.Contains(errOut, "servertest.Binary") {
		t.Fatalf("under go test without --binary: exit %d, stderr %s", code, errOut)
	}
	bin := servertest.Binary(t)
	out, errOut, code := cliRun(t, "fault", "--crash", "--binary", bin)
	if code != exitcode.OK || !strings.Contains(out, "PASS crash: calls=1 effects=1") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
