package client

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestTransportDoesNotResendAKeyedPOST: net/http resends a request that
// carries an Idempotency-Key on its own when a reused connection dies after
// the request was written, if it can rewind the body (Request.GetBody).
// Such a resend is an attempt nobody counts, backs off or reports; the
// client clears GetBody so that only its own loop retries. The server here
// answers key A normally (the connection stays open for reuse), then reads
// key B's request on that connection and hangs up without a reply.
func TestTransportDoesNotResendAKeyedPOST(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{} // physical requests per key
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if key == "B" && n == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close() // the request arrived; the reply never leaves
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, callJSON("c_"+key, key, "pending"))
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	// One connection, reused: the resend only happens on a reused one.
	c, _ := setup(t, srv.URL, WithHTTPClient(&http.Client{Transport: tr}), WithRetries(0))

	if _, err := c.Submit(t.Context(), "charge", nil, WithKey("A")); err != nil {
		t.Fatalf("call A: %v", err)
	}
	res, err := c.Submit(t.Context(), "charge", nil, WithKey("B"))

	mu.Lock()
	physical := seen["B"]
	mu.Unlock()
	if physical != 1 {
		t.Fatalf("the server received key B %d times for one client attempt: the transport resent it", physical)
	}
	if err == nil || len(res.Attempts) != 1 || res.Attempts[0].HTTP != 0 {
		t.Fatalf("call B = %+v, %v; want one attempt without an answer", res, err)
	}
}
