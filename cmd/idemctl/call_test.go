package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// cliFakeServer is a scripted stand-in for idemctl serve: POST answers from
// post (the last entry repeating), GET /v1/tool-calls/{id} answers from get.
type cliFakeServer struct {
	URL   string
	mu    sync.Mutex
	posts []string // keys
	gets  []string // paths
}

func newCLIFakeServer(t *testing.T, post, get []func(w http.ResponseWriter)) *cliFakeServer {
	t.Helper()
	fs := &cliFakeServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fs.mu.Lock()
		var h func(http.ResponseWriter)
		if r.Method == http.MethodPost {
			fs.posts = append(fs.posts, r.Header.Get("Idempotency-Key"))
			h = post[min(len(fs.posts), len(post))-1]
		} else {
			fs.gets = append(fs.gets, r.URL.EscapedPath())
			h = get[min(len(fs.gets), len(get))-1]
		}
		fs.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		h(w)
	}))
	t.Cleanup(srv.Close)
	fs.URL = srv.URL
	return fs
}

func (fs *cliFakeServer) postKeys() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]string(nil), fs.posts...)
}

func cliAnswer(status int, body string, headers ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func cliCall(status string) string {
	return fmt.Sprintf(`{"call_id":"c_1","idem_key":"K","tool":"charge","status":%q,"attempt":1,"result":null,"error":null,"effect_id":null,"created_at":1,"updated_at":1,"query_url":"/v1/tool-calls/c_1"}`, status)
}

// cliLines splits output into JSON objects, failing on a non-JSON line.
func cliLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not one JSON object: %v\noutput:\n%s", l, err, out)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestCallPrintsAttemptsThenFinalCall(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t,
		[]func(http.ResponseWriter){
			cliAnswer(503, `{"error":{"code":"unavailable","message":"busy"}}`, "Retry-After", "0"),
			cliAnswer(202, cliCall("pending"), "Retry-After", "0"),
		},
		[]func(http.ResponseWriter){
			cliAnswer(200, cliCall("running")),
			cliAnswer(200, strings.Replace(cliCall("succeeded"), `"result":null`, `"result":{"charged":100}`, 1)),
		})
	out, errOut, code := cliRun(t, "call", "--base", fs.URL, "--key", "K", "--amount", "100")
	if code != exitcode.OK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	lines := cliLines(t, out)
	if len(lines) != 3 {
		t.Fatalf("want 2 attempt lines + final call, got:\n%s", out)
	}
	if lines[0]["attempt"] != 1.0 || lines[0]["http"] != 503.0 || lines[0]["key"] != "K" {
		t.Fatalf("first attempt = %v", lines[0])
	}
	if lines[1]["attempt"] != 2.0 || lines[1]["http"] != 202.0 || lines[1]["call_id"] != "c_1" {
		t.Fatalf("second attempt = %v", lines[1])
	}
	if lines[2]["status"] != "succeeded" || lines[2]["query_url"] != "/v1/tool-calls/c_1" {
		t.Fatalf("final = %v", lines[2])
	}
	if keys := fs.postKeys(); len(keys) != 2 || keys[0] != "K" || keys[1] != "K" {
		t.Fatalf("keys = %v, want K twice", keys)
	}
}

func TestCallFailedExitsOne(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t,
		[]func(http.ResponseWriter){cliAnswer(200, strings.Replace(cliCall("failed"), `"error":null`, `"error":{"code":"tool_failed","message":"boom","retryable":false}`, 1), "Idempotent-Replayed", "true")},
		nil)
	out, _, code := cliRun(t, "call", "--base", fs.URL, "--key", "K", "--tool", "fail", "--args", `{"retryable":false}`)
	if code != exitcode.Failed {
		t.Fatalf("exit %d, want 1 for a failed call", code)
	}
	lines := cliLines(t, out)
	if len(lines) != 2 || lines[0]["replayed"] != true || lines[1]["status"] != "failed" {
		t.Fatalf("output:\n%s", out)
	}
}

func TestCallConflictEndsAtOnce(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t,
		[]func(http.ResponseWriter){cliAnswer(409, `{"error":{"code":"idempotency_conflict","message":"different args"}}`)}, nil)
	out, errOut, code := cliRun(t, "call", "--base", fs.URL, "--key", "K", "--amount", "5")
	if code != exitcode.Failed || len(fs.postKeys()) != 1 {
		t.Fatalf("exit %d after %d POSTs, want 1 after 1", code, len(fs.postKeys()))
	}
	lines := cliLines(t, out)
	if last := lines[len(lines)-1]; last["error"].(map[string]any)["code"] != "idempotency_conflict" {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(errOut, "idempotency_conflict") {
		t.Fatalf("stderr = %s", errOut)
	}
}

func TestCallRetryExhaustedAgainstClosedPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close()
	out, _, code := cliRun(t, "call", "--base", base, "--key", "K", "--retries", "1")
	if code != exitcode.Failed {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := cliLines(t, out)
	if len(lines) != 3 || lines[0]["error"] != "connection refused" ||
		lines[2]["error"].(map[string]any)["code"] != "retry_exhausted" {
		t.Fatalf("output:\n%s", out)
	}
}

func TestCallNewKeyOnRetryFlag(t *testing.T) {
	t.Parallel()
	fs := newCLIFakeServer(t,
		[]func(http.ResponseWriter){
			cliAnswer(503, `{"error":{"code":"unavailable","message":"busy"}}`, "Retry-After", "0"),
			cliAnswer(200, cliCall("succeeded")),
		}, nil)
	_, errOut, code := cliRun(t, "call", "--base", fs.URL, "--key", "demo-bad", "--new-key-on-retry")
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if keys := fs.postKeys(); len(keys) != 2 || keys[0] != "demo-bad-0" || keys[1] != "demo-bad-1" {
		t.Fatalf("keys = %v", keys)
	}
}

func TestCallOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		o    callOptions
		args map[string]any
		ok   bool
	}{
		{"no key", callOptions{Base: "http://127.0.0.1:8081", Tool: "charge", AttemptTimeout: 1}, nil, false},
		{"default amount", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1}, map[string]any{"amount": 100}, true},
		{"args object", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "send_email", AttemptTimeout: 1, Args: `{"to":"a"}`}, map[string]any{"to": "a"}, true},
		{"amount merged", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Args: `{"_crash_after_commit":true}`, Amount: 7, amountSet: true},
			map[string]any{"_crash_after_commit": true, "amount": int64(7)}, true},
		{"args array", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Args: `[1]`}, nil, false},
		{"args null", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Args: `null`}, nil, false},
		{"amount twice", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Args: `{"amount":7}`, Amount: 5, amountSet: true}, nil, false},
		{"args trailing", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Args: `{} {}`}, nil, false},
		{"negative retries", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge", AttemptTimeout: 1, Retries: -1}, nil, false},
		{"zero timeout", callOptions{Base: "http://127.0.0.1:8081", Key: "K", Tool: "charge"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v", err)
			}
			if tc.ok && fmt.Sprint(tc.o.args) != fmt.Sprint(tc.args) {
				t.Fatalf("args = %v, want %v", tc.o.args, tc.args)
			}
		})
	}
}

// TestCallRefusesImpossibleKey: a key the server could never accept is a
// usage error of call, as of poll --key: nothing is sent.
func TestCallRefusesImpossibleKey(t *testing.T) {
	fs := newCLIFakeServer(t, []func(http.ResponseWriter){
		cliAnswer(400, `{"error":{"code":"bad_request","message":"bad key"}}`),
	}, nil)
	out, errOut, code := cliRun(t, "call", "--key", "a b", "--base", fs.URL)
	if code != exitcode.Usage || !strings.Contains(errOut, "--key: invalid_key") {
		t.Fatalf("exit %d, output:\n%s%s", code, out, errOut)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.posts) != 0 {
		t.Fatalf("posts = %v, want none", fs.posts)
	}
}
