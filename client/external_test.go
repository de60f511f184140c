package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
)

// TestFromAnotherModule builds and runs client/testdata/usermod, a module
// of its own that imports github.com/idemctl/idemctl/client the way a user's
// program does (a replace points it at this tree), against a real server
// with auth on. It proves what a test inside this module cannot: that an
// outside module can import the client and name every type it needs.
//
// It needs the go command and a module cache holding idemctl's
// dependencies (CI runs go mod download first); it does not skip without
// them, because a client nobody outside can build is the failure it looks
// for.
func TestFromAnotherModule(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the outside module: %v", err)
	}
	const token = "usermod-token-0123456789abcdef0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("usermod:"+server.HashToken(token)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := server.LoadAuth(tokens)
	if err != nil {
		t.Fatal(err)
	}
	base := servertest.Start(t, servertest.Options{Config: server.Config{Auth: auth}}).URL

	cmd := exec.CommandContext(t.Context(), goCmd, "run", ".")
	cmd.Dir = filepath.Join("testdata", "usermod")
	// -mod=mod: the outside module resolves its requirements itself, as a
	// user's would; GOWORK=off keeps a workspace of the developer's out.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "IDEMCTL_BASE="+base, "IDEMCTL_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	t.Logf("go run . in %s:\n%s", cmd.Dir, out)
	if err != nil {
		t.Fatalf("the outside module failed: %v", err)
	}
}
