package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

func TestParse(t *testing.T) {
	tests := []struct {
		dsn    string
		kind   Kind
		target string
	}{
		{"idem.db", SQLite, "idem.db"},
		{"./data/idem.db", SQLite, "./data/idem.db"},
		{"/var/lib/idemctl/idem.db", SQLite, "/var/lib/idemctl/idem.db"},
		{"sqlite://idem.db", SQLite, "idem.db"},
		{"sqlite:///var/lib/idem.db", SQLite, "/var/lib/idem.db"},
		{"sqlite:idem.db", SQLite, "idem.db"},
		{"SQLITE://idem.db", SQLite, "idem.db"},
		{"file:idem.db?mode=ro", SQLite, "file:idem.db?mode=ro"},
		{"postgres://postgres@127.0.0.1:5432/idem?sslmode=disable", Postgres, "postgres://postgres@127.0.0.1:5432/idem?sslmode=disable"},
		{"postgresql://u:p@db/idem", Postgres, "postgresql://u:p@db/idem"},
		{"POSTGRES://db/idem", Postgres, "POSTGRES://db/idem"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			kind, target, err := Parse(tt.dsn)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.dsn, err)
			}
			if kind != tt.kind || target != tt.target {
				t.Fatalf("Parse(%q) = %v %q, want %v %q", tt.dsn, kind, target, tt.kind, tt.target)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		dsn, wantIn, notIn string
	}{
		{dsn: "", wantIn: "empty"},
		{dsn: "   ", wantIn: "empty"},
		{dsn: "sqlite://", wantIn: "without a path"},
		{dsn: "foo://bar", wantIn: `"foo://"`},
		// The error names the scheme but never echoes the password.
		{dsn: "mysql://root:hunter2@db/idem", wantIn: `"mysql://"`, notIn: "hunter2"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			_, _, err := Parse(tt.dsn)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tt.dsn)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("error %q does not contain %q", err, tt.wantIn)
			}
			if tt.notIn != "" && strings.Contains(err.Error(), tt.notIn) {
				t.Fatalf("error %q leaks %q", err, tt.notIn)
			}
		})
	}
}

func TestUnknownSchemeListsAccepted(t *testing.T) {
	_, err := Open(t.Context(), "foo://somewhere/db", store.Options{})
	if err == nil {
		t.Fatal("Open(foo://) succeeded")
	}
	for _, want := range []string{"postgres://", "postgresql://", "sqlite://", "file:", "path"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not list %q", err, want)
		}
	}
}

func TestOpenSQLiteForms(t *testing.T) {
	dir := t.TempDir()
	for name, dsn := range map[string]string{
		"plain.db":  filepath.Join(dir, "plain.db"),
		"scheme.db": "sqlite://" + filepath.Join(dir, "scheme.db"),
		"uri.db":    "file:" + filepath.Join(dir, "uri.db"),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.Context(), dsn, store.Options{})
			if err != nil {
				t.Fatalf("Open(%q): %v", dsn, err)
			}
			defer s.Close()
			if _, ok := s.(*sqlite.Store); !ok {
				t.Fatalf("Open(%q) = %T, want *sqlite.Store", dsn, s)
			}
			if err := s.Ping(t.Context()); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Fatalf("database file not at the path the DSN names: %v", err)
			}
			ro, err := Open(t.Context(), dsn, store.Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("read-only Open(%q): %v", dsn, err)
			}
			defer ro.Close()
			_, err = ro.ClaimNext(t.Context(), "w", 0, 1)
			if !errors.Is(err, store.ErrReadOnly) {
				t.Fatalf("read-only store wrote: %v", err)
			}
		})
	}
}

func TestOpenSQLiteErrorIsNilInterface(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "missing", "dir", "x.db"), store.Options{})
	if err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
	if s != nil {
		t.Fatalf("failed Open returned a non-nil store %#v", s)
	}
}

// TestOpenPostgresRoutes shows a postgres:// DSN reaches the PostgreSQL
// backend (and not, say, a SQLite file named "postgres:"), using a port on
// loopback where nothing listens.
func TestOpenPostgresRoutes(t *testing.T) {
	t.Chdir(t.TempDir())
	s, err := Open(t.Context(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", store.Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of an unreachable PostgreSQL succeeded")
	}
	if s != nil {
		t.Fatalf("failed Open returned a non-nil store %#v", s)
	}
	if !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("error %q does not come from the PostgreSQL backend", err)
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Fatalf("a postgres DSN created files: %v", entries)
	}
}

// TestOpenPostgres opens the real test database when CI provides one, in a
// schema of its own so it leaves the database as it found it.
func TestOpenPostgres(t *testing.T) {
	s, err := Open(t.Context(), pgtest.Schema(t), store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if _, ok := s.(*postgres.Store); !ok {
		t.Fatalf("Open = %T, want *postgres.Store", s)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}
