package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

func TestPollByIDPrintsFinalCall(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t, nil, []func(http.ResponseWriter){
		cliAnswer(200, cliCall("pending")),
		cliAnswer(200, cliCall("succeeded")),
	})
	out, errOut, code := cliRun(t, "poll", "c_1", "--base", fs.URL)
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := cliLines(t, out)
	if len(lines) != 1 || lines[0]["status"] != "succeeded" {
		t.Fatalf("output:\n%s", out)
	}
}

func TestPollByKeyUnknownExitsOne(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t, nil, []func(http.ResponseWriter){
		cliAnswer(404, `{"error":{"code":"not_found","message":"no such key"}}`),
	})
	out, _, code := cliRun(t, "poll", "--key", "never", "--timeout", "200ms", "--base", fs.URL)
	if code != exitcode.Failed {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(out, `"code":"unknown"`) {
		t.Fatalf("output:\n%s", out)
	}
	fs.mu.Lock()
	gets := append([]string(nil), fs.gets...)
	fs.mu.Unlock()
	if len(gets) == 0 || gets[0] != "/v1/tool-calls/by-key/never" {
		t.Fatalf("gets = %v", gets)
	}
}

func TestPollDeadlinePrintsLastState(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t, nil, []func(http.ResponseWriter){cliAnswer(200, cliCall("running"))})
	out, _, code := cliRun(t, "poll", "c_1", "--deadline", "200ms", "--base", fs.URL)
	if code != exitcode.Failed {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := cliLines(t, out)
	if len(lines) != 2 || lines[0]["status"] != "running" || lines[1]["error"].(map[string]any)["code"] != "deadline_exceeded" {
		t.Fatalf("output:\n%s", out)
	}
}

func TestPollOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o  pollOptions
		ok bool
	}{
		{pollOptions{Base: "http://127.0.0.1:8081", Deadline: 1}, false},
		{pollOptions{Base: "http://127.0.0.1:8081", CallID: "c", Key: "k", Deadline: 1}, false},
		{pollOptions{Base: "http://127.0.0.1:8081", CallID: "c", Deadline: 1}, true},
		{pollOptions{Base: "http://127.0.0.1:8081", Key: "k", Deadline: 1}, true},
		{pollOptions{Base: "http://127.0.0.1:8081", Key: "k"}, false},
	} {
		if err := tc.o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v", tc.o, err)
		}
	}
}

func pollRealServer(t *testing.T) string {
	t.Helper()
	return servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
}

// TestPollByKeyDotKeys: "." and ".." are valid keys; poll --key must find
// their calls rather than be redirected by the router's dot-segment
// cleaning (which ended in 405).
func TestPollByKeyDotKeys(t *testing.T) {
	t.Parallel()
	base := pollRealServer(t)
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"..", "."} {
		res, err := c.Submit(t.Context(), builtin.Charge, map[string]any{"amount": 1}, client.WithKey(key))
		if err != nil {
			t.Fatalf("POST key %q: %v", key, err)
		}
		out, errOut, code := cliRun(t, "poll", "--key", key, "--base", base, "--timeout", "10s")
		if code != exitcode.OK {
			t.Fatalf("poll --key %q: exit %d\n%s%s", key, code, out, errOut)
		}
		lines := cliLines(t, out)
		if len(lines) != 1 || lines[0]["call_id"] != res.Call.CallID || lines[0]["idem_key"] != key ||
			lines[0]["status"] != string(wire.StatusSucceeded) {
			t.Fatalf("poll --key %q printed:\n%s", key, out)
		}
	}
}

// TestPollByKeyRefusesImpossibleKey: a key the server could never accept
// (here: a space) was never recorded, so poll --key is a usage error,
// without a request, instead of polling until the deadline.
func TestPollByKeyRefusesImpossibleKey(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t, nil, []func(http.ResponseWriter){
		cliAnswer(404, `{"error":{"code":"not_found","message":"no such key"}}`),
	})
	out, errOut, code := cliRun(t, "poll", "--key", "a b", "--deadline", "2s", "--base", fs.URL)
	if code != exitcode.Usage || !strings.Contains(out+errOut, "invalid_key") {
		t.Fatalf("exit %d, output:\n%s%s", code, out, errOut)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.gets) != 0 {
		t.Fatalf("gets = %v, want none", fs.gets)
	}
}
