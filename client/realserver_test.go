package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/toolreg"
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

// TestResolveAgainstRealServer: Resolve settles a call that failed with
// code outcome_unknown (held by its tool's on_unknown: hold) and returns it
// succeeded; a second Resolve is ErrNotResolvable with the call as it is.
func TestResolveAgainstRealServer(t *testing.T) {
	t.Parallel()
	lost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // the request arrived; its answer is lost
		}
	}))
	defer lost.Close()
	reg, err := toolreg.Parse([]byte("tools:\n  - {name: pay, kind: http, url: \""+lost.URL+"\", on_unknown: hold}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := setup(t, servertest.Start(t, servertest.Options{Config: server.Config{Tools: reg}}).URL)
	held, err := c.Call(t.Context(), "pay", map[string]any{"amount": 1}, WithKey("held"))
	var ce *CallError
	if !errors.As(err, &ce) || ce.Code != CodeOutcomeUnknown || ce.Retryable {
		t.Fatalf("Call = %v; want a held outcome_unknown failure", err)
	}
	got, err := c.Resolve(t.Context(), held.CallID, Resolution{Outcome: StatusSucceeded, Result: json.RawMessage(`{"id":"ch_1"}`)})
	if err != nil || got.Status != StatusSucceeded || string(got.Result) != `{"id":"ch_1"}` {
		t.Fatalf("Resolve = %+v, %v; want succeeded with the result", got.Call, err)
	}
	again, err := c.Resolve(t.Context(), held.CallID, Resolution{Outcome: StatusFailed})
	if !errors.Is(err, ErrNotResolvable) || again.Status != StatusSucceeded {
		t.Fatalf("second Resolve = %+v, %v; want ErrNotResolvable with the succeeded call", again.Call, err)
	}
}
