package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// dirEntries lists dir's names.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestServeBusyPortCreatesNoDatabase: serve on a port that is already in
// use fails naming the address, before it opens (and so creates and
// migrates) the database.
func TestServeBusyPortCreatesNoDatabase(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dir := t.TempDir()

	_, errOut, code := cliRun(t, "serve", "--addr", addr, "--db", filepath.Join(dir, "idem.db"))
	if code != exitcode.Error || !strings.Contains(errOut, addr) {
		t.Fatalf("serve on busy %s: exit %d, stderr %q; want exit %d (runtime error) naming the address", addr, code, errOut, exitcode.Error)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("serve that never listened left %q behind", names)
	}
}

// TestServeDatabaseErrorFreesThePort: when the database cannot be opened
// after the listener is up, the listener is closed again.
func TestServeDatabaseErrorFreesThePort(t *testing.T) {
	t.Parallel()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close() // a free port for serve to take

	noDir := filepath.Join(t.TempDir(), "missing", "idem.db") // parent does not exist
	_, errOut, code := cliRun(t, "serve", "--addr", addr, "--db", noDir)
	if code != exitcode.Error || !strings.Contains(errOut, "opening database") {
		t.Fatalf("serve with unopenable db: exit %d, stderr %q; want exit %d (runtime error)", code, errOut, exitcode.Error)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %s still held after serve failed: %v", addr, err)
	}
	ln.Close()
}

// TestServeChaosOffLoopbackRefusedBeforeBinding: a refused --chaos binds
// nothing and creates no database (the flags are checked first).
func TestServeChaosOffLoopbackRefusedBeforeBinding(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.invalid:0"} {
		_, errOut, code := cliRun(t, "serve", "--addr", addr, "--chaos", "--db", filepath.Join(dir, "idem.db"))
		if code != exitcode.Usage || !strings.Contains(errOut, "loopback") {
			t.Errorf("--chaos on %s: exit %d, stderr %q; want exit %d and a loopback refusal", addr, code, errOut, exitcode.Usage)
		}
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("refused serve left %q behind", names)
	}
}
