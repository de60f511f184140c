package backend

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// TestRedact: every form a password can take in a DSN is hidden, and the
// rest of the DSN stays readable.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"idem.db", "idem.db"},
		{"sqlite:///tmp/x.db", "sqlite:///tmp/x.db"},
		{"./password=x.db", "./password=x.db"}, // a file path, not a DSN
		{"postgres://127.0.0.1/idem?sslmode=disable", "postgres://127.0.0.1/idem?sslmode=disable"},
		// URL userinfo.
		{"postgres://u:secret@127.0.0.1:5432/idem", "postgres://u:xxxxx@127.0.0.1:5432/idem"},
		// password= query parameter, alone and with userinfo; sslpassword too.
		{"postgres://u@127.0.0.1/db?password=hunter2&sslmode=disable", "postgres://u@127.0.0.1/db?password=xxxxx&sslmode=disable"},
		{"postgres://u:pw@127.0.0.1/db?password=hunter2", "postgres://u:xxxxx@127.0.0.1/db?password=xxxxx"},
		{"postgresql://h/db?sslpassword=keypass", "postgresql://h/db?sslpassword=xxxxx"},
		// libpq key=value: plain, quoted with a space, quoted with an escaped
		// quote, spaces around '=', upper case, sslpassword.
		{"host=db password=hunter2 dbname=x", "host=db password=xxxxx dbname=x"},
		{"host=db password='hun ter2' dbname=x", "host=db password=xxxxx dbname=x"},
		{`host=db password='it\'s secret' dbname=x`, "host=db password=xxxxx dbname=x"},
		{"host=db password = hunter2 dbname=x", "host=db password=xxxxx dbname=x"},
		{"host=db PASSWORD=hunter2", "host=db PASSWORD=xxxxx"},
		{"dbname=x sslpassword=keypass", "dbname=x sslpassword=xxxxx"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactUnparsableURL shows only the scheme of a URL it cannot parse.
func TestRedactUnparsableURL(t *testing.T) {
	got := Redact("postgres://u:hunter2@[bad/db")
	if strings.Contains(got, "hunter2") || !strings.HasPrefix(got, "postgres://") {
		t.Errorf("Redact = %q", got)
	}
}

// TestParseKeyValueIsPostgres: a libpq key=value DSN goes to PostgreSQL,
// unchanged (pgx parses it); a path that merely contains '=' stays SQLite.
func TestParseKeyValueIsPostgres(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		kind Kind
	}{
		{"host=127.0.0.1 dbname=idem user=u password=p", Postgres},
		{"dbname=idem", Postgres},
		{"  Host = db port=5432", Postgres},
		{"a=b.db", SQLite},
		{"./host=x.db", SQLite},
		{"data/x=1.db", SQLite},
	} {
		kind, target, err := Parse(tc.dsn)
		if err != nil || kind != tc.kind {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.dsn, kind, err, tc.kind)
		}
		if err == nil && target != tc.dsn {
			t.Errorf("Parse(%q) target %q, want the DSN unchanged", tc.dsn, target)
		}
	}
}

// TestOpenReadOnlyMissingSQLiteFile: a read-only open of a missing file
// says the file does not exist (SQLite says "unable to open database file
// (14)") and creates nothing.
func TestOpenReadOnlyMissingSQLiteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.db")
	_, err := Open(t.Context(), path, store.Options{ReadOnly: true})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open = %v, want an error saying %s does not exist", err, path)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only open created %s (stat: %v)", path, err)
	}
}
