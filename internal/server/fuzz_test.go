package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// FuzzCreate sends any body (and any Idempotency-Key, or a fresh one when
// the input's is empty) to the create handler of one server on a temporary
// SQLite database and checks: never a panic (the recoverer would answer
// 500) and never a 5xx; a 4xx stores nothing (the store's stats are
// unchanged); a 2xx for a key never seen stores exactly one call under that
// key, with the parser's fingerprint; and the handler agrees with
// parseCreate on whether the body is acceptable. The executor is not
// started: created calls stay pending, which keeps an iteration to one
// store transaction. Run it longer with
// go test -run='^$' -fuzz='^FuzzCreate$' -fuzztime=5m ./internal/server
func FuzzCreate(f *testing.F) {
	seeds := []struct{ key, body string }{
		{"", `{"tool":"charge","args":{"amount":1}}`},
		{"", `{"tool":"charge","args":{"amount":1},"client_id":"c","seq":7}`},
		{"", `{"tool":"send_email","args":{"to":"a@x","subject":"s"}}`},
		{"", `{"tool":"sleep","args":{"seconds":0}}`},
		{"", `{"tool":"fail","args":{"retryable":true,"times":1,"message":"m"}}`},
		{"", `{"tool":"charge","args":{"amount":1e0,"memo":null},"client_id":null,"seq":null}`},
		{"", "{\"tool\":\"send_email\",\"args\":{\"to\":\"a@x\",\"subject\":\"cafe\u0301\"}}"},
		{"fuzz-replay", `{"tool":"charge","args":{"amount":2}}`},
		{"fuzz-replay", `{"tool":"charge","args":{"amount":3}}`}, // 409 once the first is stored
		{"a b", `{"tool":"charge","args":{"amount":1}}`},
		{"a\x01b", `{"tool":"charge","args":{"amount":1}}`},
		{"caf\xe9", `{"tool":"charge","args":{"amount":1}}`},
		{strings.Repeat("k", 256), `{"tool":"charge","args":{"amount":1}}`},
		{"", `{"tool":`},
		{"", `charge 100`},
		{"", ``},
		{"", "{\"tool\":\"charge\",\"args\":{\"amount\":1},\"client_id\":\"\xff\"}"},
		{"", `{"tool":"charge","args":{"amount":1}} {}`},
		{"", `[{"tool":"charge","args":{"amount":1}}]`},
		{"", `{"tool":"charge","args":{"amount":1},"amount":1}`},
		{"", `{"tool":"charge","tool":"charge","args":{"amount":1}}`},
		{"", `{"tool":"send_email","args":{"to":"a@x","subject":"s","subjec\u0074":"t"}}`},
		{"", "{\"tool\":\"send_email\",\"args\":{\"to\":\"a@x\",\"caf\u00e9\":1,\"cafe\u0301\":2}}"},
		{"", `{"tool":"charge","args":[1]}`},
		{"", `{"tool":null,"args":{"amount":1}}`},
		{"", `{"tool":"refund","args":{"amount":1}}`},
		{"", `{"tool":"charge","args":{"amount":1},"client_id":5}`},
		{"", `{"tool":"charge","args":{"amount":1},"client_id":"` + strings.Repeat("x", MaxClientIDLength+1) + `"}`},
		{"", `{"tool":"charge","args":{"amount":1},"seq":1.5}`},
		{"", `{"tool":"charge","args":{"amount":1},"seq":99999999999999999999}`},
		{"", `{"tool":"charge","args":{"amount":0}}`},
		{"", `{"tool":"charge","args":{"amount":9007199254740993}}`},
		{"", `{"tool":"charge","args":{"amount":1e400}}`},
		{"", `{"tool":"sleep","args":{"seconds":11}}`},
		{"", `{"tool":"fail","args":{"times":-1}}`},
		{"", `{"tool":"charge","args":{"amount":1,"_crash_after_commit":true}}`},
		{"", `{"tool":"charge","args":{"amount":1},"client_id":"a\u0000b"}`},
		{"", `{"tool":"send_email","args":{"to":"a@x","\u0000":1}}`},
		{"", `{"tool":"send_email","args":{"to":"\ud800"}}`},
		{"", `{"tool":"charge","args":{"amount":1,"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`},
	}
	for _, s := range seeds {
		f.Add(s.key, []byte(s.body))
	}

	st, err := sqlite.Open(context.Background(), filepath.Join(f.TempDir(), "fuzz.db"), store.Options{})
	if err != nil {
		f.Fatalf("sqlite.Open: %v", err)
	}
	f.Cleanup(func() { _ = st.Close() })
	srv, err := New(Config{
		Addr:       "127.0.0.1:0",
		MaxPending: NoPendingLimit, // the executor never drains this queue
		Logger:     slog.New(slog.DiscardHandler),
		// httptest.NewRequest's Host; the Host check is not what is fuzzed.
		AllowedHosts: []string{"example.com"},
	}, st)
	if err != nil {
		f.Fatalf("New: %v", err)
	}
	h := srv.Handler()
	reg := toolreg.Builtins()
	var n atomic.Int64
	run := freshKeyPrefix()

	f.Fuzz(func(t *testing.T, key string, body []byte) {
		ctx := context.Background()
		if key == "" {
			key = run + strconv.FormatInt(n.Add(1), 10)
		}
		_, lookupErr := st.GetByKey(ctx, "", key)
		newKey := errors.Is(lookupErr, store.ErrNotFound)
		before, err := st.Stats(ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}

		req := httptest.NewRequest(http.MethodPost, "/v1/tool-calls", strings.NewReader(string(body)))
		req.Header[wire.HeaderIdempotencyKey] = []string{key} // as sent, not canonicalized or checked
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		status := rec.Code

		after, err := st.Stats(ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		parsed, perr := parseCreate(body, false, reg, "")
		keyOK := checkKey(key) == nil
		switch {
		case status >= 500:
			t.Fatalf("%d for key %q body %q: %s", status, key, body, rec.Body)
		case status >= 400:
			if after.Calls != before.Calls || after.Effects != before.Effects {
				t.Fatalf("%d stored something: calls %d→%d, effects %d→%d (key %q body %q)",
					status, before.Calls, after.Calls, before.Effects, after.Effects, key, body)
			}
			var eb wire.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" {
				t.Fatalf("%d without an error code: %q", status, rec.Body)
			}
			if keyOK && perr == nil && status != http.StatusConflict {
				t.Fatalf("parseCreate accepts %q but the handler answered %d: %s", body, status, rec.Body)
			}
		default:
			if !keyOK || perr != nil {
				t.Fatalf("%d for a request parseCreate or checkKey refuses (key %q body %q): %v", status, key, body, perr)
			}
			want := before.Calls
			if newKey {
				want++
			}
			if after.Calls != want {
				t.Fatalf("%d with new key %v: calls %d→%d, want %d", status, newKey, before.Calls, after.Calls, want)
			}
			call, err := st.GetByKey(ctx, "", key)
			if err != nil {
				t.Fatalf("%d but the key %q is not stored: %v", status, key, err)
			}
			if call.Fingerprint != parsed.Fingerprint {
				t.Fatalf("stored fingerprint %s, parser's %s", call.Fingerprint, parsed.Fingerprint)
			}
		}
	})
}

// freshKeyPrefix is unique per fuzz process, so generated keys never meet a
// key an earlier run stored (each run has its own database anyway).
func freshKeyPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "fz-" + hex.EncodeToString(b) + "-"
}
