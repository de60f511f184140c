// Package apitest runs the real HTTP API in process, on a temporary SQLite
// database, for the tests of packages that talk to it (the client, the
// commands) and whose point is what the server makes of their requests,
// which a scripted fake cannot tell. (The server's own tests cannot use it:
// it imports the server.)
package apitest

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// Start starts a server with cfg (Addr defaults to a loopback one) and its
// executor, and returns its base URL. Everything stops when the test ends.
func Start(t testing.TB, cfg server.Config) string {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	srv, err := server.New(cfg, st)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		_ = st.Close()
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		_ = srv.Shutdown(context.Background())
		_ = st.Close()
	})
	return ts.URL
}
