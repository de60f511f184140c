package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/idemctl/idemctl/internal/wire"
)

// ListOptions narrow List. Zero values mean "any" and the server's default
// page size.
type ListOptions struct {
	Status string
	Tool   string
	Limit  int
	// After is the Next of the previous page; "" starts at the newest call.
	After string
}

// Page is one page of GET /v1/tool-calls: calls newest first, and the
// cursor of the next page ("" on the last).
type Page struct {
	Calls []Call
	Next  string
}

// List fetches one page of the caller's calls (GET /v1/tool-calls): one
// request, no retry. With auth on, the server lists only the calls of the
// token's principal.
func (c *Client) List(ctx context.Context, o ListOptions) (Page, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", o.Status)
	}
	if o.Tool != "" {
		q.Set("tool", o.Tool)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	path := wire.PathCalls
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	rep, err := c.get(ctx, path, false)
	if err != nil {
		return Page{}, err
	}
	if rep.status != http.StatusOK {
		return Page{}, rep.apiError()
	}
	var body wire.Page[Call] // each call keeps its own bytes (Call.Raw)
	if err := json.Unmarshal(rep.body, &body); err != nil {
		return Page{}, fmt.Errorf("client: decoding GET /v1/tool-calls reply: %w", err)
	}
	p := Page{Calls: body.Calls}
	if p.Calls == nil {
		p.Calls = []Call{}
	}
	if body.Next != nil {
		p.Next = *body.Next
	}
	return p, nil
}
