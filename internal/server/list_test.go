package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/idemctl/idemctl/internal/wire"
)

func listPage(t *testing.T, b *bundle, query, token string) wire.Page[wire.Call] {
	t.Helper()
	r := b.get("/v1/tool-calls"+query, "Authorization", bearer(token))
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/tool-calls%s: %d %s", query, r.status, r.body)
	}
	var v wire.Page[wire.Call]
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestListPages: GET /v1/tool-calls lists the principal's own calls, newest
// first, page by page through next, each once, with calls created between
// pages not disturbing the later pages; bad parameters are 400.
func TestListPages(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t)
	var made []string
	for i := range 5 {
		r := b.post(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"tool":"charge","args":{"amount":%d}}`, i+1),
			"Authorization", bearer(aliceToken))
		made = append([]string{r.call(t).CallID}, made...) // newest first
	}
	b.post("k0", `{"tool":"charge","args":{"amount":1}}`, "Authorization", bearer(bobToken))

	var got []string
	query := "?limit=2"
	for page := 0; ; page++ {
		v := listPage(t, b, query, aliceToken)
		for _, c := range v.Calls {
			got = append(got, c.CallID)
		}
		if page == 0 { // a call created while paging
			b.post("late", `{"tool":"charge","args":{"amount":9}}`, "Authorization", bearer(aliceToken))
		}
		if v.Next == nil {
			break
		}
		query = "?limit=2&after=" + url.QueryEscape(*v.Next)
	}
	if fmt.Sprint(got) != fmt.Sprint(made) {
		t.Fatalf("pages = %v, want %v", got, made)
	}
	if v := listPage(t, b, "", bobToken); len(v.Calls) != 1 || v.Next != nil {
		t.Fatalf("bob sees %d calls (next %v), want his one", len(v.Calls), v.Next)
	}
	if v := listPage(t, b, "?status=failed", aliceToken); len(v.Calls) != 0 {
		t.Fatalf("failed calls: %d, want none", len(v.Calls))
	}
	if v := listPage(t, b, "?tool=send_email", aliceToken); len(v.Calls) != 0 {
		t.Fatalf("send_email calls: %d, want none", len(v.Calls))
	}
	for _, q := range []string{"?limit=0", "?limit=501", "?limit=x", "?status=done", "?after=garbage", "?sort=asc"} {
		r := b.get("/v1/tool-calls"+q, "Authorization", bearer(aliceToken))
		if r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
			t.Errorf("GET /v1/tool-calls%s: %d %s, want 400 bad_request", q, r.status, r.body)
		}
	}
}

// TestListKeyPrefixAndTime: key_prefix narrows to keys starting with it,
// since/until to a creation-time window (RFC 3339); a bad time is 400.
func TestListKeyPrefixAndTime(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t)
	for _, k := range []string{"order-1", "order-2", "refund-1"} {
		b.post(k, `{"tool":"charge","args":{"amount":1}}`, "Authorization", bearer(aliceToken))
	}
	b.post("order-3", `{"tool":"charge","args":{"amount":1}}`, "Authorization", bearer(bobToken))
	keys := func(v wire.Page[wire.Call]) string {
		var out []string
		for _, c := range v.Calls {
			out = append(out, c.IdemKey)
		}
		return fmt.Sprint(out)
	}
	if got := keys(listPage(t, b, "?key_prefix=order-", aliceToken)); got != "[order-2 order-1]" {
		t.Errorf("key_prefix=order-: %s", got)
	}
	past, future := "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z"
	if got := keys(listPage(t, b, "?since="+past+"&until="+future+"&key_prefix=r", aliceToken)); got != "[refund-1]" {
		t.Errorf("since/until around now: %s", got)
	}
	if got := keys(listPage(t, b, "?since="+future, aliceToken)); got != "[]" {
		t.Errorf("since the future: %s", got)
	}
	if got := keys(listPage(t, b, "?until="+past, aliceToken)); got != "[]" {
		t.Errorf("until the past: %s", got)
	}
	for _, q := range []string{"?since=yesterday", "?until=2026-12-01"} {
		r := b.get("/v1/tool-calls"+q, "Authorization", bearer(aliceToken))
		if r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
			t.Errorf("GET /v1/tool-calls%s: %d %s, want 400 bad_request", q, r.status, r.body)
		}
	}
}
