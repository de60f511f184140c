package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Cancel asks the server to stop a call (POST /v1/tool-calls/{id}/cancel):
// one request, no retry (a repeated cancel is harmless, so the caller may
// retry it). It returns the call as the server answered it: failed with
// error code canceled (a pending call), or still running with the cancel
// requested (poll it to see how it ends). A call that had already ended is
// an *APIError with code already_final, and the call.
func (c *Client) Cancel(ctx context.Context, callID string) (Call, error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.url(callPath(callID)+"/cancel"), nil)
	if err != nil {
		return Call{}, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	rep, err := c.do(req)
	if err != nil {
		return Call{}, err
	}
	if rep.status == http.StatusOK || rep.status == http.StatusAccepted {
		var call Call
		if err := json.Unmarshal(rep.body, &call); err != nil {
			return Call{}, fmt.Errorf("client: decoding cancel reply (HTTP %d): %w", rep.status, err)
		}
		call.Raw = json.RawMessage(rep.body)
		return call, nil
	}
	var final struct {
		Call json.RawMessage `json:"call"`
	}
	var call Call
	if json.Unmarshal(rep.body, &final) == nil && len(final.Call) > 0 && json.Unmarshal(final.Call, &call) == nil {
		call.Raw = final.Call
	}
	return call, rep.apiError()
}
