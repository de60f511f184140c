package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemctl/idemctl/internal/clientknob"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestViaHeader: a context that names a door (clientknob.WithVia, which
// only idemctl's own code can reach) sends it on every POST; without it,
// no header is sent.
func TestViaHeader(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(wire.HeaderVia))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"call_id":"c_0000000000000001","status":"succeeded","attempt":1}`))
	}))
	defer ts.Close()
	c, _ := setup(t, ts.URL)
	for _, ctx := range []context.Context{clientknob.WithVia(t.Context(), "mcp"), t.Context()} {
		if _, err := c.Submit(ctx, "charge", map[string]any{"amount": 1}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "mcp" || got[1] != "" {
		t.Fatalf("%s headers = %q, want [mcp, none]", wire.HeaderVia, got)
	}
}
