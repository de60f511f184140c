package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// defaultDBWait is serve --db-wait's default.
const defaultDBWait = 15 * time.Second

// openWithWait opens the store, trying again while the database is
// unavailable (store.ErrUnavailable: refused connections, a database still
// starting, a connection ended during the schema check) until wait has
// passed. A supervisor that starts idemctl beside its database, or restarts
// it while the database restarts too, then needs no start order. Any other
// error (a wrong password, a bad DSN, a schema from a newer idemctl) fails
// at once: waiting would not change it. wait 0 tries once.
func openWithWait(ctx context.Context, open func(context.Context) (store.Store, error), wait, backoff time.Duration, log *slog.Logger, dsn string) (store.Store, error) {
	deadline := time.Now().Add(wait)
	for attempt := 1; ; attempt++ {
		st, err := open(ctx)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || time.Now().Add(backoff).After(deadline) {
			return st, err
		}
		log.Warn("database unavailable, trying again", "db", backend.Redact(dsn), "attempt", attempt, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
