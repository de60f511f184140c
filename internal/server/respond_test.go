package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestJSONNotHTMLEscaped: "<", ">" and "&" come out as themselves in every
// JSON body — error messages, and stored error objects served back — not as
// \u003c, \u003e, \u0026.
func TestJSONNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	escaped := []string{`\u003c`, `\u003e`, `\u0026`}
	noEscapes := func(what string, body []byte) {
		t.Helper()
		for _, e := range escaped {
			if strings.Contains(string(body), e) {
				t.Errorf("%s: body has %s: %s", what, e, body)
			}
		}
	}

	// An error message that quotes the client's input.
	r := b.post("k-html-1", `{"tool":"<b>&amp;</b>"}`)
	if r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
		t.Fatalf("unknown tool: %d %s", r.status, r.body)
	}
	noEscapes("400", r.body)
	if !strings.Contains(string(r.body), `unknown tool \"<b>&amp;</b>\"`) {
		t.Errorf("400 message does not quote the tool as sent: %s", r.body)
	}

	// A tool's error object, stored by the executor and served as stored.
	const msg = "balance < amount && limit > 0"
	r = b.post("k-html-2", `{"tool":"fail","args":{"retryable":false,"message":"`+msg+`"}}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	c := b.waitFinal(r.call(t).CallID)
	r = b.get(wire.CallPath(c.CallID))
	noEscapes("GET failed call", r.body)
	if !strings.Contains(string(r.body), msg) {
		t.Errorf("error message not served as sent: %s", r.body)
	}
}

// TestWriteJSONFraming: one body, newline-terminated, Content-Length exact,
// and the same bytes a client decodes back.
func TestWriteJSONFraming(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	log := slog.New(slog.DiscardHandler)
	writeError(rec, log, http.StatusBadRequest, wire.CodeBadRequest, "amount must be >= 1 & <= 10")
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	want := `{"error":{"code":"bad_request","message":"amount must be >= 1 & <= 10"}}` + "\n"
	if string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if res.Header.Get("Content-Length") != strconv.Itoa(len(want)) {
		t.Errorf("Content-Length %s, want %d", res.Header.Get("Content-Length"), len(want))
	}

	// A value that cannot be encoded is a clean 500.
	rec = httptest.NewRecorder()
	writeJSON(rec, log, http.StatusOK, map[string]any{"x": make(chan int)})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"code":"internal"`) ||
		rec.Header().Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
		t.Errorf("unencodable: %d %q (Content-Length %s)", rec.Code, rec.Body.String(), rec.Header().Get("Content-Length"))
	}
}

// TestCallBodyMembers pins the call object as the API sends it: its
// members, in this order, with principal, cancel_requested and not_before
// left out when they do not apply (docs/api.md, "The call object").
func TestCallBodyMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.post("order-k1", `{"tool":"charge","args":{"amount":5},"client_id":"checkout","seq":3}`).call(t)
	b.waitFinal(created.CallID)
	r := b.get(wire.CallPath(created.CallID))
	dec := json.NewDecoder(bytes.NewReader(r.body))
	var got []string
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("body %s: not an object", r.body)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"call_id", "idem_key", "tool", "args", "status", "attempt", "result", "error", "effect_id",
		"client_id", "seq", "fingerprint", "created_at", "updated_at", "query_url", "via"}
	if !slices.Equal(got, want) {
		t.Fatalf("call members\n got %q\nwant %q\nbody %s", got, want, r.body)
	}
}

// TestWriteBodyHeaders: every JSON response carries its content type,
// no-store and nosniff, each once and under the key Header.Get reads; the
// values writeBody shares between responses are not changed by what the
// handler of one response adds to its own headers.
func TestWriteBodyHeaders(t *testing.T) {
	t.Parallel()
	want := map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store",
		"X-Content-Type-Options": "nosniff", "Content-Length": "3"}
	first, second := httptest.NewRecorder(), httptest.NewRecorder()
	writeBody(first, http.StatusOK, []byte("{}\n"))
	writeBody(second, http.StatusOK, []byte("{}\n"))
	for name, value := range want {
		if got := second.Header().Values(name); !slices.Equal(got, []string{value}) {
			t.Errorf("%s: %q, want %q", name, got, value)
		}
	}
	first.Header().Add("Cache-Control", "private")
	second.Header().Add("Cache-Control", "public")
	if got := first.Header().Values("Cache-Control"); !slices.Equal(got, []string{"no-store", "private"}) {
		t.Errorf("first response's Cache-Control %q: another response's Add changed it", got)
	}
	if got := second.Header().Values("Cache-Control"); !slices.Equal(got, []string{"no-store", "public"}) {
		t.Errorf("second response's Cache-Control %q", got)
	}
}
