package client

import (
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

func realServer(t *testing.T) string {
	t.Helper()
	return servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
}

// TestKeysWithDotsReachTheByKeyRoute: the keys "." and ".." (and keys with
// dot segments after a '/') are valid idempotency keys; escaped naively they
// are path segments the router cleans away (a redirect, then 405).
func TestKeysWithDotsReachTheByKeyRoute(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, realServer(t))
	for _, key := range []string{".", "..", "...", "a/../b", "./x", "x/.", "../..", "a.b"} {
		t.Run(key, func(t *testing.T) {
			res, err := c.Submit(t.Context(), builtin.Charge, map[string]any{"amount": 1}, WithKey(key))
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
