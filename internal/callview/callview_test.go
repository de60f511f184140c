package callview

import (
	"encoding/json"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// TestOf: what a reader sees of a stored row — {} for absent args, null
// for an absent result and error, the default door, and a not-before
// time only while the call is pending (a claim leaves the column behind).
func TestOf(t *testing.T) {
	nb := 1796114836.5
	row := store.Call{CallID: "c_1", IdemKey: "k", Tool: "charge", Status: store.StatusPending,
		Fingerprint: "f", CreatedAt: 1, UpdatedAt: 2, NotBefore: &nb}
	got, _ := json.Marshal(Of(row))
	want := `{"call_id":"c_1","idem_key":"k","tool":"charge","args":{},"status":"pending","attempt":0,"result":null,` +
		`"error":null,"effect_id":null,"fingerprint":"f","created_at":1,"updated_at":2,"query_url":"/v1/tool-calls/c_1",` +
		`"via":"http","not_before":1796114836.5}`
	if string(got) != want {
		t.Fatalf("pending row rendered\n %s\nwant %s", got, want)
	}
	row.Status, row.Via, row.ArgsJSON = store.StatusRunning, store.ViaMCP, json.RawMessage(`{"amount":1}`)
	v := Of(row)
	if v.NotBefore != nil || v.Via != store.ViaMCP || string(v.Args) != `{"amount":1}` {
		t.Fatalf("running row rendered %+v: want no not_before, via mcp, the stored args", v)
	}
	hook := "https://hooks.example.com/h"
	row.NotifyURL = &hook
	if v := Of(row); v.NotifyURL == nil || *v.NotifyURL != hook {
		t.Fatalf("a row with a notify_url rendered %v, want %q", v.NotifyURL, hook)
	}
}
