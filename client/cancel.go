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
// retry it). It returns the call as the server answered: failed with error
// code canceled (a pending call), or still running with the cancel
// requested (Wait for it to see how it ends). A call that had already
// ended is an *APIError with code already_final (errors.Is(err,
// ErrAlreadyFinal)), returned with the call as it ended. A cancel never
// undoes an effect that committed.
func (c *Client) Cancel(ctx context.Context, callID string) (Call, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.attemptTimeout)
	defer cancel()
	req, err := c.newRequest(actx, http.MethodPost, wire.CancelPath(escapeSegment(callID)), nil)
	if err != nil {
		return Call{}, err
	}
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
