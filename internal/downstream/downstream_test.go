package downstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func post(t *testing.T, url, key, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func ledgerCount(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Count   int      `json:"count"`
		Charges []Charge `json:"charges"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || l.Count != len(l.Charges) {
		t.Fatalf("ledger: %v %+v", err, l)
	}
	return l.Count
}

// TestKeyHonoured: the same key and body gets the first answer back and no
// new charge; the same key with another body is refused (422); another key
// is another charge.
func TestKeyHonoured(t *testing.T) {
	ts := httptest.NewServer(New(false).Handler())
	defer ts.Close()
	s1, b1, _ := post(t, ts.URL+"/refunds", "eff_1", `{"amount": 5}`)
	s2, b2, h2 := post(t, ts.URL+"/refunds", "eff_1", `{"amount":5}`) // same JSON, other spacing
	if s1 != 201 || s2 != 201 || b1 != b2 || h2.Get(HeaderReplayed) != "true" {
		t.Fatalf("first %d %s, repeat %d %s %v", s1, b1, s2, b2, h2)
	}
	if n := ledgerCount(t, ts.URL); n != 1 {
		t.Fatalf("ledger has %d charges after a repeat, want 1", n)
	}
	if s, b, _ := post(t, ts.URL+"/refunds", "eff_1", `{"amount": 6}`); s != 422 || !strings.Contains(b, "idempotency_key_reused") {
		t.Fatalf("reused key with another body: %d %s", s, b)
	}
	if s, _, _ := post(t, ts.URL+"/other", "eff_1", `{"amount": 5}`); s != 422 {
		t.Fatalf("reused key on another path: %d", s)
	}
	if s, _, _ := post(t, ts.URL+"/refunds", "eff_2", `{"amount": 5}`); s != 201 {
		t.Fatalf("new key: %d", s)
	}
	if n := ledgerCount(t, ts.URL); n != 2 {
		t.Fatalf("ledger has %d charges, want 2", n)
	}
}

// TestIgnoreKeys: the contrast records every request.
func TestIgnoreKeys(t *testing.T) {
	ts := httptest.NewServer(New(true).Handler())
	defer ts.Close()
	for range 3 {
		if s, _, h := post(t, ts.URL+"/refunds", "eff_1", `{"amount": 5}`); s != 201 || h.Get(HeaderReplayed) != "" {
			t.Fatalf("status %d", s)
		}
	}
	if n := ledgerCount(t, ts.URL); n != 3 {
		t.Fatalf("ledger has %d charges, want 3", n)
	}
}

func TestBadRequests(t *testing.T) {
	ts := httptest.NewServer(New(false).Handler())
	defer ts.Close()
	if s, _, _ := post(t, ts.URL+"/refunds", "k", `not json`); s != 400 {
		t.Fatalf("not JSON: %d", s)
	}
	if s, _, _ := post(t, ts.URL+"/refunds", "k", `"`+strings.Repeat("x", MaxBody)+`"`); s != 413 {
		t.Fatalf("too large: %d", s)
	}
	resp, err := http.Get(ts.URL + "/refunds")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("GET /refunds: %d", resp.StatusCode)
	}
	if n := ledgerCount(t, ts.URL); n != 0 {
		t.Fatalf("refused requests charged: %d", n)
	}
}
