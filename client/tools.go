package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemctl/idemctl/internal/wire"
)

// Tools lists the server's tools (GET /v1/tools), sorted by name: one
// request, no retry.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	rep, err := c.get(ctx, wire.PathTools, false)
	if err != nil {
		return nil, err
	}
	if rep.status != http.StatusOK {
		return nil, rep.apiError()
	}
	var body wire.Tools
	if err := json.Unmarshal(rep.body, &body); err != nil {
		return nil, fmt.Errorf("client: decoding GET %s reply: %w", wire.PathTools, err)
	}
	return body.Tools, nil
}

// Stats is GET /stats: logical calls against side effects (docs/api.md,
// "Health, stats and metrics").
type Stats struct {
	StatsBody
	// Raw is the reply as sent, members this build does not know included.
	Raw json.RawMessage `json:"-"`
}

// Stats fetches GET /stats: one request, no retry.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	rep, err := c.get(ctx, wire.PathStats, false)
	if err != nil {
		return Stats{}, err
	}
	if rep.status != http.StatusOK {
		return Stats{}, rep.apiError()
	}
	var s Stats
	if err := json.Unmarshal(rep.body, &s); err != nil {
		return Stats{}, fmt.Errorf("client: decoding %s: %w", wire.PathStats, err)
	}
	s.Raw = json.RawMessage(rep.body)
	return s, nil
}
