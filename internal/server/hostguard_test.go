package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestHostGuard: on a loopback address a foreign Host is refused with
// 403 host_not_allowed on every route, before authentication and without
// recording anything; the loopback names pass; a non-loopback server does
// not check Host.
func TestHostGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.AllowedHosts = nil })
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/tool-calls"}, {http.MethodGet, "/v1/tool-calls"}, {http.MethodGet, "/ui"},
		{http.MethodGet, "/healthz"}, {http.MethodGet, "/metrics"}, {http.MethodPost, wire.PathMCP}, {http.MethodGet, "/nope"},
	} {
		resp := b.hostDo(r.method, r.path, "evil.example:8081")
		if resp.status != http.StatusForbidden || resp.errCode(t) != codeHostNotAllowed {
			t.Errorf("%s %s with Host evil.example: %d %s, want 403 %s", r.method, r.path, resp.status, resp.body, codeHostNotAllowed)
		}
	}
	if n := b.stats().Calls; n != 0 {
		t.Errorf("%d calls recorded by refused requests", n)
	}
	for _, host := range []string{"localhost:8081", "127.0.0.1", "[::1]:8081"} {
		if r := b.hostDo(http.MethodGet, "/healthz", host); r.status != http.StatusOK {
			t.Errorf("GET /healthz with Host %s: %d", host, r.status)
		}
	}

	auth, _ := setupAuth(t, func(c *Config) { c.AllowedHosts = nil })
	if r := auth.hostDo(http.MethodGet, "/v1/tool-calls", "evil.example"); r.status != http.StatusForbidden {
		t.Errorf("with auth, a foreign Host: %d, want 403 before the 401", r.status)
	}

	// The Host check is the loopback listener's: on another address the
	// operator chose the names, and tokens protect the server.
	open := setup(t, func(c *Config) { c.AllowedHosts = nil; c.Addr = "0.0.0.0:0"; c.InsecureNoAuth = true })
	if r := open.hostDo(http.MethodGet, "/healthz", "idem.example.org"); r.status != http.StatusOK {
		t.Errorf("non-loopback server, Host idem.example.org: %d, want 200", r.status)
	}
}

func (b *bundle) hostDo(method, path, host string) resp {
	b.t.Helper()
	req, _ := http.NewRequestWithContext(b.t.Context(), method, b.ts.URL+path, strings.NewReader("{}"))
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "host-guard")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, body: body}
}
