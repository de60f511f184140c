package servertest

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// Options says how Start runs a server in process.
type Options struct {
	// Config is the server's configuration; Addr defaults to a loopback
	// one (which the Host check and the loopback rule need).
	Config server.Config
	// Store is the database the server uses, closed when the test ends.
	// Nil means a fresh SQLite database in the test's temporary directory.
	Store store.Store
	// NoExecutor serves the API without starting the executor: calls stay
	// pending, so a test can look at or cancel one before it runs.
	NoExecutor bool
}

// Server is a server Start runs in process.
type Server struct {
	// URL is the base URL of its API, e.g. "http://127.0.0.1:40123".
	URL string
	// Server is the running server.
	Server *server.Server
	// Store is its database (Options.Store, or the one Start opened).
	Store store.Store
}

// Start runs the real HTTP API in process, with its executor unless
// opts.NoExecutor, on an httptest server. Everything stops when the test
// ends; a failed start fails the test. It is the in-process way, for tests
// whose point is what the server makes of a request, which a scripted fake
// cannot tell; StartServe is the process way, for a crash, a restart or
// several servers. (The server's own tests cannot use it: it imports the
// server.)
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	st := opts.Store
	if st == nil {
		var err error
		st, err = sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "idem.db"), store.Options{})
		if err != nil {
			tb.Fatal(err)
		}
	}
	cfg := opts.Config
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	srv, err := server.New(cfg, st)
	if err != nil {
		_ = st.Close()
		tb.Fatal(err)
	}
	// Not the test's context, which ends before the cleanups run: the
	// executor must outlive the HTTP server, which Shutdown stops first.
	ctx, cancel := context.WithCancel(context.Background())
	if !opts.NoExecutor {
		if err := srv.Start(ctx); err != nil {
			cancel()
			_ = st.Close()
			tb.Fatal(err)
		}
	}
	ts := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		ts.Close()
		cancel()
		_ = srv.Shutdown(context.Background())
		_ = st.Close()
	})
	return &Server{URL: ts.URL, Server: srv, Store: st}
}
