package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
)

// TestRetryAfterBoundedAndShown: a downstream answering Retry-After of ten
// years parks the call no longer than the tool's retry.max_backoff, and
// the pending call shows why it waits: its error is the failure being
// waited out, Retry-After and the cap included, next to not_before.
func TestRetryAfterBoundedAndShown(t *testing.T) {
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
	got := b.get(CallPath(c.CallID)).call(t)
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
