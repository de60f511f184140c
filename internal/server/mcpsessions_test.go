package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// mcpRaw sends one JSON-RPC message to /mcp as a client would, with the
// session id sid ("" opens a session) and token ("" for none).
func mcpRaw(t *testing.T, b *bundle, token, sid, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.ts.URL+wire.PathMCP, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if token != "" {
		req.Header.Set("Authorization", bearer(token))
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// mcpOpen opens a session with an initialize request and returns its id;
// initialized also sends notifications/initialized.
func mcpOpen(t *testing.T, b *bundle, token string, initialized bool) string {
	t.Helper()
	res := mcpRaw(t, b, token, "", mcpInitialize)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	sid := res.Header.Get("Mcp-Session-Id")
	if res.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", res.StatusCode, sid)
	}
	if initialized {
		res := mcpRaw(t, b, token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			t.Fatalf("notifications/initialized: %d", res.StatusCode)
		}
	}
	return sid
}

// mcpSessionLive reports whether the server still knows session sid.
func mcpSessionLive(b *bundle, sid string) bool {
	for ss := range b.srv.mcpSessions.srv.Sessions() {
		if ss.ID() == sid {
			return true
		}
	}
	return false
}

// TestMCPSessionCaps: a principal at its cap of sessions gets 503
// overloaded for another, while another principal still opens one; the
// server's cap holds for everyone; ending a session frees its place.
func TestMCPSessionCaps(t *testing.T) {
	b, _ := setupAuth(t, func(c *Config) {
		c.MaxMCPSessionsPerPrincipal = 2
		c.MaxMCPSessions = 3
	})
	mustMCP(t, b, aliceToken)
	second := mustMCP(t, b, aliceToken)
	res := mcpRaw(t, b, aliceToken, "", mcpInitialize)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"overloaded"`) ||
		!strings.Contains(string(body), "too many MCP sessions for this principal") {
		t.Fatalf("alice's third session: %d %s, want 503 overloaded (per principal)", res.StatusCode, body)
	}
	mustMCP(t, b, bobToken) // bob is not held back by alice
	res = mcpRaw(t, b, bobToken, "", mcpInitialize)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "too many MCP sessions on this server") {
		t.Fatalf("a fourth session on the server: %d %s, want 503 overloaded (server)", res.StatusCode, body)
	}
	if err := second.Close(); err != nil { // DELETE: the session ends
		t.Fatal(err)
	}
	if _, err := mcpConnect(t, b, aliceToken); err != nil {
		t.Fatalf("alice after ending a session: %v", err)
	}
}

// TestMCPUninitializedSessionExpires: a session whose client never sent
// notifications/initialized is closed after the init timeout, long before
// the idle timeout; an initialized one is kept.
func TestMCPUninitializedSessionExpires(t *testing.T) {
	b := setup(t)
	b.srv.mcpSessions.initTimeout = 200 * time.Millisecond
	stale := mcpOpen(t, b, "", false)
	kept := mcpOpen(t, b, "", true)
	eventually(t, "the uninitialized session is closed", func() bool { return !mcpSessionLive(b, stale) })
	time.Sleep(300 * time.Millisecond) // past the init timeout of both
	if !mcpSessionLive(b, kept) {
		t.Fatal("an initialized session was closed at the init timeout")
	}
	res := mcpRaw(t, b, "", stale, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("a request in the expired session: %d, want 404", res.StatusCode)
	}
}

// TestMCPRevokedTokenEndsStream: when the token file is reloaded without
// the token that opened a session, the session is closed and its standing
// GET stream ends; sessions of tokens still there stay.
func TestMCPRevokedTokenEndsStream(t *testing.T) {
	b, a := setupAuth(t)
	sid := mcpOpen(t, b, aliceToken, true)
	bobs := mcpOpen(t, b, bobToken, true)
	req, _ := http.NewRequest(http.MethodGet, b.ts.URL+wire.PathMCP, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", bearer(aliceToken))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", res.StatusCode)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, bufio.NewReader(res.Body))
		ended <- err
	}()

	writeTokens(t, a.Path(), "bob", bobToken) // alice's token revoked
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if ctx.Err() != nil {
			t.Fatalf("the stream ended only at the test's deadline: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked token's GET stream is still open 10 s after the reload")
	}
	// The SDK forgets a closed session just after its stream ends.
	eventually(t, "the revoked token's session is forgotten", func() bool { return !mcpSessionLive(b, sid) })
	if !mcpSessionLive(b, bobs) {
		t.Fatal("bob's session was closed though his token stays")
	}
}
