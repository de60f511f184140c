package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemctl/idemctl/internal/wire"
)

// Tool is a registry tool as GET /v1/tools lists it (docs/api.md, "Tools").
type Tool = wire.Tool

// Tools lists the server's tools (GET /v1/tools): one request, no retry.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	if err := CheckBase(c.Base); err != nil {
		return nil, err
	}
	rep, err := c.get(ctx, wire.PathTools, false)
	if err != nil {
		return nil, err
	}
	if rep.status != http.StatusOK {
		return nil, rep.apiError()
	}
	var body wire.Tools
	if err := json.Unmarshal(rep.body, &body); err != nil {
		return nil, fmt.Errorf("client: decoding GET /v1/tools reply: %w", err)
	}
	return body.Tools, nil
}
