// Package remote is the mcpdoor.Caller of idemctl mcp: an idemctl server
// reached over its HTTP API (the public client). It is a package of its own
// because the server, which the client's tests start, imports mcpdoor.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/clientknob"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/store"
)

// Caller is the mcpdoor.Caller of idemctl mcp: an idemctl server reached over its
// HTTP API. The principal is the client's token's, whatever the door
// passes.
type Caller struct {
	// Client reaches the server; a held POST's attempt timeout gets the
	// wait on top.
	Client *client.Client
}

// Tools lists GET /v1/tools.
func (r Caller) Tools(ctx context.Context) ([]mcpdoor.ToolInfo, error) {
	ts, err := r.Client.Tools(ctx)
	if err != nil {
		return nil, remoteError(err)
	}
	out := make([]mcpdoor.ToolInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, mcpdoor.ToolInfo{Name: t.Name, Description: t.Description, Schema: t.Schema,
			Effect: t.Effect, Destructive: t.Destructive, Dedup: t.Dedup != nil,
			Passthrough: t.Kind == "mcp", Annotations: t.Annotations})
	}
	return out, nil
}

// Submit is POST /v1/tool-calls with the key and "Prefer: wait", retried
// with the same key as the client retries, and recorded as coming through
// the MCP door (via mcp).
func (r Caller) Submit(ctx context.Context, _, key, tool string, args json.RawMessage, wait time.Duration) (mcpdoor.Call, bool, error) {
	var a any // nil sends {}
	if len(args) > 0 {
		a = args
	}
	ctx = clientknob.WithVia(ctx, store.ViaMCP)
	res, err := r.Client.Submit(ctx, tool, a, client.WithKey(key), client.WithCallPreferWait(wait))
	if err != nil {
		return mcpdoor.Call{}, false, remoteError(err)
	}
	return res.Call, res.Replayed, nil
}

// Get is GET /v1/tool-calls/{id}.
func (r Caller) Get(ctx context.Context, _, callID string) (mcpdoor.Call, error) {
	c, err := r.Client.Get(ctx, callID)
	if err != nil {
		return mcpdoor.Call{}, remoteError(err)
	}
	return c, nil
}

// GetByKey is GET /v1/tool-calls/by-key/{key}.
func (r Caller) GetByKey(ctx context.Context, _, key string) (mcpdoor.Call, error) {
	c, err := r.Client.GetByKey(ctx, key)
	if err != nil {
		return mcpdoor.Call{}, remoteError(err)
	}
	return c, nil
}

// List is GET /v1/tool-calls?tool=&limit=.
func (r Caller) List(ctx context.Context, _, tool string, limit int) ([]mcpdoor.Call, error) {
	p, err := r.Client.ListPage(ctx, client.ListOptions{Tool: tool, Limit: limit})
	if err != nil {
		return nil, remoteError(err)
	}
	return p.Calls, nil
}

// remoteError keeps the server's code (an *client.APIError); a transport
// error stays as it is (the door calls it unavailable).
func remoteError(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return &mcpdoor.Error{Code: ae.Code, Message: ae.Message, CallID: ae.CallID}
	}
	return err
}
