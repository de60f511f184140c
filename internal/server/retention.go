package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
// again), then does the same for the tombstones past their retention
// (all of them when tombstones are off, so a key is new again everywhere
// once they are turned off). Each batch is one short transaction, so
// writers wait for one batch at most, never for the whole purge.
func (s *Server) purgeOnce(ctx context.Context) int {
	tombstones := s.cfg.TombstoneRetention > 0
	total := s.purgeBatches(ctx, "retention purge", func() (int, error) {
		return s.st.Purge(ctx, s.cfg.Retention, PurgeBatch, tombstones)
	}, s.m.purged)
	s.purgeBatches(ctx, "tombstone purge", func() (int, error) {
		return s.st.PurgeTombstones(ctx, s.cfg.TombstoneRetention, PurgeBatch)
	}, s.m.tombstonesPurged)
	return total
}

// purgeBatches runs batch until it deletes fewer than PurgeBatch rows,
// ctx ends, the server stops or it fails, counting into deleted; it
// returns how many rows went.
func (s *Server) purgeBatches(ctx context.Context, what string, batch func() (int, error), deleted prometheus.Counter) int {
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
		n, err := batch()
		s.m.purgeSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn(what+" failed; retrying at the next tick", logkey.Err, err)
			}
			return total
		}
		total += n
		deleted.Add(float64(n))
		if n < PurgeBatch {
			if total > 0 {
				s.log.Info(what, "purged", total, logkey.DurationAttr("retention", s.cfg.Retention),
					logkey.DurationAttr("tombstone_retention", s.cfg.TombstoneRetention))
			}
			return total
		}
	}
}
