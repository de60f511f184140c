package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// urlEnv names the variable holding the test server's URL. CI sets it; a
// machine without PostgreSQL leaves it unset and these tests skip.
const urlEnv = "IDEMCTL_TEST_POSTGRES_URL"

// baseURL returns the test server's URL or skips the test.
func baseURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		t.Skip(urlEnv + " not set: skipping PostgreSQL tests")
	}
	return lowerScheme(u)
}

// freshURL creates a schema of its own for this test in the database of
// the test URL and returns a URL whose search_path is that schema, so every
// table the store creates lands there. A schema is much cheaper than a
// database per test (no template copy) and needs no CREATEDB privilege; the
// store's tables are unqualified, so it cannot tell the difference. The
// schema is dropped when the test ends (after the test's stores closed:
// cleanups run last-registered first).
func freshURL(t *testing.T) string {
	t.Helper()
	base := baseURL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "idemctl_test_" + hex.EncodeToString(b[:])
	admin(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { admin(t, base, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	return withParam(t, base, "search_path", schema)
}

// withParam sets a parameter of a URL or key=value DSN; pgx sends the ones
// it does not know itself to the server as run-time settings.
func withParam(t *testing.T, dsn, key, value string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " " + key + "='" + value + "'"
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", urlEnv, err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// admin runs one statement on its own connection.
func admin(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	// Not t.Context(): this also runs in cleanups, after it is canceled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", urlEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// open opens a Store on dsn and closes it when the test ends.
func open(t *testing.T, dsn string, opts store.Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// scalar runs a one-value query on a store's own pool, for assertions on
// what is really stored and on the database's clock.
func scalar[T any](t *testing.T, s *Store, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := s.pool.QueryRow(t.Context(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// newCall is a NewCall for key with a fresh call id.
func newCall(t *testing.T, key string) store.NewCall {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return store.NewCall{
		CallID:      "c_" + hex.EncodeToString(b[:]),
		IdemKey:     key,
		Fingerprint: "fp-" + key,
		Tool:        "charge",
		ArgsJSON:    []byte(`{"amount":100}`),
	}
}

// create records a new call for key and fails unless it was created.
func create(t *testing.T, s store.Store, key string) store.Call {
	t.Helper()
	c, out, err := s.CreateOrGet(t.Context(), newCall(t, key))
	if err != nil || out != store.Created {
		t.Fatalf("CreateOrGet(%q) = %v, %v; want created", key, out, err)
	}
	return c
}

// success is the completion of a claimed call with a charge effect.
func success(c store.Call) store.Completion {
	amount := int64(100)
	eff := "eff_" + c.CallID[2:]
	return store.Completion{
		CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt,
		Result: []byte(`{"charged":100}`),
		Effect: &store.Effect{EffectID: eff, CallID: c.CallID, Tool: c.Tool, Amount: &amount},
	}
}
