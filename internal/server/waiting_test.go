package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestRetryAfterBoundedAndShown: a downstream answering Retry-After of ten
// years parks the call no longer than the tool's retry.max_backoff, and
// the pending call shows why it waits: its error is the failure being
// waited out, Retry-After and the cap included, next to not_before.
func TestRetryAfterBoundedAndShown(t *testing.T) {
	t.Parallel()
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "315360000")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer ds.Close()
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: create_refund
    kind: http
    url: `+ds.URL+`
    retry: {max_attempts: 2, initial_backoff: 1s, max_backoff: 5s}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	c := b.post("k-parked", `{"tool":"create_refund","args":{}}`).call(t)
	eventually(t, "the retry is scheduled", func() bool {
		return contains(b.events(c.CallID), store.EventRetryScheduled)
	})
	got := b.get(wire.CallPath(c.CallID)).call(t)
	if got.Status != store.StatusPending || got.NotBefore == nil {
		t.Fatalf("call = %+v, want pending with not_before", got)
	}
	if *got.NotBefore > got.UpdatedAt+5.001 {
		t.Fatalf("not_before %v is %.0fs after updated_at %v: Retry-After not capped at max_backoff (5s)",
			*got.NotBefore, *got.NotBefore-got.UpdatedAt, got.UpdatedAt)
	}
	var e struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
		Status    int    `json:"status"`
	}
	if err := json.Unmarshal(got.Error, &e); err != nil {
		t.Fatalf("pending call's error %s: %v (want the failure it waits out)", got.Error, err)
	}
	if e.Code != "downstream_error" || !e.Retryable || e.Status != 429 ||
		!strings.HasSuffix(e.Message, "with Retry-After 87600h0m0s, capped at 5s") {
		t.Fatalf("pending call's error %s", got.Error)
	}
}

// TestHTTPToolShowsNoSecretOrAddress: what callers read of an http tool's
// failures (the stored call, through the API) holds neither the secret a
// downstream echoed nor the downstream's address; the server log names
// the address for the operator, still without the secret.
func TestHTTPToolShowsNoSecretOrAddress(t *testing.T) {
	t.Parallel()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "bad credentials: %s", r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	reg, err := toolreg.Parse([]byte(`
tools:
  - {name: echoing, kind: http, url: "`+echo.URL+`", headers: {Authorization: "Bearer ${TOKEN}"}}
  - {name: gone, kind: http, url: "http://`+closed+`/x", headers: {Authorization: "Bearer ${TOKEN}"}}
`), func(k string) (string, bool) { return toolsFileSecret, k == "TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	b := setup(t, func(c *Config) {
		c.Tools = reg
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	for _, c := range []struct{ tool, code, message string }{
		{"echoing", "downstream_rejected", "downstream rejected the request with 401"},
		{"gone", "downstream_unreachable", "the downstream refused the connection"},
	} {
		call := b.post("k-"+c.tool, `{"tool":"`+c.tool+`","args":{}}`).call(t)
		b.waitFinal(call.CallID)
		r := b.get(wire.CallPath(call.CallID))
		for _, leak := range []string{toolsFileSecret, closed, "127.0.0.1"} {
			if strings.Contains(string(r.body), leak) {
				t.Errorf("%s: the call shows %q: %s", c.tool, leak, r.body)
			}
		}
		var e struct{ Code, Message string }
		if err := json.Unmarshal(r.call(t).Error, &e); err != nil || e.Code != c.code || e.Message != c.message {
			t.Errorf("%s: error %s, want %s %q", c.tool, r.call(t).Error, c.code, c.message)
		}
	}
	if l := log.String(); !strings.Contains(l, closed) || strings.Contains(l, toolsFileSecret) {
		t.Fatalf("server log (want the address %s, not the secret):\n%s", closed, l)
	}
}
