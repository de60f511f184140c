package client

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestViaHeader: a Client with Via names its door on every POST; without
// it, no header is sent.
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
	for _, via := range []string{"mcp", ""} {
		c := &Client{Base: ts.URL, Via: via}
		if _, err := c.Call(t.Context(), "k-"+via, Request{Tool: "charge", Args: map[string]any{"amount": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "mcp" || got[1] != "" {
		t.Fatalf("%s headers = %q, want [mcp, none]", wire.HeaderVia, got)
	}
}
