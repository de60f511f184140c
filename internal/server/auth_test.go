package server

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
	"github.com/idemctl/idemctl/internal/wire"
)

const (
	aliceToken = "alice-token-0123456789abcdef0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef0123456789abcdef01"
)

// writeTokens writes a token file with one line per principal:token pair.
func writeTokens(t *testing.T, path string, pairs ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# test tokens\n\n")
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString(pairs[i] + ":" + HashToken(pairs[i+1]) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// setupAuth starts a server whose token file holds alice and bob.
func setupAuth(t *testing.T, opts ...func(*Config)) (*bundle, *Auth) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "alice", aliceToken, "bob", bobToken)
	a, err := LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	return setup(t, append([]func(*Config){func(c *Config) { c.Auth = a }}, opts...)...), a
}

func bearer(token string) string { return "Bearer " + token }

func TestAuthTable(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t)
	const body = `{"tool":"charge","args":{"amount":1}}`
	cases := []struct {
		name      string
		header    string // Authorization; "" = none
		want      int
		challenge string // expected WWW-Authenticate, "" = none
	}{
		{"no header", "", http.StatusUnauthorized, `Bearer realm="idemctl"`},
		{"wrong scheme", "Basic " + aliceToken, http.StatusUnauthorized, `Bearer realm="idemctl"`},
		{"bearer without token", "Bearer ", http.StatusUnauthorized, `Bearer realm="idemctl"`},
		{"unknown token", bearer("not-a-token"), http.StatusUnauthorized, `Bearer realm="idemctl", error="invalid_token"`},
		{"the hash instead of the token", bearer(HashToken(aliceToken)), http.StatusUnauthorized, `Bearer realm="idemctl", error="invalid_token"`},
		{"good token", bearer(aliceToken), http.StatusAccepted, ""},
		{"good token, lower-case scheme", "bearer " + bobToken, http.StatusAccepted, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := []string{}
			if c.header != "" {
				h = append(h, "Authorization", c.header)
			}
			key := "auth-" + string(rune('a'+i))
			r := b.post(key, body, h...)
			if r.status != c.want && !(c.want == http.StatusAccepted && r.status == http.StatusOK) {
				t.Fatalf("POST: %d %s, want %d", r.status, r.body, c.want)
			}
			if got := r.header.Get("WWW-Authenticate"); got != c.challenge {
				t.Fatalf("WWW-Authenticate = %q, want %q", got, c.challenge)
			}
			_, err := b.st.GetByKey(t.Context(), "alice", key)
			_, errBob := b.st.GetByKey(t.Context(), "bob", key)
			_, errAnon := b.st.GetByKey(t.Context(), store.DefaultPrincipal, key)
			stored := err == nil || errBob == nil || errAnon == nil
			if c.want == http.StatusUnauthorized {
				if code := r.errCode(t); code != wire.CodeUnauthenticated {
					t.Fatalf("code = %q, want %s", code, wire.CodeUnauthenticated)
				}
				if stored {
					t.Fatal("a refused request stored a call")
				}
				if strings.Contains(string(r.body), aliceToken) || strings.Contains(string(r.body), "not-a-token") {
					t.Fatalf("the token is echoed in the error: %s", r.body)
				}
			} else if !stored {
				t.Fatal("an accepted request stored nothing")
			}
		})
	}

	// Every path but the probes needs the token.
	for _, p := range []string{"/stats", "/metrics", "/v1", "/v1/tool-calls/by-key/x", "/v1/tool-calls/c_0000000000000000", "/nope"} {
		if r := b.get(p); r.status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", p, r.status)
		}
		if r := b.get(p, "Authorization", bearer(aliceToken)); r.status == http.StatusUnauthorized {
			t.Errorf("GET %s with a good token: 401", p)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := b.get(p); r.status != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s, want 200 (probes stay open)", p, r.status, r.body)
		}
	}
}

func TestAuthReloadKeepsLastGoodFile(t *testing.T) {
	t.Parallel()
	b, a := setupAuth(t)
	writeTokens(t, a.Path(), "carol", "carol-token-0123456789abcdef0123456789ab")
	// Not reloaded yet: the old set holds.
	if r := b.get("/stats", "Authorization", bearer("carol-token-0123456789abcdef0123456789ab")); r.status != http.StatusUnauthorized {
		t.Fatalf("carol before reload: %d, want 401", r.status)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := b.get("/stats", "Authorization", bearer("carol-token-0123456789abcdef0123456789ab")); r.status != http.StatusOK {
		t.Fatalf("carol after reload: %d %s, want 200", r.status, r.body)
	}
	if r := b.get("/stats", "Authorization", bearer(aliceToken)); r.status != http.StatusUnauthorized {
		t.Fatalf("alice, removed from the file, after reload: %d, want 401", r.status)
	}
	// A broken file is refused and the last good set stays.
	if err := os.WriteFile(a.Path(), []byte("carol:nothex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("Reload of a broken file succeeded")
	}
	if r := b.get("/stats", "Authorization", bearer("carol-token-0123456789abcdef0123456789ab")); r.status != http.StatusOK {
		t.Fatalf("carol after a failed reload: %d, want 200 (last good file kept)", r.status)
	}
}

func TestTokenFileErrors(t *testing.T) {
	t.Parallel()
	h := HashToken("x")
	for name, content := range map[string]string{
		"empty":             "# nothing\n",
		"no separator":      "alice\n",
		"short hash":        "alice:abcd\n",
		"not hex":           "alice:" + strings.Repeat("z", 64) + "\n",
		"empty principal":   ":" + h + "\n",
		"space in name":     "al ice:" + h + "\n",
		"same hash twice":   "alice:" + h + "\nbob:" + h + "\n",
		"a token, not hash": "alice:" + aliceToken + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadAuth(path)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), aliceToken) {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
}

// TestTokenCompareConstantTime: a token's hash is compared with
// crypto/subtle, against every entry, whichever one matches.
func TestTokenCompareConstantTime(t *testing.T) {
	if reflect.ValueOf(compareHashes).Pointer() != reflect.ValueOf(subtle.ConstantTimeCompare).Pointer() {
		t.Fatal("compareHashes is not subtle.ConstantTimeCompare")
	}
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "alice", aliceToken, "bob", bobToken, "carol", "c-token")
	a, err := LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	compareHashes = func(x, y []byte) int { calls++; return subtle.ConstantTimeCompare(x, y) }
	t.Cleanup(func() { compareHashes = subtle.ConstantTimeCompare })
	for _, tok := range []string{aliceToken, "c-token", "unknown"} {
		calls = 0
		p, ok := a.principal(tok)
		if calls != 3 {
			t.Fatalf("token %q: %d comparisons, want one per entry (3)", tok, calls)
		}
		if tok == "unknown" && ok {
			t.Fatal("unknown token accepted")
		}
		if tok == aliceToken && p != "alice" || tok == "c-token" && p != "carol" {
			t.Fatalf("token %q → %q", tok, p)
		}
	}
}

// TestPrincipalsScopeKeys: the same key from two principals is two calls,
// and neither can read the other's, by id or by key.
func TestPrincipalsScopeKeys(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t)
	ra := b.post("same", `{"tool":"charge","args":{"amount":1}}`, "Authorization", bearer(aliceToken))
	rb := b.post("same", `{"tool":"charge","args":{"amount":2}}`, "Authorization", bearer(bobToken))
	if ra.status >= 300 || rb.status >= 300 {
		t.Fatalf("alice %d %s, bob %d %s; want both accepted", ra.status, ra.body, rb.status, rb.body)
	}
	ca, cb := ra.call(t), rb.call(t)
	if ca.CallID == cb.CallID || rb.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("bob got alice's call %s", cb.CallID)
	}
	if ca.Principal != "alice" || cb.Principal != "bob" {
		t.Fatalf("principals %q, %q", ca.Principal, cb.Principal)
	}
	if r := b.get(wire.CallPath(cb.CallID), "Authorization", bearer(aliceToken)); r.status != http.StatusNotFound || r.errCode(t) != wire.CodeNotFound {
		t.Fatalf("alice reads bob's call by id: %d %s, want 404", r.status, r.body)
	}
	if r := b.get(wire.CallPath(ca.CallID), "Authorization", bearer(aliceToken)); r.status != http.StatusOK {
		t.Fatalf("alice reads her call: %d", r.status)
	}
	r := b.get("/v1/tool-calls/by-key/same", "Authorization", bearer(bobToken))
	if r.status != http.StatusOK || r.call(t).CallID != cb.CallID {
		t.Fatalf("bob by key: %d %s, want his call %s", r.status, r.body, cb.CallID)
	}
	r = b.get("/v1/tool-calls/by-key/same", "Authorization", bearer(aliceToken))
	if r.status != http.StatusOK || r.call(t).CallID != ca.CallID {
		t.Fatalf("alice by key: %d %s, want her call %s", r.status, r.body, ca.CallID)
	}
}

func TestNonLoopbackNeedsAuth(t *testing.T) {
	t.Parallel()
	b, a := setupAuth(t)
	for _, addr := range []string{"0.0.0.0:8081", ":8081", "10.1.2.3:80"} {
		if _, err := New(Config{Addr: addr}, b.st); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("no auth on %q: err = %v, want a refusal", addr, err)
		}
		if _, err := New(Config{Addr: addr, InsecureNoAuth: true}, b.st); err != nil {
			t.Errorf("insecure-no-auth on %q refused: %v", addr, err)
		}
		if _, err := New(Config{Addr: addr, Auth: a}, b.st); err != nil {
			t.Errorf("auth on %q refused: %v", addr, err)
		}
	}
	if _, err := New(Config{Addr: "127.0.0.1:8081"}, b.st); err != nil {
		t.Errorf("no auth on loopback refused: %v", err)
	}
}

// TestConflictNamesCall: the 409 body carries the id of the call that
// holds the key.
func TestConflictNamesCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post("k-conflict", `{"tool":"charge","args":{"amount":1}}`).call(t)
	r := b.post("k-conflict", `{"tool":"charge","args":{"amount":2}}`)
	if r.status != http.StatusConflict {
		t.Fatalf("%d %s, want 409", r.status, r.body)
	}
	var e wire.Error
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Code != wire.CodeIdempotencyConflict || e.Error.CallID != first.CallID {
		t.Fatalf("409 body %s; want code %s and call_id %s", r.body, wire.CodeIdempotencyConflict, first.CallID)
	}
}

func TestServiceInfo(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t, func(c *Config) { c.Retention = 2 * time.Hour; c.Version = "v9.9.9"; c.MaxPending = 123 })
	r := b.get("/v1", "Authorization", bearer(aliceToken))
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var v ServiceView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != "v9.9.9" || !v.Auth || v.RetentionSeconds != 7200 || v.Limits.MaxBodyBytes != MaxBodyBytes ||
		v.Limits.MaxKeyLength != MaxKeyLength || v.Limits.MaxWaitSeconds != int64(DefaultMaxWait/time.Second) ||
		v.Limits.MaxPending != 123 {
		t.Fatalf("GET /v1 = %s", r.body)
	}
	open := setup(t).get("/v1")
	if err := json.Unmarshal(open.body, &v); err != nil || v.Auth || v.RetentionSeconds != 0 {
		t.Fatalf("GET /v1 without auth or retention = %s", open.body)
	}
}

// TestRetentionPurge: the server's purge deletes final calls past the
// retention, not recent ones; the purged key is new again and its effect
// stays.
func TestRetentionPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Retention = time.Hour })
	old := b.waitFinal(b.post("k-old", `{"tool":"charge","args":{"amount":5}}`).call(t).CallID)
	recent := b.waitFinal(b.post("k-recent", `{"tool":"charge","args":{"amount":5}}`).call(t).CallID)
	db, err := sql.Open("sqlite", b.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `PRAGMA busy_timeout = 5000; UPDATE calls SET updated_at = updated_at - 7200 WHERE call_id = ?`, old.CallID); err != nil {
		t.Fatal(err)
	}
	if n := b.srv.purgeOnce(context.Background()); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	if r := b.get(wire.CallPath(old.CallID)); r.status != http.StatusNotFound {
		t.Fatalf("purged call: %d, want 404", r.status)
	}
	if r := b.get(wire.CallPath(recent.CallID)); r.status != http.StatusOK {
		t.Fatalf("recent call: %d, want 200", r.status)
	}
	if st := b.stats(); st.Effects != 2 {
		t.Fatalf("effects = %d, want 2 (kept after the purge)", st.Effects)
	}
	again := b.post("k-old", `{"tool":"charge","args":{"amount":5}}`)
	if again.status >= 300 || again.call(t).CallID == old.CallID || again.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("purged key: %d %s; want a new call", again.status, again.body)
	}
	if got := purgeInterval(time.Hour); got != time.Minute {
		t.Fatalf("purgeInterval(1h) = %s, want 1m", got)
	}
	if got := purgeInterval(2 * time.Minute); got != 30*time.Second {
		t.Fatalf("purgeInterval(2m) = %s, want 30s", got)
	}
}

// countingPurge records the size of every purge batch of the store over
// returns.
type countingPurge struct {
	batches []int
	longest time.Duration
}

func (c *countingPurge) over(base store.Store) store.Store {
	return &storefake.Store{Base: base, PurgeFunc: func(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error) {
		start := time.Now()
		n, err := base.Purge(ctx, olderThan, limit, tombstones)
		c.longest = max(c.longest, time.Since(start))
		c.batches = append(c.batches, n)
		return n, err
	}}
}

// TestPurgeInSmallBatches: the purge never deletes more than PurgeBatch
// calls in one transaction, so a writer waits for one small batch at
// most; it goes on until nothing old is left.
func TestPurgeInSmallBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := sql.Open("sqlite", b.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 2*PurgeBatch + 100
	if _, err := db.ExecContext(t.Context(), `PRAGMA busy_timeout = 5000;
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
INSERT INTO calls (call_id, principal, idem_key, fingerprint, tool, args_json, status, created_at, updated_at)
SELECT printf('c_%016x', i), '', 'bulk-' || i, 'f', 'charge', '{}', 'succeeded', 1, 1 FROM seq`, n); err != nil {
		t.Fatal(err)
	}
	cp := &countingPurge{}
	srv, err := New(Config{Retention: time.Hour}, cp.over(b.st))
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.purgeOnce(t.Context()); got != n {
		t.Fatalf("purged %d, want %d", got, n)
	}
	if want := []int{PurgeBatch, PurgeBatch, 100}; fmt.Sprint(cp.batches) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", cp.batches, want)
	}
	t.Logf("longest purge batch of %d calls: %s", PurgeBatch, cp.longest)
}
