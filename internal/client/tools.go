package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Tool is a registry tool as GET /v1/tools lists it (docs/api.md, "Tools").
type Tool struct {
	Name        string          `json:"name"`
	Kind        string          `json:"kind"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Effect      bool            `json:"effect"`
	Destructive *bool           `json:"destructive"`
	// Dedup is the tool's intent-deduplication rule; nil: none.
	Dedup *ToolDedup `json:"dedup"`
}

// ToolDedup is a tool's dedup rule as GET /v1/tools lists it.
type ToolDedup struct {
	Args   []string `json:"args"`
	Window string   `json:"window"`
}

// Tools lists the server's tools (GET /v1/tools): one request, no retry.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	if err := CheckBase(c.Base); err != nil {
		return nil, err
	}
	rep, err := c.get(ctx, "/v1/tools", false)
	if err != nil {
		return nil, err
	}
	if rep.status != http.StatusOK {
		return nil, rep.apiError()
	}
	var body struct {
		Tools []Tool `json:"tools"`
	}
	if err := json.Unmarshal(rep.body, &body); err != nil {
		return nil, fmt.Errorf("client: decoding GET /v1/tools reply: %w", err)
	}
	return body.Tools, nil
}
