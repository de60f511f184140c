package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
)

// runServe executes `idemctl serve args...` through cobra and returns its
// error; it is only used for runs that fail before serving.
func runServe(t *testing.T, args ...string) error {
	t.Helper()
	root := newRootCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &serveBuffer{}})
	root.SetArgs(append([]string{"serve"}, args...))
	return root.ExecuteContext(context.Background())
}

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
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dir := t.TempDir()

	err = runServe(t, "--addr", addr, "--db", filepath.Join(dir, "idem.db"))
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("serve on busy %s: error %v, want one naming the address", addr, err)
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("serve that never listened left %q behind", names)
	}
}

// TestServeDatabaseErrorFreesThePort: when the database cannot be opened
// after the listener is up, the listener is closed again.
func TestServeDatabaseErrorFreesThePort(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close() // a free port for serve to take

	noDir := filepath.Join(t.TempDir(), "missing", "idem.db") // parent does not exist
	err = runServe(t, "--addr", addr, "--db", noDir)
	if err == nil || !strings.Contains(err.Error(), "opening database") {
		t.Fatalf("serve with unopenable db: error %v", err)
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
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.invalid:0"} {
		err := runServe(t, "--addr", addr, "--chaos", "--db", filepath.Join(dir, "idem.db"))
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--chaos on %s: error %v, want a loopback refusal", addr, err)
		}
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Errorf("refused serve left %q behind", names)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "127.5.6.7:80"} {
		if err := server.CheckLoopback(addr); err != nil {
			t.Errorf("CheckLoopback(%s): %v", addr, err)
		}
	}
}
