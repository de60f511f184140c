package server

import (
	"context"
	"crypto/sha256"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

const hitsSeries = "idemctl_replay_cache_hits_total"

// succeeded POSTs body under key and waits until its call succeeded.
func (b *bundle) succeeded(key, body string, header ...string) wire.Call {
	b.t.Helper()
	r := b.post(key, body, header...)
	if r.status != http.StatusAccepted {
		b.t.Fatalf("POST %s: %d %s; want 202", key, r.status, r.body)
	}
	var c wire.Call
	eventually(b.t, "the call is final", func() bool {
		c = b.get(wire.CallPath(r.call(b.t).CallID), header...).call(b.t)
		return c.Status.Final()
	})
	if c.Status != store.StatusSucceeded {
		b.t.Fatalf("call %s ended %s, want succeeded", c.CallID, c.Status)
	}
	return c
}

// hitsOf reads idemctl_replay_cache_hits_total from srv's registry (GET
// /metrics wants a token on a server with auth).
func hitsOf(t *testing.T, srv *Server) float64 {
	t.Helper()
	mfs, err := srv.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == hitsSeries {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", hitsSeries)
	return 0
}

// withoutDate is an answer's header without Date, the one header two
// answers a second apart may differ in.
func withoutDate(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Date")
	return h
}

// TestReplayCacheAnswersAsTheStore: a replay answered from the cache is
// byte for byte the answer of the full path (status, every header but
// Date, body), for every Prefer variant, and the first replay of a body
// is the full path's, the second the cache's.
func TestReplayCacheAnswersAsTheStore(t *testing.T) {
	b := setup(t)
	const body = `{"tool":"charge","args":{"amount":7},"client_id":"shop-1","seq":3}`
	b.succeeded("same-answer", body)
	for _, prefer := range []string{"", "wait=5", "wait=100000", `respond-async, wait="2"`, "wait=0", "wait=1.5"} {
		var header []string
		if prefer != "" {
			header = []string{wire.HeaderPrefer, prefer}
		}
		b.srv.replays.clear()
		hits := b.metricValue(hitsSeries)
		full := b.post("same-answer", body, header...)
		if got := b.metricValue(hitsSeries); got != hits {
			t.Fatalf("Prefer %q: the first replay after a clear was answered from the cache (%v hits, want %v)", prefer, got, hits)
		}
		cached := b.post("same-answer", body, header...)
		if got := b.metricValue(hitsSeries); got != hits+1 {
			t.Fatalf("Prefer %q: the second replay was not answered from the cache (%v hits, want %v)", prefer, got, hits+1)
		}
		if full.status != http.StatusOK || full.header.Get(wire.HeaderIdempotentReplayed) != wire.ReplayedTrue {
			t.Fatalf("Prefer %q: full path answered %d %v", prefer, full.status, full.header)
		}
		if cached.status != full.status || !reflect.DeepEqual(withoutDate(cached.header), withoutDate(full.header)) ||
			string(cached.body) != string(full.body) {
			t.Fatalf("Prefer %q: the cached answer differs from the full path's:\n cached %d %v\n%s\n full   %d %v\n%s",
				prefer, cached.status, cached.header, cached.body, full.status, full.header, full.body)
		}
	}
}

// TestReplayCacheConflict: while an entry exists, the same key with
// another request is still 409, and another spelling of the same request
// is answered by the full path (a replay), never from the entry.
func TestReplayCacheConflict(t *testing.T) {
	b := setup(t)
	const body = `{"tool":"charge","args":{"amount":7}}`
	c := b.succeeded("conflict", body)
	b.post("conflict", body)
	if r := b.post("conflict", body); r.status != http.StatusOK || b.metricValue(hitsSeries) != 1 {
		t.Fatalf("replay: %d, %v hits; want 200 from the cache", r.status, b.metricValue(hitsSeries))
	}
	r := b.post("conflict", `{"tool":"charge","args":{"amount":8}}`)
	if r.status != http.StatusConflict || r.errCode(t) != wire.CodeIdempotencyConflict {
		t.Fatalf("another request under the key: %d %s; want 409 %s", r.status, r.body, wire.CodeIdempotencyConflict)
	}
	r = b.post("conflict", `{"args": {"amount": 7.0}, "tool": "charge"}`)
	if r.status != http.StatusOK || r.call(t).CallID != c.CallID {
		t.Fatalf("the same request spelled otherwise: %d %s; want 200 with %s", r.status, r.body, c.CallID)
	}
	if got := b.metricValue(hitsSeries); got != 1 {
		t.Fatalf("%v hits; want 1: a conflict and another spelling take the full path", got)
	}
}

// TestReplayCachePurged: once retention has purged a call, its key is not
// answered from the cache: 410 with tombstones, a new call without.
func TestReplayCachePurged(t *testing.T) {
	for _, tombstones := range []bool{true, false} {
		t.Run(map[bool]string{true: "tombstones", false: "no tombstones"}[tombstones], func(t *testing.T) {
			b := setup(t, func(c *Config) {
				c.Retention = time.Hour
				if tombstones {
					c.TombstoneRetention = 30 * 24 * time.Hour
				}
			})
			const body = `{"tool":"charge","args":{"amount":5}}`
			old := b.succeeded("purged", body)
			b.post("purged", body)
			if r := b.post("purged", body); r.status != http.StatusOK || b.metricValue(hitsSeries) != 1 {
				t.Fatalf("replay before the purge: %d, %v hits; want 200 from the cache", r.status, b.metricValue(hitsSeries))
			}
			// Two hours pass, for the database (the call's last update)
			// and for the cache alike; then the purge runs.
			ageCall(t, b, old.CallID)
			b.srv.replays.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
			if n := b.srv.purgeOnce(context.Background()); n != 1 {
				t.Fatalf("purged %d, want 1", n)
			}
			r := b.post("purged", body)
			switch {
			case tombstones && (r.status != http.StatusGone || r.errCode(t) != wire.CodeIdempotencyKeyExpired):
				t.Fatalf("after the purge, with tombstones: %d %s; want 410 %s", r.status, r.body, wire.CodeIdempotencyKeyExpired)
			case !tombstones && (r.status != http.StatusAccepted || r.call(t).CallID == old.CallID):
				t.Fatalf("after the purge, without tombstones: %d %s; want 202 with a new call", r.status, r.body)
			}
			if got := b.metricValue(hitsSeries); got != 1 {
				t.Fatalf("%v hits after the purge; want still 1", got)
			}
		})
	}
}

// TestReplayCacheOnlySucceeded: replays of a failed call, final or not,
// are never answered from the cache.
func TestReplayCacheOnlySucceeded(t *testing.T) {
	b := setup(t)
	const body = `{"tool":"fail","args":{"retryable":false}}`
	r := b.post("failed", body)
	if c := b.waitFinal(r.call(t).CallID); c.Status != store.StatusFailed {
		t.Fatalf("the fail call ended %s", c.Status)
	}
	for range 3 {
		if r := b.post("failed", body); r.status != http.StatusOK || r.call(t).Status != store.StatusFailed {
			t.Fatalf("replay of a failed call: %d %s", r.status, r.body)
		}
	}
	if hits, n := b.metricValue(hitsSeries), b.srv.replays.len(); hits != 0 || n != 0 {
		t.Fatalf("after replays of a failed call: %v hits, %d entries; want none", hits, n)
	}
}

// TestReplayCachePrincipals: another principal's same key and body never
// sees the entry: it is that principal's own new call.
func TestReplayCachePrincipals(t *testing.T) {
	b, _ := setupAuth(t)
	const body = `{"tool":"charge","args":{"amount":9}}`
	alice := b.succeeded("shared-key", body, "Authorization", bearer(aliceToken))
	b.post("shared-key", body, "Authorization", bearer(aliceToken))
	if r := b.post("shared-key", body, "Authorization", bearer(aliceToken)); r.status != http.StatusOK || hitsOf(t, b.srv) != 1 {
		t.Fatalf("alice's replay: %d, %v hits; want 200 from the cache", r.status, hitsOf(t, b.srv))
	}
	r := b.post("shared-key", body, "Authorization", bearer(bobToken))
	if r.status != http.StatusAccepted || r.call(t).CallID == alice.CallID {
		t.Fatalf("bob with alice's key and body: %d %s; want 202 with a call of his own", r.status, r.body)
	}
	if got := hitsOf(t, b.srv); got != 1 {
		t.Fatalf("%v hits; want still 1", got)
	}
}

// testCache is a cache with a clock the test moves.
func testCache(retention time.Duration) (*replayCache, *time.Time) {
	c := newReplayCache(retention)
	now := time.Unix(1_800_000_000, 0)
	c.now = func() time.Time { return now }
	return c, &now
}

func succeededCall(id string, updated time.Time) store.Call {
	return store.Call{CallID: id, Tool: "charge", Status: store.StatusSucceeded,
		UpdatedAt: float64(updated.UnixNano()) / 1e9}
}

// TestReplayCacheBounds: the cache holds at most maxEntries answers, and
// none larger than maxAnswer.
func TestReplayCacheBounds(t *testing.T) {
	c, now := testCache(0)
	c.maxEntries = 3
	sum := sha256.Sum256([]byte("body"))
	for i := range 10 {
		k := "k" + string(rune('a'+i))
		c.put(c.generation(), "p", k, sum, succeededCall("c_"+k, *now), []byte("{}\n"))
		if c.len() > 3 {
			t.Fatalf("after %d puts: %d entries, want at most 3", i+1, c.len())
		}
		if c.get("p", k, sum) == nil {
			t.Fatalf("the entry just put (%s) is not there", k)
		}
	}
	big := []byte(strings.Repeat("x", c.maxAnswer+1))
	c.put(c.generation(), "p", "big", sum, succeededCall("c_big", *now), big)
	if c.get("p", "big", sum) != nil {
		t.Fatalf("an answer of %d bytes was cached; at most %d are", len(big), c.maxAnswer)
	}
	if e := c.get("p", "kj", sha256.Sum256([]byte("other body"))); e != nil {
		t.Fatal("an entry answered another body")
	}
}

// TestReplayCacheLifetime: an entry expires after the TTL, and never lives
// past half the retention after the call's last update (the purge takes
// the call a whole retention after it); a call older than that is not
// cached at all.
func TestReplayCacheLifetime(t *testing.T) {
	c, now := testCache(time.Hour)
	sum := sha256.Sum256([]byte("body"))
	c.put(c.generation(), "p", "fresh", sum, succeededCall("c_1", *now), []byte("{}\n"))
	*now = now.Add(c.ttl - time.Millisecond)
	if c.get("p", "fresh", sum) == nil {
		t.Fatal("an entry expired before its TTL")
	}
	*now = now.Add(time.Millisecond)
	if c.get("p", "fresh", sum) != nil {
		t.Fatal("an entry was served at its TTL")
	}

	// Updated 30 min - 1 s ago: one second left before half the retention.
	c.put(c.generation(), "p", "old", sum, succeededCall("c_2", now.Add(-30*time.Minute+time.Second)), []byte("{}\n"))
	*now = now.Add(time.Second - time.Millisecond)
	if c.get("p", "old", sum) == nil {
		t.Fatal("an entry expired before half the retention after its call's update")
	}
	*now = now.Add(time.Millisecond)
	if c.get("p", "old", sum) != nil {
		t.Fatal("an entry was served half the retention after its call's update")
	}
	c.put(c.generation(), "p", "older", sum, succeededCall("c_3", now.Add(-30*time.Minute)), []byte("{}\n"))
	if c.len() != 2 {
		t.Fatalf("%d entries; a call updated half the retention ago must not be cached", c.len())
	}

	if newReplayCache(replayMinRetention-time.Second) != nil {
		t.Fatalf("a cache runs with a retention below %s", replayMinRetention)
	}
}

// TestReplayCacheRegistryRefresh: a refresh of the registry drops every
// entry, and an answer computed before it is not stored after it.
func TestReplayCacheRegistryRefresh(t *testing.T) {
	c, now := testCache(0)
	sum := sha256.Sum256([]byte("body"))
	c.put(c.generation(), "p", "k", sum, succeededCall("c_1", *now), []byte("{}\n"))
	gen := c.generation() // a request checked against the registry now
	c.clear()             // the registry changed
	if c.get("p", "k", sum) != nil {
		t.Fatal("an entry outlived a refresh of the registry")
	}
	c.put(gen, "p", "k", sum, succeededCall("c_1", *now), []byte("{}\n"))
	if c.get("p", "k", sum) != nil {
		t.Fatal("an answer checked against the registry before a refresh was stored after it")
	}
}

// TestReplayCacheClearedByRefresh: a refresh of the upstream MCP servers'
// tools empties the server's cache (the same body may now be refused).
func TestReplayCacheClearedByRefresh(t *testing.T) {
	u := setupUpstream(t, false, false, "")
	const body = `{"tool":"demo_send_receipt","args":{"to":"bo","amount":1}}`
	u.succeeded("receipt", body)
	u.post("receipt", body)
	if u.srv.replays.len() != 1 {
		t.Fatalf("%d entries after a replay of a succeeded call; want 1", u.srv.replays.len())
	}
	if err := u.reg.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := u.srv.replays.len(); n != 0 {
		t.Fatalf("%d entries after a refresh of the registry; want none", n)
	}
}

// TestReplayCacheBothClocks: an entry expires by whichever clock passes
// its end first. Go's times compare by the monotonic clock when both have
// a reading of it, and that clock stands still while the machine sleeps:
// the wall clock's end is checked too. (Times with a monotonic reading
// cannot be made to disagree with the wall clock, so the entry is made by
// hand.)
func TestReplayCacheBothClocks(t *testing.T) {
	c := newReplayCache(0)
	sum := sha256.Sum256([]byte("body"))
	now := time.Now() // with a monotonic reading
	c.now = func() time.Time { return now }
	c.entries[replayKey{"p", "k"}] = &replayEntry{sum: sum, callID: "c_1", answer: []byte("{}\n"),
		expires: now.Add(time.Minute), wallExpires: now.Round(0).Add(time.Minute)}
	if c.get("p", "k", sum) == nil {
		t.Fatal("an entry before its end by both clocks is not served")
	}
	c.entries[replayKey{"p", "k"}].wallExpires = now.Round(0).Add(-time.Second)
	if c.get("p", "k", sum) != nil {
		t.Fatal("an entry past its end by the wall clock (not by the monotonic one) was served")
	}
	c.entries[replayKey{"p", "k"}].wallExpires = now.Round(0).Add(time.Minute)
	c.entries[replayKey{"p", "k"}].expires = now.Add(-time.Second)
	if c.get("p", "k", sum) != nil {
		t.Fatal("an entry past its end by the monotonic clock was served")
	}
}
