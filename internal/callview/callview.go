// Package callview renders a stored call as the API's call object
// (wire.Call): the one place that decides what a reader sees of a row
// (null result and error, {} args, the not-before time of a pending call
// only, the default door). The server's answers, the MCP door and
// `inspect calls` all render through it. It is a package of its own
// because wire imports nothing of idemctl and store knows no rendering.
package callview

import (
	"encoding/json"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Of renders a stored call (docs/api.md, "The call object"). A nil
// json.RawMessage marshals as null.
func Of(c store.Call) wire.Call {
	return wire.Call{
		CallID:      c.CallID,
		Principal:   c.Principal,
		IdemKey:     c.IdemKey,
		Tool:        c.Tool,
		Args:        orDefault(c.ArgsJSON, "{}"),
		Status:      c.Status,
		Attempt:     c.Attempt,
		Result:      nullable(c.ResultJSON),
		Error:       nullable(c.ErrorJSON),
		EffectID:    c.EffectID,
		ClientID:    c.ClientID,
		Seq:         c.Seq,
		Fingerprint: c.Fingerprint,
		CreatedAt:   c.CreatedAt,
		UpdatedAt:   c.UpdatedAt,
		QueryURL:    wire.CallPath(c.CallID),

		CancelRequested: c.CancelRequested,
		NotBefore:       notBefore(c),
		Via:             store.ViaOf(c.Via),
		NotifyURL:       c.NotifyURL,
	}
}

// notBefore is the call's not-before time while it waits for a scheduled
// retry; a claim leaves the column in place (then in the past), so it is
// shown for pending calls only.
func notBefore(c store.Call) *float64 {
	if c.Status != store.StatusPending {
		return nil
	}
	return c.NotBefore
}

func nullable(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil // marshals as null
	}
	return raw
}

func orDefault(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(def)
	}
	return raw
}
