package downstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
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
	req, _ := http.NewRequest(http.MethodOptions, ts.URL+"/refunds", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("OPTIONS /refunds: %d", resp.StatusCode)
	}
	if n := ledgerCount(t, ts.URL); n != 0 {
		t.Fatalf("refused requests charged: %d", n)
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// TestLookup: GET /charges?idempotency_key=K finds the first charge made
// with K on /charges (200), and answers 404 for a key never used there.
func TestLookup(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(New(true).Handler())
	defer ts.Close()
	var c Charge
	post(t, ts.URL+"/charges", "eff_a", `{"amount": 1}`)
	post(t, ts.URL+"/charges", "eff_b", `{"amount": 2}`)
	post(t, ts.URL+"/charges", "eff_a", `{"amount": 3}`)
	post(t, ts.URL+"/refunds", "eff_r", `{"amount": 4}`)
	if s := getJSON(t, ts.URL+"/refunds?idempotency_key=eff_r", &c); s != 200 || c.ID != "ch_4" {
		t.Fatalf("lookup eff_r on /refunds: %d %+v", s, c)
	}
	if s := getJSON(t, ts.URL+"/charges?idempotency_key=eff_r", nil); s != 404 {
		t.Fatalf("lookup eff_r on /charges: %d, want 404 (made on /refunds)", s)
	}
	if s := getJSON(t, ts.URL+"/charges?idempotency_key=eff_a", &c); s != 200 || c.ID != "ch_1" || c.Key != "eff_a" {
		t.Fatalf("lookup eff_a: %d %+v", s, c)
	}
	if s := getJSON(t, ts.URL+"/charges?idempotency_key=eff_b", &c); s != 200 || c.ID != "ch_2" {
		t.Fatalf("lookup eff_b: %d %+v", s, c)
	}
	for _, k := range []string{"eff_none", ""} {
		if s := getJSON(t, ts.URL+"/charges?idempotency_key="+k, nil); s != 404 {
			t.Fatalf("lookup %q: %d, want 404", k, s)
		}
	}
}

// TestListPages: GET /charges?since=T lists the charges made at or after
// T, oldest first, in pages linked by next, every record once.
func TestListPages(t *testing.T) {
	t.Parallel()
	ds := New(false)
	ts := httptest.NewServer(ds.Handler())
	defer ts.Close()
	for i := range 7 {
		post(t, ts.URL+"/charges", "eff_"+string(rune('a'+i)), `{"amount": 1}`)
		post(t, ts.URL+"/refunds", "eff_r"+string(rune('a'+i)), `{"amount": 1}`) // listed on /refunds only
	}
	var ids []string
	next := "/charges?limit=3"
	pages := 0
	for next != "" {
		var p Page
		if s := getJSON(t, ts.URL+next, &p); s != 200 {
			t.Fatalf("GET %s: %d", next, s)
		}
		pages++
		for _, c := range p.Data {
			ids = append(ids, c.ID)
		}
		next = p.Next
	}
	if pages != 3 || strings.Join(ids, ",") != "ch_1,ch_3,ch_5,ch_7,ch_9,ch_11,ch_13" {
		t.Fatalf("%d pages, records %v", pages, ids)
	}

	// since: RFC 3339 and Unix seconds; a time after every charge lists none.
	cut := ds.Ledger()[8].At // ch_9
	var p Page
	getJSON(t, ts.URL+"/charges?since="+cut.Format(time.RFC3339Nano), &p)
	if len(p.Data) != 3 || p.Data[0].ID != "ch_9" {
		t.Fatalf("since %s: %+v", cut, p.Data)
	}
	getJSON(t, ts.URL+"/charges?since="+strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10), &p)
	if len(p.Data) != 0 || p.Next != "" {
		t.Fatalf("since an hour ahead: %+v", p)
	}
	for _, bad := range []string{"since=yesterday", "limit=0", "limit=x", "after=-1"} {
		if s := getJSON(t, ts.URL+"/charges?"+bad, nil); s != 400 {
			t.Fatalf("%s: %d, want 400", bad, s)
		}
	}
}

// TestLoseAnswers: a lost answer still makes the charge; the client sees
// the connection closed with no answer. LoseLimit stops after that many,
// and the same seed loses the same answers.
func TestLoseAnswers(t *testing.T) {
	t.Parallel()
	ds, err := NewWith(Options{IgnoreKeys: true, LoseAnswers: 1, LoseLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(ds.Handler())
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/charges", strings.NewReader(`{"amount": 1}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("first charge answered %d, want the connection closed", resp.StatusCode)
	}
	if s, _, _ := post(t, ts.URL+"/charges", "", `{"amount": 1}`); s != 201 {
		t.Fatalf("second charge: %d, want 201 (LoseLimit 1)", s)
	}
	if n := ledgerCount(t, ts.URL); n != 2 || ds.Lost() != 1 {
		t.Fatalf("ledger %d, lost %d; want 2 charges, 1 lost", n, ds.Lost())
	}

	pattern := func(seed uint64) string {
		ds, _ := NewWith(Options{LoseAnswers: 0.5, Seed: seed})
		ts := httptest.NewServer(ds.Handler())
		defer ts.Close()
		var b strings.Builder
		for range 20 {
			resp, err := http.Post(ts.URL+"/charges", "application/json", strings.NewReader(`{}`))
			if err != nil {
				b.WriteByte('x')
				continue
			}
			resp.Body.Close()
			b.WriteByte('.')
		}
		if n := len(ds.Ledger()); n != 20 {
			t.Errorf("seed %d: %d charges, want 20", seed, n)
		}
		return b.String()
	}
	a, b := pattern(7), pattern(7)
	if a != b || !strings.Contains(a, "x") || !strings.Contains(a, ".") {
		t.Fatalf("seed 7 twice: %s and %s; want the same mix of lost (x) and answered (.)", a, b)
	}
	for _, bad := range []Options{{LoseAnswers: -0.1}, {LoseAnswers: 1.5}, {LoseLimit: -1}} {
		if _, err := NewWith(bad); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}
