package client

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/webhook"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestWebhookReceiver: a program submits a call WithNotifyURL and its
// receiver, an http.Handler built on ReadWebhook, gets the final call,
// verified with the endpoint's secret; the same receiver refuses a
// request whose body was changed or that was signed with another secret.
// A server that allows no webhooks refuses the option with
// notify_url_not_allowed.
func TestWebhookReceiver(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec_receiver_test")
	var (
		mu       sync.Mutex
		received []Webhook
		refused  []error
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook, err := ReadWebhook(r, secret)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			refused = append(refused, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		received = append(received, hook)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	ep, err := webhook.ParseEndpoint(receiver.URL+"/hooks ${SECRET}", func(string) string { return string(secret) })
	if err != nil {
		t.Fatal(err)
	}
	allow, err := webhook.NewAllow([]webhook.Endpoint{ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := servertest.Start(t, servertest.Options{Config: server.Config{
		Webhooks: webhook.Config{Allow: allow, Poll: 20 * time.Millisecond}}}).URL
	c, _ := setup(t, base)
	call, err := c.Call(t.Context(), builtin.Charge, map[string]any{"amount": 9}, WithNotifyURL(receiver.URL+"/hooks/orders"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(received)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no verified delivery; refused: %v", refused)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	hook := received[0]
	mu.Unlock()
	if !strings.HasPrefix(hook.ID, "wh_") || hook.Call.CallID != call.CallID || hook.Call.Status != wire.StatusSucceeded ||
		string(hook.Call.Result) != string(call.Result) {
		t.Fatalf("received %s: %+v\nwant the final call %+v", hook.ID, hook.Call.Call, call.Call)
	}

	// What the server signed, changed in transit or signed otherwise, is
	// refused by the same handler.
	body := []byte(`{"call_id":"c_0000000000000001","status":"succeeded"}`)
	forged := wire.SignWebhook([]byte("another secret"), time.Now(), body)
	for name, sig := range map[string]string{
		"another secret": forged,
		"another body":   wire.SignWebhook(secret, time.Now(), []byte(`{}`)),
		"too old":        wire.SignWebhook(secret, time.Now().Add(-time.Hour), body),
		"unsigned":       "",
	} {
		req, _ := http.NewRequest(http.MethodPost, receiver.URL+"/hooks/orders", strings.NewReader(string(body)))
		req.Header.Set(wire.HeaderSignature, sig)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: the receiver answered %d, want it refused", name, res.StatusCode)
		}
	}
	mu.Lock()
	for _, err := range refused {
		if !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("refusal %v does not match ErrWebhookSignature", err)
		}
	}
	mu.Unlock()

	// A server without --webhook-allow refuses the option.
	off, _ := setup(t, realServer(t))
	_, err = off.Submit(t.Context(), builtin.Charge, map[string]any{"amount": 1}, WithNotifyURL(receiver.URL+"/hooks"))
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != wire.CodeNotifyURLNotAllowed {
		t.Fatalf("WithNotifyURL on a server without webhooks: %v, want an *APIError notify_url_not_allowed", err)
	}
}

// A receiver of completion webhooks: verify, store by delivery id (a
// retry of the same delivery carries the same id), then answer 2xx.
func ExampleReadWebhook() {
	secret := []byte("the endpoint's secret, as given to serve --webhook-allow")
	seen := map[string]bool{} // a database table in a real receiver
	http.HandleFunc("POST /hooks/idemctl", func(w http.ResponseWriter, r *http.Request) {
		hook, err := ReadWebhook(r, secret)
		if err != nil {
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		if !seen[hook.ID] {
			seen[hook.ID] = true
			// act on hook.Call: hook.Call.Status, hook.Call.Result, ...
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
