package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server"
)

func TestTokenNew(t *testing.T) {
	t.Parallel()
	out, errOut, code := cliRun(t, "token", "new", "alice")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q, want the token and the file line", out)
	}
	token, line := lines[0], lines[1]
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, tokenPrefix))
	if !strings.HasPrefix(token, tokenPrefix) || err != nil || len(raw) != tokenBytes {
		t.Fatalf("token %q: want %s + %d bytes of URL-safe base64 (%v)", token, tokenPrefix, tokenBytes, err)
	}
	if line != "alice:"+server.HashToken(token) {
		t.Fatalf("file line %q, want alice:sha256(token)", line)
	}
	again, _, _ := cliRun(t, "token", "new", "alice")
	if strings.Split(again, "\n")[0] == token {
		t.Fatal("two tokens are the same")
	}
	for _, bad := range []string{"a:b", "", "has space"} {
		if _, _, code := cliRun(t, "token", "new", bad); code == exitcode.OK {
			t.Errorf("principal %q accepted", bad)
		}
	}
}

func TestServeOptionsAuth(t *testing.T) {
	t.Parallel()
	o := serveOptions{Addr: "0.0.0.0:8081", DB: "x.db", Workers: 1, Lease: time.Second,
		LogFormat: "text", LogLevel: "info", MaxResultBytes: 1, MaxBodies: 1, MaxHeldWaits: 1, MaxBodyBytes: 1 << 20}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--auth-tokens") {
		t.Fatalf("non-loopback without auth: %v, want a refusal naming --auth-tokens", err)
	}
	o.InsecureNoAuth = true
	if err := o.Validate(); err != nil {
		t.Fatalf("--insecure-no-auth refused: %v", err)
	}
	o.InsecureNoAuth, o.AuthTokens = false, "tokens"
	if err := o.Validate(); err != nil {
		t.Fatalf("--auth-tokens refused: %v", err)
	}
	o.Retention = -time.Second
	if err := o.Validate(); err == nil {
		t.Fatal("negative --retention accepted")
	}
}

// startServe runs `idemctl serve` with args until the test ends and
// returns its base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	errOut := &serveBuffer{}
	root := newRootCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut})
	db := filepath.Join(t.TempDir(), "idem.db")
	root.SetArgs(append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--workers", "2"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-errc
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, line := range strings.Split(errOut.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "idemctl serving on "); ok {
				base, _, _ := strings.Cut(rest, " ")
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no serving line:\n%s", errOut.String())
		}
		select {
		case err := <-errc:
			t.Fatalf("serve returned early: %v\n%s", err, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func getStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestServeAuthTokensAndSIGHUP: serve --auth-tokens refuses requests
// without a known token, call --token (and IDEMCTL_TOKEN) get through, and
// SIGHUP makes serve re-read the file.
func TestServeAuthTokensAndSIGHUP(t *testing.T) {
	tok1, tok2 := "idem_first-token-for-the-test-0123456789", "idem_second-token-for-the-test-012345678"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice:"+server.HashToken(tok1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, "--auth-tokens", file)
	if got := getStatus(t, base+"/stats", ""); got != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", got)
	}
	if got := getStatus(t, base+"/healthz", ""); got != http.StatusOK {
		t.Fatalf("healthz without a token: %d, want 200", got)
	}
	if _, errOut, code := cliRun(t, "call", "--base", base, "--key", "k1", "--retries", "0"); code == exitcode.OK {
		t.Fatalf("call without a token succeeded: %s", errOut)
	}
	out, errOut, code := cliRun(t, "call", "--base", base, "--key", "k1", "--token", tok1)
	if code != 0 || !strings.Contains(out, `"succeeded"`) {
		t.Fatalf("call --token: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, tok1) {
		t.Fatal("call printed its token")
	}
	t.Setenv("IDEMCTL_TOKEN", tok1)
	if _, errOut, code := cliRun(t, "poll", "--base", base, "--key", "k1"); code != 0 {
		t.Fatalf("poll with IDEMCTL_TOKEN: exit %d: %s", code, errOut)
	}

	if got := getStatus(t, base+"/stats", tok2); got != http.StatusUnauthorized {
		t.Fatalf("second token before SIGHUP: %d, want 401", got)
	}
	if err := os.WriteFile(file, []byte("bob:"+server.HashToken(tok2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for getStatus(t, base+"/stats", tok2) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the second token is still refused after SIGHUP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := getStatus(t, base+"/stats", tok1); got != http.StatusUnauthorized {
		t.Fatalf("removed token after SIGHUP: %d, want 401", got)
	}
}

// TestCallsListsOwnCallsPageByPage: idemctl calls prints the token's
// principal's calls, one per line, following pages with --all.
func TestCallsListsOwnCallsPageByPage(t *testing.T) {
	t.Parallel()
	tok, other := "idem_calls-test-token-0123456789abcdefgh", "idem_calls-test-other-0123456789abcdefgh"
	file := filepath.Join(t.TempDir(), "tokens")
	content := "alice:" + server.HashToken(tok) + "\nbob:" + server.HashToken(other) + "\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, "--auth-tokens", file)
	for _, k := range []string{"c1", "c2", "c3"} {
		if _, errOut, code := cliRun(t, "call", "--base", base, "--key", k, "--token", tok); code != 0 {
			t.Fatalf("call %s: %s", k, errOut)
		}
	}
	if _, errOut, code := cliRun(t, "call", "--base", base, "--key", "c1", "--token", other); code != 0 {
		t.Fatalf("bob's call: %s", errOut)
	}
	out, errOut, code := cliRun(t, "calls", "--base", base, "--token", tok, "--limit", "2", "--all")
	if code != 0 {
		t.Fatalf("calls --all: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"idem_key":"c3"`) || !strings.Contains(lines[2], `"idem_key":"c1"`) {
		t.Fatalf("calls --all printed:\n%s\nwant alice's 3 calls, newest first", out)
	}
	out, errOut, code = cliRun(t, "calls", "--base", base, "--token", tok, "--limit", "2")
	if code != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != 2 || !strings.HasPrefix(errOut, "next: ") {
		t.Fatalf("calls --limit 2: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestCancelCommand: idemctl cancel stops a running call by id and
// reports an already final one (by key) with exit 1.
func TestCancelCommand(t *testing.T) {
	t.Parallel()
	tok := "idem_cancel-test-token-0123456789abcdefg"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice:"+server.HashToken(tok)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, "--auth-tokens", file)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/tool-calls", strings.NewReader(`{"tool":"sleep","args":{"seconds":10}}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", "long")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		CallID string `json:"call_id"`
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	out, errOut, code := cliRun(t, "cancel", c.CallID, "--base", base, "--token", tok)
	if code != 0 || !strings.Contains(out, c.CallID) {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = cliRun(t, "poll", "--base", base, "--token", tok, c.CallID)
	if code == 0 || !strings.Contains(out, `"canceled"`) {
		t.Fatalf("poll after cancel: exit %d\n%s\n%s; want the failed canceled call", code, out, errOut)
	}
	out, errOut, code = cliRun(t, "cancel", "--key", "long", "--base", base, "--token", tok)
	if code != 1 || !strings.Contains(out, c.CallID) || !strings.Contains(errOut, "already_final") {
		t.Fatalf("cancel of a final call: exit %d\n%s\n%s; want exit 1 with the call and already_final", code, out, errOut)
	}
	if _, _, code := cliRun(t, "cancel", "--base", base); code != 2 {
		t.Fatalf("cancel without an id or key: exit %d, want 2", code)
	}
}

// TestBenchWithToken: bench --token loads a server run with
// --auth-tokens; without the token every request is refused and a check
// fails.
func TestBenchWithToken(t *testing.T) {
	t.Parallel()
	tok := "idem_bench-test-token-0123456789abcdefgh"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice:"+server.HashToken(tok)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, "--auth-tokens", file)
	if out, errOut, code := cliRun(t, "bench", "--base", base, "--token", tok, "-n", "20", "-c", "2"); code != 0 {
		t.Fatalf("bench --token: exit %d\n%s\n%s", code, out, errOut)
	} else if strings.Contains(out+errOut, tok) {
		t.Fatal("bench printed its token")
	}
	if _, _, code := cliRun(t, "bench", "--base", base, "-n", "5", "-c", "1"); code == exitcode.OK {
		t.Fatal("bench without a token passed against a server with auth")
	}
	if _, _, code := cliRun(t, "bench", "--token", tok, "-n", "5"); code != 2 {
		t.Fatalf("bench --token without --base: exit %d, want 2", code)
	}
}
