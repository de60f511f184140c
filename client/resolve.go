package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemctl/idemctl/internal/wire"
)

// Resolution is how an operator settles a call that failed with code
// outcome_unknown (docs/api.md, "Resolving an unknown outcome"): Outcome
// StatusSucceeded, with an optional Result (default {"resolved": true}),
// when the effect happened; StatusFailed, with an optional Message, when
// it did not.
type Resolution = wire.Resolve

// Resolve settles a failed outcome_unknown call
// (POST /v1/tool-calls/{id}/resolve): one request, no retry. It returns
// the call as settled; the same key then replays that outcome. Any other
// call is an *APIError with code not_resolvable (errors.Is(err,
// ErrNotResolvable)), returned with the call as it is; nothing changed.
func (c *Client) Resolve(ctx context.Context, callID string, r Resolution) (Call, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return Call{}, fmt.Errorf("client: encoding the resolution: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.attemptTimeout)
	defer cancel()
	req, err := c.newRequest(actx, http.MethodPost, wire.ResolvePath(escapeSegment(callID)), bytes.NewReader(body))
	if err != nil {
		return Call{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	rep, err := c.do(req)
	if err != nil {
		return Call{}, err
	}
	if rep.status == http.StatusOK {
		var call Call
		if err := json.Unmarshal(rep.body, &call); err != nil {
			return Call{}, fmt.Errorf("client: decoding resolve reply (HTTP %d): %w", rep.status, err)
		}
		return call, nil
	}
	// not_resolvable carries the call as it is (wire.Error.Call).
	var cur struct {
		Call *Call `json:"call"`
	}
	var call Call
	if json.Unmarshal(rep.body, &cur) == nil && cur.Call != nil {
		call = *cur.Call
	}
	return call, rep.apiError()
}
