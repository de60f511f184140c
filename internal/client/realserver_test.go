package client

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/tools"
)

// realServer runs the real HTTP API (in process, on a temp SQLite database)
// for tests whose point is what the server's router makes of the client's
// requests.
func realServer(t *testing.T) string {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0"}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
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

// TestKeysWithDotsReachTheByKeyRoute: the keys "." and ".." (and keys with
// dot segments after a '/') are valid idempotency keys; escaped naively they
// are path segments the router cleans away (a redirect, then 405).
func TestKeysWithDotsReachTheByKeyRoute(t *testing.T) {
	c := &Client{Base: realServer(t)}
	for _, key := range []string{".", "..", "...", "a/../b", "./x", "x/.", "../..", "a.b"} {
		t.Run(key, func(t *testing.T) {
			res, err := c.Call(t.Context(), key, Request{Tool: tools.Charge, Args: map[string]any{"amount": 1}})
			if err != nil {
				t.Fatalf("POST key %q: %v", key, err)
			}
			got, err := c.GetByKey(t.Context(), key)
			if err != nil {
				t.Fatalf("GetByKey(%q): %v", key, err)
			}
			if got.CallID != res.Call.CallID || got.IdemKey != key {
				t.Fatalf("GetByKey(%q) = %s (key %q), want %s", key, got.CallID, got.IdemKey, res.Call.CallID)
			}
		})
	}
}
