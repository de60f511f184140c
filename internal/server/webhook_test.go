package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/webhook"
	"github.com/idemctl/idemctl/internal/wire"
)

// hookSecret is the signing secret of the test receivers' endpoint.
const hookSecret = "whsec_test_secret"

// delivery is one request a hookReceiver got.
type delivery struct {
	path   string
	header http.Header
	body   []byte
}

// hookReceiver is a webhook receiver: it keeps every request and answers
// each with status(n), n counting from 1, and a Location of redirect if
// set (a request to redirect itself is answered 200).
type hookReceiver struct {
	*httptest.Server
	status   func(n int) int
	redirect string
	mu       sync.Mutex
	got      []delivery
}

func newHookReceiver(t *testing.T, status func(n int) int) *hookReceiver {
	t.Helper()
	h := &hookReceiver{status: status}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, delivery{path: r.URL.Path, header: r.Header.Clone(), body: body})
		n := len(h.got)
		h.mu.Unlock()
		if h.redirect != "" {
			if r.URL.Path == h.redirect {
				return
			}
			w.Header().Set("Location", h.redirect)
		}
		w.WriteHeader(h.status(n))
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) deliveries() []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]delivery(nil), h.got...)
}

// withWebhooks allows the URLs under allow, signed with hookSecret, with
// fast retries and polls; defaults are --webhook-default entries.
func withWebhooks(t *testing.T, allow string, defaults ...string) func(*Config) {
	t.Helper()
	e, err := webhook.ParseEndpoint(allow+" ${HOOK_SECRET}", func(name string) string {
		if name == "HOOK_SECRET" {
			return hookSecret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := webhook.NewAllow([]webhook.Endpoint{e}, defaults)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) {
		c.Webhooks = webhook.Config{Allow: a, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			Poll: 20 * time.Millisecond, Timeout: 5 * time.Second}
	}
}

// TestWebhookDeliveredSignedRetried: a call with a notify_url is
// delivered once final; the receiver's 500s are retried, every attempt
// with the same delivery id as Idempotency-Key (so the receiver can
// deduplicate), a signature a receiver verifies with the endpoint's
// secret, and the final call object as GET renders it. Each attempt is
// audited and counted.
func TestWebhookDeliveredSignedRetried(t *testing.T) {
	t.Parallel()
	recv := newHookReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	b := setup(t, withWebhooks(t, recv.URL+"/hooks"))
	url := recv.URL + "/hooks/orders?tenant=7"
	r := b.post("hooked-1", `{"tool":"charge","args":{"amount":100},"notify_url":"`+url+`"}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST with an allowed notify_url: %d %s", r.status, r.body)
	}
	c := r.call(t)
	if c.NotifyURL == nil || *c.NotifyURL != url {
		t.Fatalf("the call object's notify_url = %v, want %q", c.NotifyURL, url)
	}
	final := b.waitFinal(c.CallID)
	eventually(t, "three delivery attempts", func() bool { return len(recv.deliveries()) >= 3 })
	eventually(t, "the delivery recorded as delivered", func() bool {
		ds, err := b.st.Deliveries(context.Background(), c.CallID)
		return err == nil && len(ds) == 1 && ds[0].State == store.DeliveryDelivered
	})
	got := recv.deliveries()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3 (two 500s, then 200)", len(got))
	}
	want := b.get("/v1/tool-calls/" + c.CallID)
	id := got[0].header.Get(wire.HeaderIdempotencyKey)
	if !strings.HasPrefix(id, "wh_") {
		t.Fatalf("Idempotency-Key %q, want a delivery id wh_…", id)
	}
	for i, d := range got {
		if k := d.header.Get(wire.HeaderIdempotencyKey); k != id {
			t.Errorf("attempt %d: Idempotency-Key %q, want the same id %q on every attempt", i+1, k, id)
		}
		if cid := d.header.Get(wire.HeaderCallID); cid != c.CallID {
			t.Errorf("attempt %d: %s %q, want %q", i+1, wire.HeaderCallID, cid, c.CallID)
		}
		// As a receiver checks it: the raw body, the header, the secret.
		if err := wire.VerifyWebhook(d.header.Get(wire.HeaderSignature), d.body, []byte(hookSecret), 5*time.Minute, time.Now()); err != nil {
			t.Errorf("attempt %d: signature %q does not verify: %v", i+1, d.header.Get(wire.HeaderSignature), err)
		}
		if err := wire.VerifyWebhook(d.header.Get(wire.HeaderSignature), d.body, []byte("another secret"), 0, time.Now()); err == nil {
			t.Errorf("attempt %d: the signature verifies under another secret", i+1)
		}
		if ct := d.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("attempt %d: Content-Type %q", i+1, ct)
		}
		if !sameJSON(d.body, want.body) {
			t.Errorf("attempt %d: body\n %s\nwant the call as GET renders it\n %s", i+1, d.body, want.body)
		}
	}
	var sent wire.Call
	if err := json.Unmarshal(got[2].body, &sent); err != nil || sent.Status != final.Status || sent.Status != wire.StatusSucceeded {
		t.Fatalf("delivered call %+v, %v; want the final call (succeeded)", sent, err)
	}
	evs := b.events(c.CallID)
	if n, m := count(evs, store.EventNotifyFailed), count(evs, store.EventNotified); n != 2 || m != 1 {
		t.Errorf("audit %v: %d notify_failed and %d notified, want 2 and 1", evs, n, m)
	}
	// The counters move just after the attempt is recorded.
	eventually(t, "the delivered attempt counted", func() bool {
		return b.metricValue(`idemctl_webhook_attempts_total{outcome="delivered"}`) == 1
	})
	for series, want := range map[string]float64{
		`idemctl_webhook_attempts_total{outcome="delivered"}`: 1,
		`idemctl_webhook_attempts_total{outcome="failed"}`:    2,
		`idemctl_webhook_attempts_total{outcome="given_up"}`:  0,
		`idemctl_webhook_pending`:                             0,
	} {
		if got := b.metricValue(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

func count(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return jsonEqual(x, y)
}

// TestWebhookNotifyURLRefused: a notify_url the allow-list does not allow
// is refused with 422 notify_url_not_allowed (400 bad_request when it is
// not a string), and nothing is stored; a server started without
// --webhook-allow refuses every one.
func TestWebhookNotifyURLRefused(t *testing.T) {
	t.Parallel()
	off := setup(t)
	before := off.snapshot()
	r := off.post("off-1", `{"tool":"charge","args":{"amount":1},"notify_url":"https://hooks.example.com/x"}`)
	if r.status != http.StatusUnprocessableEntity || r.errCode(t) != wire.CodeNotifyURLNotAllowed ||
		!strings.Contains(string(r.body), "--webhook-allow") {
		t.Fatalf("webhooks off: %d %s, want 422 notify_url_not_allowed naming --webhook-allow", r.status, r.body)
	}
	if !before.equal(off.snapshot()) {
		t.Fatal("a refused notify_url changed the database")
	}

	on := setup(t, withWebhooks(t, "https://hooks.example.com/idemctl"))
	before = on.snapshot()
	for _, u := range []string{
		"https://evil.example.com/idemctl",           // another host
		"https://hooks.example.com.evil.com/idemctl", // a host that only starts alike
		"http://hooks.example.com/idemctl",           // another scheme
		"https://hooks.example.com:8443/idemctl",     // another port
		"https://hooks.example.com/idemctlx",         // a sibling path, not below the prefix
		"https://hooks.example.com/other",            // another path
		"https://hooks.example.com/idemctl/../admin", // a dot segment out of the prefix
		"https://user:pw@hooks.example.com/idemctl",  // user information
		"https://hooks.example.com/idemctl#frag",     // a fragment
		"hooks.example.com/idemctl",                  // not absolute
		"file:///etc/passwd",                         // not http(s)
		"https://hooks.example.com/idemctl/" + strings.Repeat("a", webhook.MaxURLLen),
	} {
		body, _ := json.Marshal(map[string]any{"tool": "charge", "args": map[string]any{"amount": 1}, "notify_url": u})
		r := on.post("refused", string(body))
		if r.status != http.StatusUnprocessableEntity || r.errCode(t) != wire.CodeNotifyURLNotAllowed {
			t.Errorf("notify_url %.80q: %d %s, want 422 notify_url_not_allowed", u, r.status, r.body)
		}
	}
	if r := on.post("refused", `{"tool":"charge","args":{"amount":1},"notify_url":42}`); r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
		t.Errorf("a numeric notify_url: %d %s, want 400 bad_request", r.status, r.body)
	}
	if !before.equal(on.snapshot()) {
		t.Fatal("a refused notify_url changed the database")
	}
	for _, u := range []string{"https://hooks.example.com/idemctl", "https://hooks.example.com/idemctl/a/b?x=1", "https://HOOKS.example.com:443/idemctl/"} {
		body, _ := json.Marshal(map[string]any{"tool": "charge", "args": map[string]any{"amount": 1}, "notify_url": u})
		if r := on.post("ok-"+u, string(body)); r.status/100 != 2 {
			t.Errorf("allowed notify_url %q: %d %s", u, r.status, r.body)
		}
	}
}

// TestWebhookNotifyURLNotInFingerprint: the same key with another
// notify_url (a retry from another replica with its own callback) is the
// same call, not a conflict, and keeps the first notify_url.
func TestWebhookNotifyURLNotInFingerprint(t *testing.T) {
	t.Parallel()
	b := setup(t, withWebhooks(t, "https://hooks.example.com/"), func(c *Config) { c.Webhooks.Poll = time.Hour })
	first := b.post("same", `{"tool":"charge","args":{"amount":5},"notify_url":"https://hooks.example.com/replica-a"}`).call(t)
	r := b.post("same", `{"tool":"charge","args":{"amount":5},"notify_url":"https://hooks.example.com/replica-b"}`)
	if r.status/100 != 2 || r.header.Get(wire.HeaderIdempotentReplayed) != wire.ReplayedTrue {
		t.Fatalf("same key, another notify_url: %d %s, want a replay", r.status, r.body)
	}
	if c := r.call(t); c.CallID != first.CallID || c.NotifyURL == nil || *c.NotifyURL != "https://hooks.example.com/replica-a" {
		t.Fatalf("replay answered %s with notify_url %v, want %s with the first notify_url", c.CallID, c.NotifyURL, first.CallID)
	}
	r = b.post("same", `{"tool":"charge","args":{"amount":5}}`)
	if r.status/100 != 2 || r.call(t).CallID != first.CallID {
		t.Fatalf("same key without notify_url: %d %s, want the same call", r.status, r.body)
	}
}

// TestWebhookPrincipalDefault: a call that names no notify_url gets its
// principal's default endpoint, and is delivered there.
func TestWebhookPrincipalDefault(t *testing.T) {
	t.Parallel()
	recv := newHookReceiver(t, func(int) int { return http.StatusNoContent })
	b := setup(t, withWebhooks(t, recv.URL+"/hooks", "*="+recv.URL+"/hooks/default"))
	c := b.post("defaulted", `{"tool":"charge","args":{"amount":3}}`).call(t)
	if c.NotifyURL == nil || *c.NotifyURL != recv.URL+"/hooks/default" {
		t.Fatalf("notify_url %v, want the principal's default", c.NotifyURL)
	}
	eventually(t, "the default endpoint's delivery", func() bool { return len(recv.deliveries()) == 1 })
	if d := recv.deliveries()[0]; d.header.Get(wire.HeaderCallID) != c.CallID {
		t.Fatalf("delivered call %s, want %s", d.header.Get(wire.HeaderCallID), c.CallID)
	}
}

// TestWebhookGivenUp: a receiver that never answers 2xx gets attempts
// until the retry window has passed, then the delivery is given up and
// audited so. A redirect is not followed (the allow-list judged the URL
// the call named, not the one a receiver points to): here it would lead
// to a 200.
func TestWebhookGivenUp(t *testing.T) {
	t.Parallel()
	recv := newHookReceiver(t, func(int) int { return http.StatusFound })
	recv.redirect = "/elsewhere"
	b := setup(t, withWebhooks(t, recv.URL+"/"), func(c *Config) { c.Webhooks.RetryFor = 300 * time.Millisecond })
	c := b.post("never", `{"tool":"charge","args":{"amount":2},"notify_url":"`+recv.URL+`/h"}`).call(t)
	eventually(t, "the delivery given up", func() bool {
		ds, err := b.st.Deliveries(context.Background(), c.CallID)
		return err == nil && len(ds) == 1 && ds[0].State == store.DeliveryFailed
	})
	evs, err := b.st.Audit(context.Background(), c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Event != store.EventNotifyFailed || !strings.Contains(last.Detail, "given up") || !strings.Contains(last.Detail, "302") {
		t.Fatalf("last audit row %+v, want notify_failed … 302 … given up", last)
	}
	got := recv.deliveries()
	if len(got) < 2 {
		t.Fatalf("%d attempts before giving up, want retries", len(got))
	}
	for _, d := range got {
		if d.path != "/h" {
			t.Fatalf("a request to %s: the redirect was followed", d.path)
		}
	}
	// The counter moves just after the attempt is recorded.
	eventually(t, "the given-up attempt counted", func() bool {
		return b.metricValue(`idemctl_webhook_attempts_total{outcome="given_up"}`) == 1
	})
}

// TestWebhookTwoInstancesSendEachOnce: two servers on one PostgreSQL
// database both run the delivery loop; each delivery reaches the receiver
// once (the claim's lease keeps the other instance off it), and every
// call's is delivered.
func TestWebhookTwoInstancesSendEachOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.Schema(t) // skips without PostgreSQL
	recv := newHookReceiver(t, func(int) int { return http.StatusOK })
	var bs []*bundle
	for range 2 {
		st, err := postgres.Open(context.Background(), db, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		bs = append(bs, setupStore(t, st, true, withWebhooks(t, recv.URL+"/")))
	}
	const n = 20
	ids := map[string]bool{}
	for i := range n {
		c := bs[i%2].post(fmt.Sprintf("two-%d", i), `{"tool":"charge","args":{"amount":1},"notify_url":"`+recv.URL+`/h"}`).call(t)
		ids[c.CallID] = true
	}
	eventually(t, "every call delivered", func() bool { return len(recv.deliveries()) >= n })
	// Let a late duplicate show itself, were there one.
	time.Sleep(200 * time.Millisecond)
	perDelivery := map[string]int{}
	for _, d := range recv.deliveries() {
		perDelivery[d.header.Get(wire.HeaderIdempotencyKey)]++
		delete(ids, d.header.Get(wire.HeaderCallID))
	}
	if len(ids) != 0 {
		t.Errorf("calls never delivered: %v", ids)
	}
	for id, k := range perDelivery {
		if k != 1 {
			t.Errorf("delivery %s sent %d times, want once", id, k)
		}
	}
}
