package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Stats is GET /stats as the bench reads it (docs/api.md, "Health,
// stats and metrics").
type Stats wire.Stats

// finished is the number of calls in a final state.
func (s Stats) finished() int64 { return s.count(true) }

// busy is the number of calls not yet final.
func (s Stats) busy() int64 { return s.count(false) }

// count adds up the calls whose status is final (or not).
func (s Stats) count(final bool) int64 {
	var n int64
	for _, st := range store.Statuses {
		if st.Final() == final {
			n += s.ByStatus[st]
		}
	}
	return n
}

// fetchStats reads base/stats.
func fetchStats(ctx context.Context, c *http.Client, base string) (Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+wire.PathStats, nil)
	if err != nil {
		return Stats{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Stats{}, fmt.Errorf("GET /stats: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Stats{}, fmt.Errorf("GET /stats: reading body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Stats{}, fmt.Errorf("GET /stats: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var s Stats
	if err := json.Unmarshal(body, &s); err != nil {
		return Stats{}, fmt.Errorf("GET /stats: %w", err)
	}
	if s.ByStatus == nil {
		s.ByStatus = map[store.Status]int64{}
	}
	return s, nil
}

// Drain polling: /stats counts whole tables, so it is read every
// drainPollMin for the first drainPollFast (a small run drains in
// milliseconds, and drain_s should say so to within a poll), then less and
// less often, to leave the database to the workers being waited for.
const (
	drainPollMin  = 20 * time.Millisecond
	drainPollFast = time.Second
	drainPollMax  = 250 * time.Millisecond
	// MaxDrain caps the whole drain, however steadily it progresses.
	MaxDrain = 10 * time.Minute
)

// drain waits until /stats shows no pending or running call. It gives up
// when idle passes without the number of unfinished calls going down (the
// service is stuck, not slow), or after MaxDrain. progress, if not nil, is
// told how many calls are still unfinished after each read. It returns the
// last stats read and whether the service drained.
func drain(ctx context.Context, c *http.Client, base string, idle time.Duration, progress func(busy int64)) (Stats, bool, error) {
	start := time.Now()
	lastProgress := start
	best := int64(-1)
	poll := drainPollMin
	for {
		s, err := fetchStats(ctx, c, base)
		if err != nil {
			return s, false, err
		}
		busy := s.busy()
		if progress != nil {
			progress(busy)
		}
		if busy == 0 {
			return s, true, nil
		}
		now := time.Now()
		if best < 0 || busy < best {
			best, lastProgress = busy, now
		}
		if now.Sub(lastProgress) >= idle || now.Sub(start) >= MaxDrain {
			return s, false, nil
		}
		select {
		case <-ctx.Done():
			return s, false, ctx.Err()
		case <-time.After(poll):
		}
		if time.Since(start) >= drainPollFast {
			poll = min(2*poll, drainPollMax)
		}
	}
}
