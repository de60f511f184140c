package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemctl/idemctl/internal/wire"
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
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.url(wire.CancelPath(escapeSegment(callID))), nil)
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
		return call, nil
	}
	// already_final carries the call as it ended (wire.Error.Call); it is
	// decoded here as a Call, to keep its bytes.
	var final struct {
		Call *Call `json:"call"`
	}
	var call Call
	if json.Unmarshal(rep.body, &final) == nil && final.Call != nil {
		call = *final.Call
	}
	return call, rep.apiError()
}
