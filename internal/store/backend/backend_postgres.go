package backend

import (
	"context"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/postgres"
)

// openPostgres opens the PostgreSQL backend. It lives in a file of its own
// so the SQLite-only routing above never depends on it.
func openPostgres(ctx context.Context, url string, opts store.Options) (store.Store, error) {
	s, err := postgres.Open(ctx, url, opts)
	if err != nil {
		// Return a nil interface, not a typed nil *postgres.Store.
		return nil, err
	}
	return s, nil
}
