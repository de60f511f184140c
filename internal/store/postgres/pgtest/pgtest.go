// Package pgtest gives each PostgreSQL test a schema of its own in the
// test database named by IDEMCTL_TEST_POSTGRES_URL: the one setup shared by
// the store, backend and server tests.
//
// A schema is much cheaper than a database per test (no template copy) and
// needs no CREATEDB privilege; the store's tables are unqualified, so it
// cannot tell the difference. Without the variable, the tests skip.
package pgtest

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
)

// URLEnv names the variable holding the test server's URL. CI always sets
// it; a machine without PostgreSQL leaves it unset and the tests skip.
const URLEnv = "IDEMCTL_TEST_POSTGRES_URL"

// DB is one test's schema.
type DB struct {
	// URL reaches the schema: the test URL with search_path set to Name
	// and application_name set to App.
	URL string
	// Name is the schema's name, for statements that must qualify it.
	Name string
	// App is the application_name of the URL's connections. Sessions whose
	// application_name starts with App are ended before the schema is
	// dropped, so a test may tag connections of its own App + "-…".
	App string
}

// BaseURL returns the test server's URL, or skips the test (with a message
// naming postgres, which CI looks for) when the variable is unset.
func BaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(URLEnv)
	if u == "" {
		t.Skip(URLEnv + " not set: skipping this postgres test")
	}
	return u
}

// Schema creates a schema for this test and returns a URL whose
// search_path is that schema (see New). The schema is dropped when the
// test ends.
func Schema(t testing.TB) string {
	t.Helper()
	return New(t).URL
}

// New creates a schema of its own for this test in the test database and
// returns it. When the test ends (after the cleanups registered later,
// which close the test's stores), the schema's remaining sessions are ended
// and it is dropped.
func New(t testing.TB) DB {
	t.Helper()
	base := BaseURL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	tag := hex.EncodeToString(b[:])
	db := DB{Name: "idemctl_test_" + tag, App: "idemctl-test-" + tag}
	Exec(t, base, "CREATE SCHEMA "+db.Name)
	t.Cleanup(func() {
		Exec(t, base, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name LIKE $1 AND pid <> pg_backend_pid()`, db.App+"%")
		Exec(t, base, "DROP SCHEMA IF EXISTS "+db.Name+" CASCADE")
	})
	db.URL = WithParams(t, base, map[string]string{"search_path": db.Name, "application_name": db.App})
	return db
}

// WithParams sets parameters of a postgres:// URL or a key=value DSN; pgx
// sends those it does not know itself (search_path) to the server as
// run-time settings.
func WithParams(t testing.TB, dsn string, params map[string]string) string {
	t.Helper()
	if !hasURLScheme(dsn) {
		for k, v := range params {
			dsn += " " + k + "='" + v + "'"
		}
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", URLEnv, err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func hasURLScheme(dsn string) bool {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if len(dsn) >= len(scheme) && strings.EqualFold(dsn[:len(scheme)], scheme) {
			return true
		}
	}
	return false
}

// Exec runs one statement on a connection of its own.
func Exec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	// Not t.Context(): this also runs in cleanups, after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", URLEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
