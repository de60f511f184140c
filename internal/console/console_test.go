package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/idemctl/idemctl/internal/store"
)

// TestOverview checks the queue cards, the rate and attempt charts'
// numbers and the recent failures (the principal's only).
func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	ctx := t.Context()
	b.create(t, "alice", "a", "echo", `{}`)
	b.create(t, "alice", "b", "echo", `{}`)
	bad := b.create(t, "alice", "bad", "charge", `{}`)
	theirs := b.create(t, "bob", "theirs-bad", "charge", `{}`)
	claimed := b.claim(t, "owner-1") // all four run, attempt 1
	for _, c := range []store.Call{bad, theirs} {
		if _, err := b.st.Fail(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: "owner-1", Attempt: claimed[c.CallID].Attempt},
			Error: json.RawMessage(`{"code":"tool_failed","message":"card declined","retryable":false}`)}); err != nil {
			t.Fatal(err)
		}
	}
	b.create(t, "alice", "c", "sleep", `{}`) // pending, attempt 0
	r := b.get(t, "/ui", "tok-alice")
	if r.code != http.StatusOK {
		t.Fatalf("status %d", r.code)
	}
	want := map[string]string{"depth": "1", "count-pending": "1", "count-running": "2",
		"count-succeeded": "0", "count-failed": "2", "calls": "5", "effects": "0",
		"total-created": "5", "total-finished": "2", "total-failed": "2"}
	for id, v := range want {
		if got := textByID(t, r.doc, id); got != v {
			t.Errorf("#%s = %q, want %q", id, got, v)
		}
	}
	bars := map[string]string{}
	for _, rect := range find(r.doc, "rect", "class", "bar") {
		bars[attr(rect, "data-attempt")] = attr(rect, "data-calls")
	}
	if fmt.Sprint(bars) != "map[0:1 1:4]" {
		t.Errorf("attempt bars %v, want attempt 0: 1 call, attempt 1: 4 calls", bars)
	}
	if n := len(find(byID(t, r.doc, "rates-chart"), "polyline", "", "")); n != 3 {
		t.Errorf("rates chart has %d lines, want 3", n)
	}
	failures := text(byID(t, r.doc, "failures"))
	if !strings.Contains(failures, "bad") || !strings.Contains(failures, "card declined") || strings.Contains(failures, "theirs-bad") {
		t.Errorf("recent failures %q: want alice's failed call only", failures)
	}
	if attr(find(r.doc, "body", "", "")[0], "data-refresh") != "5" {
		t.Error("the overview does not ask console.js to refresh it")
	}
}

// TestCallTimelineClaimedAtCreation: a call claimed by its create has
// one created row, which the timeline shows as both steps (the tool, and
// the claim's owner and attempt 1); the claim after its recovery is
// attempt 2.
func TestCallTimelineClaimedAtCreation(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, false)
	ctx := t.Context()
	c, _, err := b.st.CreateOrGet(ctx, store.NewCall{CallID: "c_00000000000c1a1e", IdemKey: "order-43", Fingerprint: "fp",
		Tool: "charge", ArgsJSON: json.RawMessage(`{"amount":7}`), Claim: &store.CreateClaim{Owner: "owner-1", Lease: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.st.Release(ctx, store.LeaseOf(c), "owner process gone"); err != nil {
		t.Fatal(err)
	}
	b.claim(t, "owner-2")
	r := b.get(t, "/ui/calls/"+c.CallID, "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d", r.code)
	}
	got := timeline(t, r.doc)
	want := []string{
		"created tool charge claimed by owner-1 attempt 1",
		"outcome_unknown abandoned: attempt 1 in flight, owner process gone",
		"recover owner process gone",
		"claimed owner owner-2 attempt 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCallTimeline renders a call that went through two claims, a
// scheduled retry with heartbeats, a fenced completion, a recovery and a
// success with an effect, and checks the timeline's events in order with
// their owner, attempt, delay and heartbeat count, and the effect row.
func TestCallTimeline(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, false)
	ctx := t.Context()
	c := b.create(t, "", "order-42", "charge", `{"amount":7}`)
	a1 := b.claim(t, "owner-1")[c.CallID]
	if _, err := b.st.ScheduleRetry(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: "owner-1", Attempt: a1.Attempt},
		Extensions: 2, Error: json.RawMessage(`{"code":"downstream_error","message":"503","retryable":true}`)}, 0); err != nil {
		t.Fatal(err)
	}
	a2 := b.claim(t, "owner-2")[c.CallID]
	// A stale completion of attempt 1: fenced.
	if _, err := b.st.Succeed(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: "owner-1", Attempt: a1.Attempt},
		Result: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("a stale completion was not fenced")
	}
	if err := b.st.Release(ctx, store.Lease{CallID: c.CallID, Owner: "owner-2", Attempt: a2.Attempt}, "owner process gone"); err != nil {
		t.Fatal(err)
	}
	a3 := b.claim(t, "owner-3")[c.CallID]
	if _, err := b.st.Succeed(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: "owner-3", Attempt: a3.Attempt}, Extensions: 1,
		Result: json.RawMessage(`{"charged":7}`), Effect: &store.Effect{EffectID: "e_42", CallID: c.CallID, Tool: "charge"}}); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, "/ui/calls/"+c.CallID, "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d", r.code)
	}
	got := timeline(t, r.doc)
	want := []string{
		"created tool charge",
		"claimed owner owner-1 attempt 1",
		"retry_scheduled retry in 0s heartbeats 2 downstream_error: 503",
		"claimed owner owner-2 attempt 2",
		"fenced owner owner-1 attempt 1 refused: call is running under owner owner-2 attempt 2",
		"outcome_unknown abandoned: attempt 2 in flight, owner process gone",
		"recover owner process gone",
		"claimed owner owner-3 attempt 3",
		"succeeded effect e_42 heartbeats 1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if eff := textByID(t, r.doc, "effect"); !strings.Contains(eff, "e_42") {
		t.Errorf("effect row %q", eff)
	}
	if res := textByID(t, r.doc, "result"); !strings.Contains(res, `"charged": 7`) {
		t.Errorf("result %q", res)
	}
	if len(find(r.doc, "a", "id", "cancel")) != 0 {
		t.Error("a succeeded call offers cancel")
	}
	curl := textByID(t, r.doc, "curl")
	if !strings.HasPrefix(curl, "curl -sS '") || !strings.HasSuffix(curl, "/v1/tool-calls/"+c.CallID+"'") {
		t.Errorf("curl %q", curl)
	}
}

// TestCallPageStates: a pending call offers cancel and has no result,
// effect or error; a failed one shows its error.
func TestCallPageStates(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, false)
	pending := b.create(t, "", "k-pending", "echo", `{"n":1}`)
	r := b.get(t, "/ui/calls/"+pending.CallID, "")
	if len(find(r.doc, "a", "id", "cancel")) != 1 || len(find(r.doc, "", "id", "no-effect")) != 1 ||
		len(find(r.doc, "", "id", "result")) != 0 || len(find(r.doc, "", "id", "error")) != 0 {
		t.Error("pending call page: want a cancel link, no effect, no result, no error")
	}
	bad := b.create(t, "", "k-bad", "fail", `{}`)
	cl := b.claim(t, "o")
	if _, err := b.st.Fail(t.Context(), store.Completion{Lease: store.Lease{CallID: bad.CallID, Owner: "o", Attempt: cl[bad.CallID].Attempt},
		Error: json.RawMessage(`{"code":"tool_failed","message":"boom","retryable":false}`)}); err != nil {
		t.Fatal(err)
	}
	r = b.get(t, "/ui/calls/"+bad.CallID, "")
	if e := textByID(t, r.doc, "error"); !strings.Contains(e, `"message": "boom"`) {
		t.Errorf("error block %q", e)
	}
}

// TestEscaping shows hostile keys, tools and args as text on every page:
// no element comes from user data.
func TestEscaping(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, false)
	const hostile = `<script>alert(1)</script>`
	c := b.create(t, "", hostile, `<img src=x onerror=alert(3)>`, `{"x":"</pre><script>alert(2)</script>"}`)
	cl := b.claim(t, `<b>owner</b>`)
	if _, err := b.st.Fail(t.Context(), store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: `<b>owner</b>`, Attempt: cl[c.CallID].Attempt},
		Error: json.RawMessage(`{"code":"<script>x</script>","message":"<i>m</i>","retryable":false}`)}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ui", "/ui/calls", "/ui/calls?key=" + url.QueryEscape(hostile) + "&tool=%3Cscript%3E",
		"/ui/calls/" + c.CallID, "/ui/calls/" + c.CallID + "/cancel"} {
		r := b.get(t, path, "")
		if r.code != http.StatusOK {
			t.Errorf("%s: %d", path, r.code)
		}
		for _, tag := range []string{"img", "b", "i"} {
			if n := find(r.doc, tag, "", ""); len(n) != 0 {
				t.Errorf("%s: %d <%s> elements from user data", path, len(n), tag)
			}
		}
		// The only script element is console.js, by src.
		for _, s := range find(r.doc, "script", "", "") {
			if attr(s, "src") != "/ui/static/console.js" || text(s) != "" {
				t.Errorf("%s: a script element that is not console.js", path)
			}
		}
		if strings.Count(r.raw, "<script") != 1 {
			t.Errorf("%s: raw <script in the page %d times", path, strings.Count(r.raw, "<script"))
		}
		if strings.Contains(path, "key=") {
			if in := find(r.doc, "input", "name", "key"); len(in) != 1 || attr(in[0], "value") != hostile {
				t.Errorf("%s: the key filter is not shown back as the input's value", path)
			}
		} else if !strings.Contains(text(r.doc), hostile) {
			t.Errorf("%s: the key is not shown as text", path)
		}
	}
	r := b.get(t, "/ui/calls/"+c.CallID, "")
	if got := textByID(t, r.doc, "args"); !strings.Contains(got, "</pre><script>alert(2)</script>") {
		t.Errorf("args shown as %q", got)
	}
}

// TestOtherPrincipalNotFound: another principal's call is 404 on every
// page that names it, exactly like an unknown id, and cannot be canceled.
func TestOtherPrincipalNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	c := b.create(t, "alice", "k", "echo", `{}`)
	if r := b.get(t, "/ui/calls/"+c.CallID, "tok-alice"); r.code != http.StatusOK {
		t.Fatalf("owner: %d", r.code)
	}
	for _, p := range []string{"/ui/calls/" + c.CallID, "/ui/calls/" + c.CallID + "/cancel", "/ui/calls/c_ffffffffffffffff"} {
		if r := b.get(t, p, "tok-bob"); r.code != http.StatusNotFound || strings.Contains(r.raw, `>k<`) {
			t.Errorf("bob GET %s: %d, want 404", p, r.code)
		}
	}
	if r := b.get(t, "/ui/calls", "tok-bob"); len(find(r.doc, "td", "class", "key")) != 0 {
		t.Error("bob's list shows alice's call")
	}
	// bob posts a cancel of alice's call with a valid CSRF token of his
	// own (from the confirmation page of his own call).
	own := b.create(t, "bob", "bobs", "echo", `{}`)
	jar := client(t)
	page := do(t, jar, http.MethodGet, b.url+"/ui/calls/"+own.CallID+"/cancel", nil, "Authorization", "Bearer tok-bob")
	form := url.Values{"csrf": {csrfOf(t, page.doc, "/ui/calls/"+own.CallID+"/cancel")}}
	if r := do(t, jar, http.MethodPost, b.url+"/ui/calls/"+c.CallID+"/cancel", form, "Authorization", "Bearer tok-bob"); r.code != http.StatusNotFound {
		t.Errorf("bob canceling alice's call: %d, want 404", r.code)
	}
	if r := b.get(t, "/ui/nowhere", "tok-bob"); r.code != http.StatusNotFound {
		t.Errorf("unknown page: %d", r.code)
	}
	if cur, _ := b.st.GetAny(t.Context(), c.CallID); cur.Status != store.StatusPending {
		t.Errorf("alice's call is %s", cur.Status)
	}
}

// TestCallsListFilters walks /ui/calls page by page (each call once,
// newest first) and narrows it by key prefix, status and time.
func TestCallsListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, false)
	var want []string
	for i := range 8 {
		want = append([]string{fmt.Sprintf("key-%d", i)}, want...)
		b.create(t, "", fmt.Sprintf("key-%d", i), "echo", `{}`)
	}
	b.create(t, "", "other", "echo", `{}`)
	keys := func(r resp) []string {
		var out []string
		for _, td := range find(r.doc, "td", "class", "key") {
			out = append(out, text(td))
		}
		return out
	}
	var got []string
	path, pages := "/ui/calls?key=key-", 0
	for path != "" {
		if pages++; pages > 10 {
			t.Fatal("pagination does not end")
		}
		r := b.get(t, path, "")
		got = append(got, keys(r)...)
		path = ""
		if next := find(r.doc, "a", "rel", "next"); len(next) == 1 {
			path = attr(next[0], "href")
			if !strings.Contains(path, "key=key-") {
				t.Errorf("next link %q drops the filter", path)
			}
		}
	}
	if pages != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%d pages listed %v, want 3 pages of %v", pages, got, want)
	}
	future := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
	past := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
	for q, n := range map[string]int{"?key=oth": 1, "?since=" + future: 0, "?until=" + future + "&key=key-7": 1,
		"?since=" + past + "&status=pending&tool=echo": 3, "?status=running": 0} {
		if r := b.get(t, "/ui/calls"+q, ""); len(keys(r)) != n {
			t.Errorf("%s listed %v, want %d calls", q, keys(r), n)
		}
	}
	for _, q := range []string{"?status=bogus", "?after=nonsense", "?since=yesterday"} {
		if r := b.get(t, "/ui/calls"+q, ""); r.code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, r.code)
		}
	}
}

// TestSearch: an id or a key goes to the call; anything else lists the
// calls with that key prefix; another principal's id or key is not found.
func TestSearch(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	c := b.create(t, "alice", "order/7", "echo", `{}`)
	b.create(t, "bob", "bobs-key", "echo", `{}`)
	for q, loc := range map[string]string{
		c.CallID:   "/ui/calls/" + c.CallID,
		"order/7":  "/ui/calls/" + c.CallID,
		"order":    "/ui/calls?key=order",
		"bobs-key": "/ui/calls?key=bobs-key",
	} {
		r := b.get(t, "/ui/search?q="+url.QueryEscape(q), "tok-alice")
		if r.code != http.StatusSeeOther || r.hdr.Get("Location") != loc {
			t.Errorf("search %q: %d to %q, want %q", q, r.code, r.hdr.Get("Location"), loc)
		}
	}
	if r := b.get(t, "/ui/search?q="+c.CallID, "tok-bob"); r.hdr.Get("Location") == "/ui/calls/"+c.CallID {
		t.Error("bob's search finds alice's call by id")
	}
}

// TestLegacyRedirect: /console/... moved to /ui/... (308, query kept).
func TestLegacyRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, false)
	for from, to := range map[string]string{"/console/": "/ui", "/console/calls/c_0000000000000001": "/ui/calls/c_0000000000000001",
		"/console/?status=failed&after=x": "/ui/calls?status=failed&after=x"} {
		r := do(t, nil, http.MethodGet, b.url+from, nil)
		if r.code != http.StatusPermanentRedirect || r.hdr.Get("Location") != to {
			t.Errorf("%s: %d to %q, want 308 to %q", from, r.code, r.hdr.Get("Location"), to)
		}
	}
}

// TestNeedsAttention: a failed outcome_unknown call (held for an operator)
// is listed under "Needs attention" on the overview, and its call page
// says so with the resolve command; another failure is not, and neither
// is another principal's held call.
func TestNeedsAttention(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, true)
	held := b.create(t, "alice", "held", "pay", `{}`)
	known := b.create(t, "alice", "known", "pay", `{}`)
	theirs := b.create(t, "bob", "theirs-held", "pay", `{}`)
	claimed := b.claim(t, "o")
	for id, errJSON := range map[string]string{
		held.CallID:   `{"code":"outcome_unknown","message":"held","retryable":false,"unknown":"reset_after_send"}`,
		known.CallID:  `{"code":"downstream_rejected","message":"no","retryable":false}`,
		theirs.CallID: `{"code":"outcome_unknown","message":"held","retryable":false,"unknown":"abandoned"}`,
	} {
		if _, err := b.st.Fail(t.Context(), store.Completion{Lease: store.LeaseOf(claimed[id]), Error: json.RawMessage(errJSON)}); err != nil {
			t.Fatal(err)
		}
	}
	r := b.get(t, "/ui", "tok-alice")
	att := text(byID(t, r.doc, "attention"))
	if !strings.Contains(att, held.CallID) || strings.Contains(att, known.CallID) || strings.Contains(att, theirs.CallID) ||
		!strings.Contains(att, "idemctl resolve") {
		t.Errorf("needs attention %q: want alice's held call only, and how to resolve it", att)
	}
	r = b.get(t, "/ui/calls/"+held.CallID, "tok-alice")
	if n := textByID(t, r.doc, "needs-attention"); !strings.Contains(n, "idemctl resolve "+held.CallID+" --succeeded") {
		t.Errorf("held call page notice %q: want the resolve command", n)
	}
	r = b.get(t, "/ui/calls/"+known.CallID, "tok-alice")
	if len(find(r.doc, "", "id", "needs-attention")) != 0 {
		t.Error("a known failure's page says it needs attention")
	}
}

// timeline returns a call page's timeline, one "event body-text" line per
// entry, in order.
func timeline(t *testing.T, doc *html.Node) []string {
	t.Helper()
	var got []string
	for _, li := range find(byID(t, doc, "timeline"), "li", "", "") {
		got = append(got, attr(li, "data-event")+" "+text(find(li, "div", "class", "ev-body")[0]))
	}
	return got
}
