package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// TestServeRefusesForeignHost: a loopback serve (auth off, the default)
// answers a request whose Host is a rebound name with 403
// host_not_allowed on the API, the console and the pprof listener, and
// records nothing; with --allowed-hosts naming it, the same requests are
// served. A bad --allowed-hosts entry is a usage error.
func TestServeRefusesForeignHost(t *testing.T) {
	t.Parallel()
	if _, errOut, code := cliRun(t, "serve", "--allowed-hosts", "evil.example:8081", "--db", filepath.Join(t.TempDir(), "x.db")); code != exitcode.Usage || !strings.Contains(errOut, "--allowed-hosts") {
		t.Fatalf("--allowed-hosts with a port: exit %d, stderr %q; want a usage error naming the flag", code, errOut)
	}
	base, pprofURL := startServePprof(t)
	for _, r := range []struct{ method, url, body string }{
		{http.MethodPost, base + "/v1/tool-calls", `{"tool":"charge","args":{"amount":1}}`},
		{http.MethodGet, base + "/v1/tool-calls", ""},
		{http.MethodGet, base + "/ui", ""},
		{http.MethodGet, base + "/healthz", ""},
		{http.MethodGet, pprofURL, ""},
		{http.MethodGet, pprofURL + "cmdline", ""},
	} {
		code, body := hostRequest(t, r.method, r.url, "evil.example", r.body)
		if code != http.StatusForbidden || !strings.Contains(body, "host_not_allowed") {
			t.Errorf("%s %s with Host evil.example: %d %q, want 403 host_not_allowed", r.method, r.url, code, body)
		}
		if code, _ := hostRequest(t, r.method, r.url, "", r.body); code == http.StatusForbidden {
			t.Errorf("%s %s with its own Host: 403", r.method, r.url)
		}
	}
	// Only the request with the loopback Host recorded a call.
	code, body := hostRequest(t, http.MethodGet, base+"/v1/tool-calls/by-key/host-check-evil.example", "localhost", "")
	if code != http.StatusNotFound {
		t.Errorf("the refused create's key: %d %s, want 404 (nothing recorded)", code, body)
	}
	if code, body := hostRequest(t, http.MethodGet, base+"/v1/tool-calls/by-key/host-check-", "localhost", ""); code != http.StatusOK {
		t.Errorf("the served create's key: %d %s, want 200", code, body)
	}

	base, pprofURL = startServePprof(t, "--allowed-hosts", "evil.example,.corp.example")
	for _, u := range []string{base + "/v1/tool-calls", base + "/ui", pprofURL} {
		for _, host := range []string{"evil.example", "idem.corp.example:8081"} {
			if code, body := hostRequest(t, http.MethodGet, u, host, ""); code != http.StatusOK {
				t.Errorf("GET %s with Host %s allowed: %d %q, want 200", u, host, code, body)
			}
		}
		if code, _ := hostRequest(t, http.MethodGet, u, "other.example", ""); code != http.StatusForbidden {
			t.Errorf("GET %s with Host other.example: %d, want 403", u, code)
		}
	}
	// The MCP door too (its SDK has a Host check of its own, which would
	// refuse every name but loopback).
	if code, body := hostRequest(t, http.MethodGet, base+"/mcp", "evil.example", ""); code == http.StatusForbidden {
		t.Errorf("GET /mcp with Host evil.example allowed: %d %q", code, body)
	}
	if code, body := hostRequest(t, http.MethodGet, base+"/mcp", "other.example", ""); code != http.StatusForbidden || !strings.Contains(body, "host_not_allowed") {
		t.Errorf("GET /mcp with Host other.example: %d %q, want 403 host_not_allowed", code, body)
	}
}

// startServePprof runs serve on a loopback port with --pprof and returns
// the API's base URL and the pprof index URL.
func startServePprof(t *testing.T, args ...string) (base, pprofURL string) {
	t.Helper()
	errOut := &serveBuffer{}
	root := newRootCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut})
	root.SetArgs(append([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "idem.db"),
		"--workers", "2", "--pprof", "127.0.0.1:0"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-errc
	})
	for deadline := time.Now().Add(10 * time.Second); base == "" || pprofURL == ""; {
		for _, line := range strings.Split(errOut.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "idemctl serving on "); ok {
				base, _, _ = strings.Cut(rest, " ")
			}
			if rest, ok := strings.CutPrefix(line, pprofPrefix); ok {
				pprofURL = rest
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return base, pprofURL
}

// hostRequest sends a request with the given Host header ("" keeps the
// URL's) and returns the status and body.
func hostRequest(t *testing.T, method, url, host, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if host != "" {
		req.Host = host
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "host-check-"+host)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 300)) // enough for an error body; a page is cut
	return res.StatusCode, string(b)
}
