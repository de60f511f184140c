package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/wire"
)

// varyPreferCount counts "Prefer" among the Vary header's tokens.
func varyPreferCount(h http.Header) int {
	n := 0
	for _, line := range h.Values("Vary") {
		for _, tok := range strings.Split(line, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "Prefer") {
				n++
			}
		}
	}
	return n
}

// TestVaryPreferOnEveryResponse: the routes that honour "Prefer: wait"
// carry Vary: Prefer (once) on every response — with or without Prefer,
// 2xx or error — so no cache hands a waited answer to an unwaited request
// or the reverse. Routes that ignore Prefer do not claim to vary on it.
func TestVaryPreferOnEveryResponse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const body = `{"tool":"sleep","args":{"seconds":0}}`
	created := b.post("k-vary", body)
	if created.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", created.status, created.body)
	}
	id := created.call(t).CallID
	wait := []string{"Prefer", "wait=1"}

	honour := map[string]resp{
		"POST new key":              created,
		"POST replay with wait":     b.post("k-vary", body, wait...),
		"POST missing key":          b.do(http.MethodPost, "/v1/tool-calls", []byte(body), nil),
		"POST bad body":             b.post("k-vary-bad", `{"tool":`),
		"POST conflict":             b.post("k-vary", `{"tool":"sleep","args":{"seconds":1}}`),
		"GET call":                  b.get(wire.CallPath(id)),
		"GET call with wait":        b.get(wire.CallPath(id), wait...),
		"GET unknown call":          b.get(wire.CallPath("c_0000000000000000"), wait...),
		"GET by key":                b.get("/v1/tool-calls/by-key/k-vary"),
		"GET by key with wait":      b.get("/v1/tool-calls/by-key/k-vary", wait...),
		"GET by unknown key":        b.get("/v1/tool-calls/by-key/k-none"),
		"GET by unrecordable key":   b.get("/v1/tool-calls/by-key/a%20b"),
		"POST wait on a final call": b.post("k-vary", body, wait...),
	}
	for name, r := range honour {
		if n := varyPreferCount(r.header); n != 1 {
			t.Errorf("%s (%d): Vary %q has Prefer %d times, want once", name, r.status, r.header.Values("Vary"), n)
		}
	}
	for _, path := range []string{"/stats", "/healthz"} {
		if r := b.get(path, wait...); varyPreferCount(r.header) != 0 {
			t.Errorf("%s ignores Prefer but has Vary %q", path, r.header.Values("Vary"))
		}
	}
}
