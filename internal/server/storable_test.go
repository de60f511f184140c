package server

// Requests whose bytes one backend cannot store or compare must get the same
// clean 4xx on every backend, never a 500 and never a call stuck short of a
// final state. PostgreSQL refuses NUL and invalid UTF-8 in text parameters
// and cannot index an arbitrarily long client_id; SQLite takes all three, so
// these tests run on SQLite always and on PostgreSQL when
// IDEMCTL_TEST_POSTGRES_URL is set (a schema of its own, dropped after).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// backendServer is a server with its executor, on one backend.
type backendServer struct {
	base string
	st   store.Store
}

// forEachBackend runs fn on a fresh SQLite database and, when the
// PostgreSQL URL is set, on a fresh PostgreSQL schema.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backendServer)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		fn(t, backendServer{base: setupStore(t, st, true).ts.URL, st: st})
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := postgres.Open(context.Background(), pgtest.Schema(t), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		fn(t, backendServer{base: setupStore(t, st, true).ts.URL, st: st})
	})
}

// TestUnrecordableLookupsAre404 asks for call ids and keys no call can have
// (NUL, invalid UTF-8, non-ASCII, too long, wrong shape): each is 404
// not_found on every backend, while real ids and keys are still found.
func TestUnrecordableLookupsAre404(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backendServer) {
		const key = "qa/lookup-1" // a '/' in a key is fine; it is escaped in the path
		r := doURL(t, b.base, http.MethodPost, "/v1/tool-calls", []byte(`{"tool":"sleep","args":{"seconds":0}}`),
			map[string]string{"Idempotency-Key": key})
		if r.status != http.StatusAccepted {
			t.Fatalf("POST: %d %s", r.status, r.body)
		}
		c := r.call(t)

		for _, path := range []string{
			"/v1/tool-calls/%00",
			"/v1/tool-calls/c_%FF",
			"/v1/tool-calls/c_01234567%0089abcde",
			"/v1/tool-calls/" + strings.ToUpper(c.CallID[2:]),
			"/v1/tool-calls/C_" + c.CallID[2:],
			"/v1/tool-calls/" + c.CallID + "0",
			"/v1/tool-calls/by-key/%00",
			"/v1/tool-calls/by-key/a%00b",
			"/v1/tool-calls/by-key/%FF",
			"/v1/tool-calls/by-key/caf%C3%A9",
			"/v1/tool-calls/by-key/a%20b",
			"/v1/tool-calls/by-key/" + strings.Repeat("k", MaxKeyLength+1),
			"/v1/tool-calls/by-key/",
		} {
			r := doURL(t, b.base, http.MethodGet, path, nil, nil)
			if r.status != http.StatusNotFound || r.errCode(t) != wire.CodeNotFound {
				t.Errorf("GET %s: want 404 not_found, got %d %s", path, r.status, r.body)
			}
		}

		for _, path := range []string{wire.CallPath(c.CallID), "/v1/tool-calls/by-key/qa%2Flookup-1"} {
			r := doURL(t, b.base, http.MethodGet, path, nil, nil)
			if r.status != http.StatusOK || r.call(t).CallID != c.CallID {
				t.Errorf("GET %s: want 200 with %s, got %d %s", path, c.CallID, r.status, r.body)
			}
		}
	})
}

// TestUnstorableBodiesRefused sends bodies with U+0000 in a string and an
// over-long client_id: 400 bad_request on every backend, nothing stored.
// On PostgreSQL the NUL in client_id was a 500, and the NUL in a fail
// message broke every completion's audit row, so the call never became
// final (docs/lifecycle.md, "Invariants").
func TestUnstorableBodiesRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backendServer) {
		noise := make([]byte, 50_000) // incompressible: PostgreSQL cannot index it
		if _, err := rand.Read(noise); err != nil {
			t.Fatal(err)
		}
		cases := map[string]string{
			"NUL in client_id":           `{"tool":"sleep","args":{"seconds":0},"client_id":"a\u0000b"}`,
			"NUL in fail message":        `{"tool":"fail","args":{"message":"card\u0000declined"}}`,
			"NUL in send_email to":       `{"tool":"send_email","args":{"to":"a\u0000@x"}}`,
			"NUL in an args member name": `{"tool":"send_email","args":{"to":"a@x","sub\u0000ject":"s"}}`,
			"NUL in a nested array":      `{"tool":"send_email","args":{"to":"a@x","subject":["\u0000"]}}`,
			"client_id over 255 bytes":   `{"tool":"sleep","args":{"seconds":0},"client_id":"` + strings.Repeat("x", MaxClientIDLength+1) + `"}`,
			"client_id of 100000 bytes":  `{"tool":"sleep","args":{"seconds":0},"client_id":"` + hex.EncodeToString(noise) + `"}`,
		}
		before, err := b.st.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for name, body := range cases {
			r := doURL(t, b.base, http.MethodPost, "/v1/tool-calls", []byte(body),
				map[string]string{"Idempotency-Key": "qa-unstorable-" + strings.ReplaceAll(name, " ", "-")})
			if r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
				t.Errorf("%s: want 400 bad_request, got %d %.200s", name, r.status, r.body)
			}
		}
		after, err := b.st.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if after.Calls != before.Calls || after.Effects != before.Effects {
			t.Errorf("refused requests stored something: before %+v, after %+v", before, after)
		}

		// The limits are not off by one, and "\\u0000" spelled out (an
		// escaped backslash) is an ordinary string.
		for i, body := range []string{
			`{"tool":"sleep","args":{"seconds":0},"client_id":"` + strings.Repeat("x", MaxClientIDLength) + `"}`,
			`{"tool":"send_email","args":{"to":"a@x","subject":"\\u0000"}}`,
		} {
			r := doURL(t, b.base, http.MethodPost, "/v1/tool-calls", []byte(body),
				map[string]string{"Idempotency-Key": "qa-storable-" + string(rune('a'+i))})
			if r.status != http.StatusAccepted {
				t.Errorf("%.60s: want 202, got %d %.200s", body, r.status, r.body)
				continue
			}
			if c := waitFinalURL(t, b.base, r.call(t).CallID); c.Status != store.StatusSucceeded {
				t.Errorf("%.60s: want succeeded, got %s", body, c.Status)
			}
		}
	})
}
