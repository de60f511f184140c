package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/wire"
)

func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A call that stays running for a while, so the replay is non-final.
	body := `{"tool":"sleep","args":{"seconds":0.3}}`
	first := b.post("k-headers", body)
	c := first.call(t)
	if first.status != http.StatusAccepted {
		t.Fatalf("new key: %d", first.status)
	}
	if got := first.header.Get("Location"); got != "/v1/tool-calls/"+c.CallID {
		t.Fatalf("Location %q", got)
	}
	if c.QueryURL != "/v1/tool-calls/"+c.CallID {
		t.Fatalf("query_url %q", c.QueryURL)
	}
	if first.header.Get("Retry-After") == "" {
		t.Fatal("202 without Retry-After")
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a new call marked Idempotent-Replayed")
	}
	if first.header.Get("Content-Type") != "application/json" {
		t.Fatalf("Content-Type %q", first.header.Get("Content-Type"))
	}

	replay := b.post("k-headers", body)
	if replay.header.Get("Idempotent-Replayed") != "true" || replay.header.Get("Location") != "/v1/tool-calls/"+c.CallID {
		t.Fatalf("replay headers: %v", replay.header)
	}
	if replay.status == http.StatusAccepted && replay.header.Get("Retry-After") == "" {
		t.Fatal("202 replay without Retry-After")
	}

	b.waitFinal(c.CallID)
	final := b.post("k-headers", body)
	if final.status != http.StatusOK || final.header.Get("Idempotent-Replayed") != "true" ||
		final.header.Get("Location") == "" || final.header.Get("Retry-After") != "" {
		t.Fatalf("final replay: %d %v", final.status, final.header)
	}

	get := b.get(wire.CallPath(c.CallID))
	if get.status != http.StatusOK || get.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("GET: %d %v", get.status, get.header)
	}
	// The shape of docs/api.md, "The call object", every member present.
	var m map[string]any
	if err := json.Unmarshal(get.body, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"call_id", "idem_key", "tool", "status", "attempt", "result", "error", "effect_id", "created_at", "updated_at", "query_url"} {
		if _, ok := m[k]; !ok {
			t.Errorf("call JSON lacks %q: %s", k, get.body)
		}
	}
	if m["error"] != nil || m["result"] == nil {
		t.Errorf("succeeded call: result %v error %v", m["result"], m["error"])
	}
}

func TestPreferWaitOnPost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post("k-wait-post", `{"tool":"sleep","args":{"seconds":0.3}}`, "Prefer", "wait=10")
	if r.status != http.StatusOK {
		t.Fatalf("got %d, want 200 in one round trip: %s", r.status, r.body)
	}
	if c := r.call(t); c.Status != "succeeded" || string(c.Result) != `{"slept":0.3}` {
		t.Fatalf("call %+v", c)
	}
	if got := r.header.Get("Preference-Applied"); got != "wait=10" {
		t.Fatalf("Preference-Applied %q", got)
	}
	if r.header.Get("Retry-After") != "" {
		t.Fatal("final call with Retry-After")
	}
	if n := b.srv.waiters.len(); n != 0 {
		t.Fatalf("%d waiter entries left behind", n)
	}
}

func TestPreferWaitOnGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.post("k-wait-get", `{"tool":"sleep","args":{"seconds":0.3}}`).call(t)
	r := b.get(wire.CallPath(c.CallID), "Prefer", "respond-async, wait=10")
	if r.status != http.StatusOK || r.call(t).Status != "succeeded" {
		t.Fatalf("GET with wait: %d %s", r.status, r.body)
	}
	if got := r.header.Get("Preference-Applied"); got != "wait=10" {
		t.Fatalf("Preference-Applied %q", got)
	}
	// by key too
	r = b.get("/v1/tool-calls/by-key/k-wait-get", "Prefer", "wait=1")
	if r.status != http.StatusOK || r.call(t).CallID != c.CallID {
		t.Fatalf("by-key with wait: %d %s", r.status, r.body)
	}
}

func TestPreferWaitExpiresNonFinal(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.ShutdownGrace = 50 * time.Millisecond })
	r := b.post("k-wait-short", `{"tool":"sleep","args":{"seconds":5}}`, "Prefer", "wait=1")
	if r.status != http.StatusAccepted {
		t.Fatalf("got %d, want 202 when the wait ends first: %s", r.status, r.body)
	}
	if c := r.call(t); c.Status.Final() {
		t.Fatalf("status %s", c.Status)
	}
	if r.header.Get("Preference-Applied") != "wait=1" || r.header.Get("Retry-After") == "" {
		t.Fatalf("headers %v", r.header)
	}
}

func TestPreferWaitClampedAndMalformed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.post("k-wait-clamp", `{"tool":"charge","args":{"amount":1}}`).call(t)
	b.waitFinal(c.CallID)
	if got := b.get(wire.CallPath(c.CallID), "Prefer", "wait=999").header.Get("Preference-Applied"); got != "wait=30" {
		t.Fatalf("wait=999: Preference-Applied %q, want wait=30", got)
	}
	for _, bad := range []string{"wait=abc", "wait=-1", "wait=1.5", "wait", "wait=", "handling=lenient"} {
		r := b.get(wire.CallPath(c.CallID), "Prefer", bad)
		if r.status != http.StatusOK || r.header.Get("Preference-Applied") != "" {
			t.Fatalf("Prefer %q: %d Preference-Applied %q", bad, r.status, r.header.Get("Preference-Applied"))
		}
	}
}

func TestPreferWaitParse(t *testing.T) {
	t.Parallel()
	max := 30 * time.Second
	cases := []struct {
		in   []string
		want time.Duration
		ok   bool
	}{
		{[]string{"wait=5"}, 5 * time.Second, true},
		{[]string{"WAIT=5"}, 5 * time.Second, true},
		{[]string{" wait = 5 "}, 5 * time.Second, true},
		{[]string{`wait="7"`}, 7 * time.Second, true},
		{[]string{"respond-async, wait=3"}, 3 * time.Second, true},
		{[]string{"respond-async", "wait=4"}, 4 * time.Second, true},
		{[]string{"wait=4;foo=bar"}, 4 * time.Second, true},
		{[]string{"wait=2, wait=9"}, 2 * time.Second, true}, // the first one counts
		{[]string{"wait=30"}, 30 * time.Second, true},
		{[]string{"wait=31"}, 30 * time.Second, true},
		{[]string{"wait=99999999999999999999999"}, 30 * time.Second, true},
		{[]string{"wait=0"}, 0, false},
		{[]string{"wait=-1"}, 0, false},
		{[]string{"wait=1.5"}, 0, false},
		{[]string{"wait=x"}, 0, false},
		{[]string{"wait"}, 0, false},
		{[]string{"waiting=5"}, 0, false},
		{nil, 0, false},
	}
	for _, tc := range cases {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Prefer", v)
		}
		got, ok := preferWait(h, max)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Prefer %q: got %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPreferWaitReleasedOnShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.ShutdownGrace = 100 * time.Millisecond })
	c := b.post("k-wait-shutdown", `{"tool":"sleep","args":{"seconds":10}}`).call(t)
	done := make(chan resp, 1)
	go func() { done <- b.get(wire.CallPath(c.CallID), "Prefer", "wait=30") }()
	eventually(t, "the GET is waiting", func() bool { return b.srv.waiters.len() == 1 })
	_ = b.srv.Shutdown(context.Background())
	select {
	case r := <-done:
		if r.status != http.StatusOK || r.call(t).Status.Final() {
			t.Fatalf("held GET after shutdown: %d %s", r.status, r.body)
		}
	case <-time.After(waitDeadline):
		t.Fatal("a held Prefer: wait request outlived the shutdown")
	}
}

func TestNotFoundAndMethodNotAllowedJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/v1/tool-calls/c_0000000000000000", 404, wire.CodeNotFound},
		{http.MethodGet, "/v1/tool-calls/by-key/never-seen", 404, wire.CodeNotFound},
		{http.MethodGet, "/v1/tool-calls/by-key/", 404, wire.CodeNotFound},
		{http.MethodGet, "/nope", 404, wire.CodeNotFound},
		{http.MethodGet, "/", 404, wire.CodeNotFound},
		{http.MethodDelete, "/v1/tool-calls", 405, wire.CodeMethodNotAllowed},
		{http.MethodPut, "/v1/tool-calls/c_0000000000000000", 405, wire.CodeMethodNotAllowed},
		{http.MethodPost, "/v1/tool-calls/by-key/k", 405, wire.CodeMethodNotAllowed},
		{http.MethodPost, "/healthz", 405, wire.CodeMethodNotAllowed},
		{http.MethodPost, "/metrics", 405, wire.CodeMethodNotAllowed},
	}
	for _, tc := range cases {
		r := b.do(tc.method, tc.path, nil, nil)
		if r.status != tc.status || r.header.Get("Content-Type") != "application/json" || r.errCode(t) != tc.code {
			t.Errorf("%s %s: %d %q %s, want %d %s", tc.method, tc.path, r.status, r.header.Get("Content-Type"), r.body, tc.status, tc.code)
		}
		if tc.status == 405 && r.header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
		}
	}
}

func TestGetByKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"plain", "with/slash", "with?query", "pct%41", "sp#hash"} {
		c := b.post(key, `{"tool":"charge","args":{"amount":2}}`).call(t)
		r := b.get("/v1/tool-calls/by-key/" + url.PathEscape(key))
		if r.status != http.StatusOK || r.call(t).CallID != c.CallID {
			t.Errorf("by-key %q: %d %s", key, r.status, r.body)
		}
	}
	// A literal slash works without escaping too ({key...}).
	if r := b.get("/v1/tool-calls/by-key/with/slash"); r.status != http.StatusOK {
		t.Errorf("unescaped slash: %d", r.status)
	}
}

func TestStatsHealthReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var s map[string]any
	if err := json.Unmarshal(b.get("/stats").body, &s); err != nil {
		t.Fatal(err)
	}
	by, _ := s["by_status"].(map[string]any)
	for _, k := range []string{"pending", "running", "succeeded", "failed"} {
		if _, ok := by[k]; !ok {
			t.Errorf("by_status lacks %q: %v", k, s)
		}
	}
	if s["calls"] != 0.0 || s["effects"] != 0.0 {
		t.Errorf("empty database stats %v", s)
	}
	c := b.post("k-stats", `{"tool":"charge","args":{"amount":2}}`).call(t)
	b.waitFinal(c.CallID)
	var sv wire.Stats
	if err := json.Unmarshal(b.get("/stats").body, &sv); err != nil {
		t.Fatal(err)
	}
	if sv.Calls != 1 || sv.Effects != 1 || sv.ByStatus[store.StatusSucceeded] != 1 {
		t.Errorf("stats %+v", sv)
	}
	if r := b.get("/healthz"); r.status != 200 || !strings.Contains(string(r.body), `"ok"`) {
		t.Errorf("healthz %d %s", r.status, r.body)
	}
	if r := b.get("/readyz"); r.status != 200 {
		t.Errorf("readyz %d %s", r.status, r.body)
	}
	_ = b.srv.Shutdown(context.Background())
	if r := b.get("/readyz"); r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeUnavailable {
		t.Errorf("readyz while stopping: %d %s", r.status, r.body)
	}
}

// panickingStats is base whose Stats panics: a bug in a handler's
// dependency.
func panickingStats(base store.Store) store.Store {
	return &storefake.Store{Base: base, StatsFunc: func(context.Context) (store.Stats, error) {
		panic("boom: a bug in a handler's dependency")
	}}
}

// unavailableStore is base with its database gone: creations and pings
// answer ErrUnavailable.
func unavailableStore(base store.Store) store.Store {
	return &storefake.Store{Base: base,
		CreateOrGetFunc: func(context.Context, store.NewCall) (store.Call, store.Outcome, error) {
			return store.Call{}, 0, store.ErrUnavailable
		},
		PingFunc: func(context.Context) error { return store.ErrUnavailable },
	}
}

func TestPanicInHandlerIs500JSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := setupStore(t, panickingStats(b.st), false).ts.URL
	r := doURL(t, base, http.MethodGet, "/stats", nil, nil)
	if r.status != http.StatusInternalServerError || r.errCode(t) != wire.CodeInternal {
		t.Fatalf("panicking handler: %d %s", r.status, r.body)
	}
	if r := doURL(t, base, http.MethodGet, "/healthz", nil, nil); r.status != http.StatusOK {
		t.Fatalf("server after a panic: %d", r.status)
	}
}

func TestStoreUnavailableIs503(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := setupStore(t, unavailableStore(b.st), false).ts.URL
	r := doURL(t, base, http.MethodPost, "/v1/tool-calls", []byte(charge100), map[string]string{"Idempotency-Key": "k-503"})
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("store unavailable: %d %v %s", r.status, r.header, r.body)
	}
	if r := doURL(t, base, http.MethodGet, "/readyz", nil, nil); r.status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the database down: %d", r.status)
	}
}
