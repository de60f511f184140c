// Package servertest starts idemctl servers for tests, in one of two ways:
//
//   - in process (Start): the real HTTP API and executor on an httptest
//     server, for tests whose point is what the server makes of a request
//     (the client, the commands, the console);
//   - as a process (Binary, StartServe): `idemctl serve` built once per test
//     process, for a crash, a restart, or several servers on one database.
//
// The server's own tests cannot import it (it imports the server); they use
// a helper of their own and serveproc.
//
// In process:
//
//	srv := servertest.Start(t, servertest.Options{Config: server.Config{NoUI: true}})
//	resp, err := http.Get(srv.URL + "/healthz")
//
// As a process; in the package's TestMain:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		servertest.Cleanup() // removes the binary built by Binary
//		os.Exit(code)
//	}
//
// and in a test:
//
//	bin := servertest.Binary(t) // go build once per test process; skips under -short
//	p := servertest.StartServe(t, bin, "--db", dbPath, "--chaos")
//	resp, err := http.Get(p.URL + "/healthz")
//	p.Kill() // SIGKILL
package servertest

import (
	"context"
	"testing"

	"github.com/idemctl/idemctl/internal/serveproc"
)

// Process and Config are serveproc's, so tests name one package.
type (
	Process = serveproc.Process
	Config  = serveproc.Config
)

// Binary returns the idemctl binary, built once per test process into a
// temporary directory (see Cleanup). Under -short it skips the test: these
// tests start processes and take seconds. A build failure fails the test
// with the compiler's output.
func Binary(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipping: starts real idemctl processes (go build ./cmd/idemctl); run without -short")
	}
	bin, err := serveproc.BuildOnce()
	if err != nil {
		tb.Fatalf("building idemctl: %v", err)
	}
	return bin
}

// Cleanup removes the binary Binary built, if any. Call it from TestMain
// after m.Run.
func Cleanup() { serveproc.RemoveBuilt() }

// StartServe is Start for a test: `bin serve --addr 127.0.0.1:0 args...`.
// Later flags override earlier ones, so args may set --addr. The process is
// killed at the end of the test if still running; its output is logged when
// the test failed. A failed start fails the test.
func StartServe(tb testing.TB, bin string, args ...string) *Process {
	tb.Helper()
	p, err := serveproc.Start(context.Background(), Config{Binary: bin, Args: args})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("output of %s:\n%s", p.CommandLine(), p.Stderr())
		}
	})
	return p
}
