package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// ListOptions narrow List and ListPage. Zero values mean "any" and the
// server's default page size (50; at most 500).
type ListOptions struct {
	// Status keeps only calls in this status.
	Status Status
	// Tool keeps only calls of this tool.
	Tool string
	// Code keeps only calls whose error has this code (a failed call's,
	// or the failure a pending call waits out), e.g. CodeOutcomeUnknown.
	Code string
	// KeyPrefix keeps only calls whose idempotency key starts with it
	// (byte for byte).
	KeyPrefix string
	// Since and Until keep only calls created at or after Since and
	// before Until, by the database's clock; zero means no bound.
	Since, Until time.Time
	// Limit is the number of calls per page.
	Limit int
	// After is the Next of a previous page; "" starts at the newest call.
	After string
}

// Page is one page of GET /v1/tool-calls: calls newest first, and the
// cursor of the next page ("" on the last).
type Page struct {
	Calls []Call
	Next  string
}

// List iterates over the caller's calls, newest first, fetching one page
// after another (GET /v1/tool-calls, keyset pages of o.Limit). With auth
// on, the server lists only the calls of the token's principal. A failed
// request ends the iteration with its error as the last pair; breaking
// out of the loop fetches no further page.
//
//	for call, err := range c.List(ctx, client.ListOptions{Tool: "charge"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(call.CallID, call.Status)
//	}
func (c *Client) List(ctx context.Context, o ListOptions) iter.Seq2[Call, error] {
	return func(yield func(Call, error) bool) {
		for {
			page, err := c.ListPage(ctx, o)
			if err != nil {
				yield(Call{}, err)
				return
			}
			for _, call := range page.Calls {
				if !yield(call, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			o.After = page.Next
		}
	}
}

// ListPage fetches one page of the caller's calls (GET /v1/tool-calls):
// one request, no retry.
func (c *Client) ListPage(ctx context.Context, o ListOptions) (Page, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", string(o.Status))
	}
	if o.Tool != "" {
		q.Set("tool", o.Tool)
	}
	if o.Code != "" {
		q.Set("code", o.Code)
	}
	if o.KeyPrefix != "" {
		q.Set("key_prefix", o.KeyPrefix)
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.Format(time.RFC3339Nano))
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
		return Page{}, fmt.Errorf("client: decoding GET %s reply: %w", wire.PathCalls, err)
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
