// Package ctxutil holds what every waiting loop of idemctl needs from a
// context and nothing else: the client's retries, the soak's workload and
// observers, and the chaos proxy's delay all sleep through it, so a cancel
// always ends a wait at once.
package ctxutil

import (
	"context"
	"time"
)

// Sleep waits d, or returns ctx's error if ctx ends first. A d of zero or
// less does not wait, but still reports a context that has already ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
