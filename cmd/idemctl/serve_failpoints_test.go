package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/failpoint"
)

// TestServeRefusesFailpointsWithoutChaos: a set IDEMCTL_FAILPOINTS without
// --chaos stops the start (exit 2) before any database is created.
func TestServeRefusesFailpointsWithoutChaos(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "create/after-commit=crash")
	db := filepath.Join(t.TempDir(), "x.db")
	_, errOut, code := cliRun(t, "serve", "--addr", "127.0.0.1:0", "--db", db)
	if code != exitcode.Usage || !strings.Contains(errOut, failpoint.EnvVar+" is set but --chaos is not") {
		t.Fatalf("exit %d, stderr %q; want exit %d naming %s and --chaos", code, errOut, exitcode.Usage, failpoint.EnvVar)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("the refused start created %s (%v)", db, err)
	}
	if strings.Contains(errOut, "warning: ignoring "+failpoint.EnvVar) {
		t.Errorf("%s reported as unknown: %q", failpoint.EnvVar, errOut)
	}
}

// TestServeRefusesBadFailpointSpec: a spec that does not parse is a usage
// error naming what is wrong, even with --chaos.
func TestServeRefusesBadFailpointSpec(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "create/after-commit=explode")
	_, errOut, code := cliRun(t, "serve", "--addr", "127.0.0.1:0", "--chaos", "--db", filepath.Join(t.TempDir(), "x.db"))
	if code != exitcode.Usage || !strings.Contains(errOut, `action "explode"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
