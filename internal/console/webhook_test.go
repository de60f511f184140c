package console_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// TestCallPageDeliveries: the call page shows the call's notify_url and
// each of its webhook deliveries (id, url, state, attempts, last error),
// and its attempts in the timeline; a call without one shows no table.
func TestCallPageDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, false)
	ctx := t.Context()
	const url = "https://hooks.example.com/idemctl"
	hook := url
	c, _, err := b.st.CreateOrGet(ctx, store.NewCall{CallID: "c_ffffffffffffd001", IdemKey: "hooked", Fingerprint: "f",
		Tool: "charge", ArgsJSON: json.RawMessage(`{"amount":1}`), NotifyURL: &hook})
	if err != nil {
		t.Fatal(err)
	}
	cl := b.claim(t, "o")[c.CallID]
	if _, err := b.st.Succeed(ctx, store.Completion{Lease: store.LeaseOf(cl), Result: json.RawMessage(`{}`),
		Notify: &store.NewDelivery{ID: "wh_00000000000000d1", URL: url}}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.st.ClaimDeliveries(ctx, "o", time.Minute, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("ClaimDeliveries = %v, %v", ds, err)
	}
	if err := b.st.EndDelivery(ctx, store.DeliveryEnd{ID: ds[0].ID, CallID: c.CallID, Owner: "o", Attempts: 1,
		Outcome: store.DeliveryRetry, Delay: time.Minute, Reason: "the receiver answered 500"}); err != nil {
		t.Fatal(err)
	}

	r := b.get(t, "/ui/calls/"+c.CallID, "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d", r.code)
	}
	if got := textByID(t, r.doc, "notify-url"); got != url {
		t.Errorf("notify url field %q, want %q", got, url)
	}
	rows := find(byID(t, r.doc, "deliveries"), "tr", "data-delivery", "wh_00000000000000d1")
	if len(rows) != 1 {
		t.Fatalf("%d rows of delivery wh_00000000000000d1, want 1", len(rows))
	}
	row := text(rows[0])
	if attr(rows[0], "data-state") != "pending" || !strings.Contains(row, url) || !strings.Contains(row, "the receiver answered 500") {
		t.Errorf("delivery row %q (state %s), want pending with its url and last error", row, attr(rows[0], "data-state"))
	}
	if len(find(byID(t, r.doc, "timeline"), "li", "data-event", store.EventNotifyFailed)) != 1 {
		t.Error("the timeline does not show the notify_failed attempt")
	}

	plain := b.create(t, "", "plain", "charge", `{"amount":1}`)
	if r := b.get(t, "/ui/calls/"+plain.CallID, ""); len(find(r.doc, "", "id", "deliveries")) != 0 {
		t.Error("a call without webhooks shows a deliveries table")
	}
}
