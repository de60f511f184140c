// Package backend opens the store.Store a DSN names, choosing the backend
// from its form (river's rivercli does the same): postgres:// and
// postgresql:// URLs and libpq key=value DSNs ("host=db dbname=idem") go to
// PostgreSQL, sqlite:// URLs, file: URIs and plain file paths to the
// embedded SQLite. Redact hides the passwords of every form for printing.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// Kind is a storage backend.
type Kind int

// The backends Open can choose.
const (
	SQLite Kind = iota + 1
	Postgres
)

// String names the backend ("sqlite", "postgres").
func (k Kind) String() string {
	switch k {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return "unknown"
}

// Accepted lists the DSN forms Open understands, for error messages and
// --help text.
const Accepted = "postgres://..., postgresql://..., a libpq key=value DSN (host=... dbname=...), sqlite://PATH, file:PATH, or a plain file path"

// Parse tells which backend dsn names and what to hand that backend: the
// URL or key=value DSN unchanged for PostgreSQL (pgx parses both); for
// SQLite, the path (sqlite:// stripped) or the file: URI as given. A DSN
// whose first word is "keyword=" for a libpq keyword (host, dbname, user,
// password, ...) is key=value: before, it became a SQLite file named after
// the DSN, password included. A file whose name starts that way can be
// given as ./host=x.db or sqlite://host=x.db.
func Parse(dsn string) (Kind, string, error) {
	if strings.TrimSpace(dsn) == "" {
		return 0, "", fmt.Errorf("empty database DSN; accepted: %s", Accepted)
	}
	lower := strings.ToLower(dsn)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return Postgres, dsn, nil
	case strings.HasPrefix(lower, "sqlite:"):
		// sqlite:///abs/path, sqlite://rel.db and sqlite:rel.db all name a path.
		path := dsn[len("sqlite:"):]
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return 0, "", errors.New("sqlite:// DSN without a path (e.g. sqlite://idem.db or sqlite:///var/lib/idem.db)")
		}
		return SQLite, path, nil
	case strings.HasPrefix(lower, "file:"):
		return SQLite, dsn, nil
	case isKeyValue(dsn):
		return Postgres, dsn, nil
	}
	if i := strings.Index(dsn, "://"); i >= 0 {
		// Name only the scheme: the rest of a URL may hold a password.
		return 0, "", fmt.Errorf("unknown database scheme %q; accepted: %s", dsn[:i]+"://", Accepted)
	}
	return SQLite, dsn, nil
}

// Open opens the store dsn names. See Parse for the forms. A read-only
// open of a SQLite path that does not exist fails with an error wrapping
// fs.ErrNotExist that says so (SQLite itself only says "unable to open
// database file"), and creates nothing.
func Open(ctx context.Context, dsn string, opts store.Options) (store.Store, error) {
	kind, target, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	if kind == SQLite && opts.ReadOnly && !strings.HasPrefix(strings.ToLower(target), "file:") {
		if _, err := os.Stat(target); errors.Is(err, fs.ErrNotExist) {
			return nil, &notExistError{path: target}
		}
	}
	switch kind {
	case Postgres:
		return openPostgres(ctx, target, opts)
	default:
		s, err := sqlite.Open(ctx, target, opts)
		if err != nil {
			// Return a nil interface, not a typed nil *sqlite.Store.
			return nil, err
		}
		return s, nil
	}
}

// notExistError says a SQLite file that a read-only open needs is missing;
// it matches fs.ErrNotExist for errors.Is.
type notExistError struct{ path string }

func (e *notExistError) Error() string {
	return "SQLite database file " + e.path + " does not exist"
}

func (e *notExistError) Is(target error) bool { return target == fs.ErrNotExist }
