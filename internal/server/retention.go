package server

import (
	"context"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
)

// purgeInterval is how often the purge task runs: a quarter of the
// retention, at most a minute, so a call outlives its retention by at most
// that much.
func purgeInterval(retention time.Duration) time.Duration {
	return min(maxPurgeInterval, retention/4)
}

// purgeLoop deletes final calls older than the retention, every
// purgeInterval, until ctx ends or the server stops. Every instance on a
// shared database may run it: batches are conditional deletes, so two
// purgers never delete a call twice or a call that is not final.
func (s *Server) purgeLoop(ctx context.Context) {
	defer close(s.purgeDone)
	t := time.NewTicker(purgeInterval(s.cfg.Retention))
	defer t.Stop()
	for {
		s.purgeOnce(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
	}
}

// purgeOnce runs purge batches until one comes back short (nothing older
// is left), the server stops or a batch fails (logged; the next tick tries
// again). Each batch is one short transaction, so writers wait for one
// batch at most, never for the whole purge.
func (s *Server) purgeOnce(ctx context.Context) int {
	total := 0
	for {
		select {
		case <-ctx.Done():
			return total
		case <-s.closing:
			return total
		default:
		}
		start := time.Now()
		n, err := s.st.Purge(ctx, s.cfg.Retention, PurgeBatch)
		s.m.purgeSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("retention purge failed; retrying at the next tick", logkey.Err, err)
			}
			return total
		}
		total += n
		s.m.purged.Add(float64(n))
		if n < PurgeBatch {
			if total > 0 {
				s.log.Info("retention purge", "purged", total, logkey.DurationAttr("retention", s.cfg.Retention))
			}
			return total
		}
	}
}
