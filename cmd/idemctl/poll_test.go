package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/exitcode"
)

func TestPollByIDPrintsFinalCall(t *testing.T) {
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
