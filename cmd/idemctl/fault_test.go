package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/chaos/fault"
)

func TestFaultDryRunPrintsPlansOnly(t *testing.T) {
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
	_, errOut, code := cliRun(t, "fault")
	if code == 0 || !strings.Contains(errOut, "choose a scenario") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
}

func TestFaultOptionsAllSelectsEveryScenario(t *testing.T) {
	opts := &faultOptions{Selected: map[string]*bool{}, All: true, Timeout: 1, Concurrency: 1}
	for _, name := range fault.Names() {
		opts.Selected[name] = new(bool)
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opts.names, fault.Names()) || len(opts.names) != 6 {
		t.Fatalf("names = %v", opts.names)
	}
	opts.All, opts.Concurrency = false, 1
	*opts.Selected["crash"] = true
	if err := opts.Validate(); err != nil || !slices.Equal(opts.names, []string{"crash"}) {
		t.Fatalf("names = %v, %v", opts.names, err)
	}
}
