package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Stats is the part of GET /stats the bench reads (SPEC §4.2).
type Stats struct {
	Calls    int64            `json:"calls"`
	Effects  int64            `json:"effects"`
	ByStatus map[string]int64 `json:"by_status"`
}

// busy is the number of calls not yet final.
func (s Stats) busy() int64 { return s.ByStatus["pending"] + s.ByStatus["running"] }

// fetchStats reads base/stats.
func fetchStats(ctx context.Context, c *http.Client, base string) (Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/stats", nil)
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
		s.ByStatus = map[string]int64{}
	}
	return s, nil
}

// drainPoll is how often /stats is read while waiting for the queue to empty.
const drainPoll = 20 * time.Millisecond

// drain waits until /stats shows no pending or running call, or timeout
// passes. It returns the last stats read and whether the service drained.
func drain(ctx context.Context, c *http.Client, base string, timeout time.Duration) (Stats, bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := fetchStats(ctx, c, base)
		if err != nil {
			return s, false, err
		}
		if s.busy() == 0 {
			return s, true, nil
		}
		if !time.Now().Before(deadline) {
			return s, false, nil
		}
		select {
		case <-ctx.Done():
			return s, false, ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}
