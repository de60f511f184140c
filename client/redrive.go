package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// RedriveOptions select which of your failed calls Redrive sends back to
// pending (docs/api.md, "Redrive"). The zero value selects up to 100
// retryable failures of any tool, any time.
type RedriveOptions struct {
	// Tool and Code select calls of that tool, whose error has that code
	// ("": any).
	Tool, Code string
	// Since and Until select calls created in [Since, Until) (zero: no
	// bound).
	Since, Until time.Time
	// Limit is the most calls redriven (0: the server's 100; at most 1000).
	Limit int
	// Force selects definite failures (retryable false) too.
	Force bool
	// DryRun selects without changing anything.
	DryRun bool
}

// Redriven is Redrive's answer: the calls selected, newest first (as
// redriven, or as they are with DryRun), and whether more may match.
type Redriven = wire.Redriven[Call]

// Redrive sends failed calls back to pending (POST /v1/redrive): one
// request, no retry. Redriven calls run again under the tool's rate limit
// and circuit breaker, like any pending call. A repeated redrive is
// harmless: a call already pending again is no longer selected.
func (c *Client) Redrive(ctx context.Context, o RedriveOptions) (Redriven, error) {
	body := wire.Redrive{Tool: o.Tool, Code: o.Code, Limit: o.Limit, Force: o.Force, DryRun: o.DryRun}
	if !o.Since.IsZero() {
		s := unixSeconds(o.Since)
		body.Since = &s
	}
	if !o.Until.IsZero() {
		u := unixSeconds(o.Until)
		body.Until = &u
	}
	b, err := json.Marshal(body)
	if err != nil {
		return Redriven{}, err
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.attemptTimeout)
	defer cancel()
	req, err := c.newRequest(actx, http.MethodPost, wire.PathRedrive, bytes.NewReader(b))
	if err != nil {
		return Redriven{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	rep, err := c.do(req)
	if err != nil {
		return Redriven{}, err
	}
	if rep.status != http.StatusOK {
		return Redriven{}, rep.apiError()
	}
	var out Redriven
	if err := json.Unmarshal(rep.body, &out); err != nil {
		return Redriven{}, fmt.Errorf("client: decoding POST %s reply: %w", wire.PathRedrive, err)
	}
	return out, nil
}

// unixSeconds is t as the API's times are: Unix seconds.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
