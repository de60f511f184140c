package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// getUntilUp GETs url until something answers (the command runs in a
// goroutine and binds its port a moment later).
func getUntilUp(t *testing.T, url string) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
			}
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeToolsFileErrors: a bad tools file, from --tools or the config
// key tools, is a usage error (exit 2) naming the tool and the field, and
// nothing is started: no database is created.
func TestServeToolsFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(tools, []byte("tools:\n  - {name: create_refund, kind: http, url: 'http://127.0.0.1:9000/refunds', timeout: abc}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "idemctl.yaml")
	if err := os.WriteFile(config, []byte("serve:\n  tools: "+tools+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "idem.db")
	for _, args := range [][]string{
		{"serve", "--addr", "127.0.0.1:0", "--db", db, "--tools", tools},
		{"serve", "--addr", "127.0.0.1:0", "--db", db, "--config", config},
	} {
		// A timeout, so that a server that starts anyway fails the test
		// instead of hanging it.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, errOut, code := cliRunCtx(ctx, t, args...)
		cancel()
		want := `tools[0] (create_refund): timeout: "abc" is not a duration`
		if code != exitcode.Usage || !strings.Contains(errOut, want) || !strings.Contains(errOut, "--tools") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and …%s…", args, code, errOut, want)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Fatalf("%v: a database was created for a server that never ran", args)
		}
	}
	if _, errOut, code := cliRun(t, "serve", "--db", db, "--tools", filepath.Join(dir, "missing.yaml")); code != exitcode.Usage ||
		!strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing tools file: exit %d, stderr %q", code, errOut)
	}
	// A tool restricted to principals on a server without tokens: nobody
	// could call it.
	scoped := filepath.Join(dir, "scoped.yaml")
	if err := os.WriteFile(scoped, []byte("tools:\n  - {name: fail, kind: builtin, principals: [alice]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	want := "tool fail: principals: restricting a tool needs auth tokens"
	if _, errOut, code := cliRunCtx(ctx, t, "serve", "--addr", "127.0.0.1:0", "--db", db, "--tools", scoped); code != exitcode.Usage ||
		!strings.Contains(errOut, want) {
		t.Errorf("principals without --auth-tokens: exit %d, stderr %q; want exit 2 and …%s…", code, errOut, want)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatal("a database was created for a server that never ran")
	}
}

// TestServeToolsListed: serve --tools registers the file's tools: GET
// /v1/tools lists them, without the header's secret.
func TestServeToolsListed(t *testing.T) {
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.json")
	t.Setenv("DEMO_TOKEN", "tok-9f8e7d")
	if err := os.WriteFile(tools, []byte(`{"tools": [{"name": "create_refund", "kind": "http",
		"url": "http://127.0.0.1:9000/refunds", "headers": {"Authorization": "Bearer ${DEMO_TOKEN}"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan string, 1)
	go func() {
		_, errOut, _ := cliRunCtx(ctx, t, "serve", "--addr", addr, "--db", filepath.Join(dir, "idem.db"), "--tools", tools)
		done <- errOut
	}()
	body := getUntilUp(t, "http://"+addr+"/v1/tools")
	cancel()
	errOut := <-done
	var got struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(body, &got); err != nil || len(got.Tools) != 5 || got.Tools[1].Name != "create_refund" {
		t.Fatalf("GET /v1/tools: %v %s", err, body)
	}
	if strings.Contains(string(body)+errOut, "tok-9f8e7d") {
		t.Fatalf("the secret was shown: %s\n%s", body, errOut)
	}
}

// TestDemoDownstream: the command serves the ledger; a repeated key makes
// one charge; a non-loopback --listen is refused (exit 2) unless
// --allow-remote.
func TestDemoDownstream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	_, errOut, code := cliRunCtx(ctx, t, "demo-downstream", "--listen", "0.0.0.0:0")
	cancel()
	if code != exitcode.Usage || !strings.Contains(errOut, "--allow-remote") {
		t.Fatalf("non-loopback: exit %d, stderr %q", code, errOut)
	}
	for _, ignore := range []bool{false, true} {
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		args := []string{"demo-downstream", "--listen", addr}
		if ignore {
			args = append(args, "--ignore-keys")
		}
		go func() {
			_, _, code := cliRunCtx(ctx, t, args...)
			done <- code
		}()
		getUntilUp(t, "http://"+addr+"/ledger")
		for range 2 {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/refunds", strings.NewReader(`{"amount": 5}`))
			req.Header.Set("Idempotency-Key", "eff_1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		var ledger struct{ Count int }
		if err := json.Unmarshal(getUntilUp(t, "http://"+addr+"/ledger"), &ledger); err != nil {
			t.Fatal(err)
		}
		cancel()
		if code := <-done; code != exitcode.OK {
			t.Fatalf("exit %d after cancel", code)
		}
		want := 1
		if ignore {
			want = 2
		}
		if ledger.Count != want {
			t.Fatalf("ignore-keys=%v: %d charges, want %d", ignore, ledger.Count, want)
		}
	}
}

// TestDemoDownstreamLoseAnswers: with --lose-answers 1 a charge is made but
// its answer is lost (the connection closes), and GET /charges finds it by
// key; a probability outside 0..1 is a usage error.
func TestDemoDownstreamLoseAnswers(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"1.5", "-1", "NaN"} {
		_, errOut, code := cliRun(t, "demo-downstream", "--listen", "127.0.0.1:0", "--lose-answers", p)
		if code != exitcode.Usage || !strings.Contains(errOut, "--lose-answers") {
			t.Fatalf("--lose-answers %s: exit %d, stderr %q", p, code, errOut)
		}
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		_, _, code := cliRunCtx(ctx, t, "demo-downstream", "--listen", addr, "--ignore-keys", "--lose-answers", "1")
		done <- code
	}()
	defer func() { cancel(); <-done }()
	getUntilUp(t, "http://"+addr+"/ledger")
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/charges", strings.NewReader(`{"amount": 5}`))
	req.Header.Set("Idempotency-Key", "eff_lost")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the answer came: %d", resp.StatusCode)
	}
	var c struct {
		ID  string `json:"id"`
		Key string `json:"idempotency_key"`
	}
	if err := json.Unmarshal(getUntilUp(t, "http://"+addr+"/charges?idempotency_key=eff_lost"), &c); err != nil || c.ID != "ch_1" || c.Key != "eff_lost" {
		t.Fatalf("lookup after a lost answer: %v %+v", err, c)
	}
}
