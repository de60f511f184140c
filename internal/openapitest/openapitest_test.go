package openapitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDocumentIsValid(t *testing.T) {
	if err := Validate(); err != nil {
		t.Fatal(err)
	}
}

const goodCall = `{"call_id":"c_0123456789abcdef","idem_key":"k","tool":"charge","args":{"amount":1},` +
	`"status":"pending","attempt":0,"result":null,"error":null,"effect_id":null,` +
	`"fingerprint":"` + "c136471529280eb4c70db92d5b8ff8d553408953a5794966a81ad3d42c83ec5d" + `",` +
	`"created_at":1.5,"updated_at":1.5,"query_url":"/v1/tool-calls/c_0123456789abcdef","via":"http"}`

// answer serves one canned answer and returns what Check says of it.
func answer(t *testing.T, method, path string, status int, body string) error {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	defer ts.Close()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(`{"tool":"charge"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cerr := Check(req, resp)
	if got, _ := io.ReadAll(resp.Body); string(got) != body {
		t.Fatalf("Check did not put the body back: %q", got)
	}
	return cerr
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		status             int
		body               string
		ok                 bool
	}{
		{"a call as the API renders it", "GET", "/v1/tool-calls/c_0123456789abcdef", 200, goodCall, true},
		{"a new call on POST", "POST", "/v1/tool-calls", 202, goodCall, true},
		{"a call without call_id", "GET", "/v1/tool-calls/c_0123456789abcdef", 200,
			strings.Replace(goodCall, `"call_id":"c_0123456789abcdef",`, "", 1), false},
		{"a call with an unknown status", "GET", "/v1/tool-calls/c_0123456789abcdef", 200,
			strings.Replace(goodCall, `"pending"`, `"paused"`, 1), false},
		{"a call with a field the document does not list", "GET", "/v1/tool-calls/c_0123456789abcdef", 200,
			strings.Replace(goodCall, `"via":"http"`, `"via":"http","owner":"x"`, 1), false},
		{"a documented error", "POST", "/v1/tool-calls", 409,
			`{"error":{"code":"idempotency_conflict","message":"m","call_id":"c_0123456789abcdef"}}`, true},
		{"an undocumented error code", "POST", "/v1/tool-calls", 400, `{"error":{"code":"oops","message":"m"}}`, false},
		{"an unknown path's 404 in the error shape", "GET", "/nope", 404, `{"error":{"code":"not_found","message":"m"}}`, true},
		{"an unknown path answered 200", "GET", "/nope", 200, `{}`, false},
		{"an unknown path's 404 in another shape", "GET", "/nope", 404, `{"message":"m"}`, false},
		{"the MCP door is not described", "POST", "/mcp", 200, `{"jsonrpc":"2.0"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := answer(t, tc.method, tc.path, tc.status, tc.body)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
