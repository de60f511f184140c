package wire

import (
	"encoding/json"
	"testing"
)

// TestCallJSONShape pins the call object's member names, order and
// omissions (docs/api.md, "The call object"): clients and golden files
// read these bytes, so a change here is an API change.
func TestCallJSONShape(t *testing.T) {
	eff, client, seq, nb, hook := "eff_a2ae8fca3c7ef0e1", "checkout", int64(17), 1796114836.5, "https://hooks.example.com/h"
	full := Call{CallID: "c_4093c059fc8a8fb1", Principal: "alice", IdemKey: "k1", Tool: "charge",
		Args: json.RawMessage(`{"amount":100}`), Status: StatusPending, Attempt: 2,
		Result: json.RawMessage(`{"ok":true}`), Error: json.RawMessage(`{"code":"tool_failed","message":"x","retryable":true}`),
		EffectID: &eff, ClientID: &client, Seq: &seq, Fingerprint: "f0", CreatedAt: 1796114835.25, UpdatedAt: 1796114835.5,
		QueryURL: CallPath("c_4093c059fc8a8fb1"), CancelRequested: true, Via: "mcp", NotBefore: &nb, NotifyURL: &hook}
	for name, tc := range map[string]struct {
		call Call
		want string
	}{
		"every member": {full, `{"call_id":"c_4093c059fc8a8fb1","principal":"alice","idem_key":"k1","tool":"charge",` +
			`"args":{"amount":100},"status":"pending","attempt":2,"result":{"ok":true},` +
			`"error":{"code":"tool_failed","message":"x","retryable":true},"effect_id":"eff_a2ae8fca3c7ef0e1",` +
			`"client_id":"checkout","seq":17,"fingerprint":"f0","created_at":1796114835.25,"updated_at":1796114835.5,` +
			`"query_url":"/v1/tool-calls/c_4093c059fc8a8fb1","cancel_requested":true,"via":"mcp","not_before":1796114836.5,` +
			`"notify_url":"https://hooks.example.com/h"}`},
		"optional members omitted": {Call{CallID: "c_1", IdemKey: "k", Tool: "sleep", Args: json.RawMessage(`{}`),
			Status: StatusRunning, Fingerprint: "f", QueryURL: CallPath("c_1"), Via: "http"},
			`{"call_id":"c_1","idem_key":"k","tool":"sleep","args":{},"status":"running","attempt":0,"result":null,` +
				`"error":null,"effect_id":null,"fingerprint":"f","created_at":0,"updated_at":0,` +
				`"query_url":"/v1/tool-calls/c_1","via":"http"}`},
	} {
		got, err := json.Marshal(tc.call)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, tc.want)
		}
	}
}

// TestReceivedCallKeepsBytes: a decoded call prints the server's bytes
// (members this build does not know included), and a call built here
// prints its fields.
func TestReceivedCallKeepsBytes(t *testing.T) {
	sent := `{"call_id":"c_1","status":"succeeded","from_a_newer_server":1}`
	var c ReceivedCall
	if err := json.Unmarshal([]byte(sent), &c); err != nil {
		t.Fatal(err)
	}
	if c.CallID != "c_1" || c.Status != StatusSucceeded || !c.Final() {
		t.Fatalf("decoded %+v", c.Call)
	}
	if got, _ := json.Marshal(c); string(got) != sent {
		t.Fatalf("marshaled %s, want the bytes sent %s", got, sent)
	}
	var page Page[ReceivedCall]
	if err := json.Unmarshal([]byte(`{"calls":[`+sent+`],"next":null}`), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Calls) != 1 || string(page.Calls[0].Raw) != sent {
		t.Fatalf("a listed call kept %q, want %q", page.Calls[0].Raw, sent)
	}
	built := Call{CallID: "c_2", Status: StatusPending}
	if got, want := mustMarshal(t, ReceivedCall{Call: built}), mustMarshal(t, built); string(got) != string(want) {
		t.Fatalf("a built call marshaled to %s, want its fields %s", got, want)
	}
}

// TestErrorBodyShape pins the error body (docs/api.md, "Errors").
func TestErrorBodyShape(t *testing.T) {
	for want, body := range map[string]Error{
		`{"error":{"code":"not_found","message":"no call"}}`: {Error: ErrorDetail{Code: CodeNotFound, Message: "no call"}},
		`{"error":{"code":"idempotency_conflict","message":"m","call_id":"c_1"}}`: {
			Error: ErrorDetail{Code: CodeIdempotencyConflict, Message: "m", CallID: "c_1"}},
		`{"error":{"code":"already_final","message":"m","call_id":"c_1"},"call":{"call_id":"c_1","idem_key":"","tool":"","args":null,"status":"failed","attempt":0,"result":null,"error":null,"effect_id":null,"fingerprint":"","created_at":0,"updated_at":0,"query_url":"","via":""}}`: {
			Error: ErrorDetail{Code: CodeAlreadyFinal, Message: "m", CallID: "c_1"}, Call: &Call{CallID: "c_1", Status: StatusFailed}},
	} {
		if got := string(mustMarshal(t, body)); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	if got := (&ErrorDetail{Code: CodeBadRequest, Message: "m"}).Error(); got != "bad_request: m" {
		t.Errorf("ErrorDetail.Error() = %q", got)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
