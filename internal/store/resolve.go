package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/wire"
)

// ErrNotResolvable: ResolveCall was asked to settle a call that is not
// failed with code outcome_unknown (Resolvable), or that changed while it
// was settled. Nothing changed.
var ErrNotResolvable = errors.New("only a failed call with code " + wire.CodeOutcomeUnknown + " can be resolved")

// DefaultResolvedResult is the result of a call resolved as succeeded
// without one.
var DefaultResolvedResult = json.RawMessage(`{"resolved":true}`)

// DefaultResolvedMessage is the error message of a call resolved as failed
// without one.
const DefaultResolvedMessage = "an operator resolved the unknown outcome as failed: the effect did not happen"

// ResolveCall settles c, a call read just before, as req says
// (docs/api.md, "Resolving an unknown outcome"), recording by as who did
// it: the one resolve path of the API and of idemctl resolve --db. As
// succeeded, with req.Result (DefaultResolvedResult when empty) and the
// effect row effectID (the operator says the effect happened downstream,
// under the call's effect id); as failed, with the error {"code":
// "resolved_failed", "message": req.Message or DefaultResolvedMessage,
// "retryable": false}. A call that is not Resolvable, or changed
// meanwhile, is ErrNotResolvable with the call as it is.
func ResolveCall(ctx context.Context, st Store, c Call, by string, req wire.Resolve, effectID string) (Call, error) {
	if !Resolvable(c) {
		return c, ErrNotResolvable
	}
	r := Resolution{CallID: c.CallID, By: by, PrevErr: c.ErrorJSON}
	var err error
	if r.Notify, err = DeliveryFor(c); err != nil {
		return Call{}, err
	}
	switch req.Outcome {
	case wire.StatusSucceeded:
		r.Succeeded, r.Result = true, DefaultResolvedResult
		if len(bytes.TrimSpace(req.Result)) > 0 {
			// Stored compact, as every tool's result is.
			var buf bytes.Buffer
			if err := json.Compact(&buf, req.Result); err != nil {
				return Call{}, fmt.Errorf("resolve: result: %w", err)
			}
			r.Result = buf.Bytes()
		}
		r.Effect = &Effect{EffectID: effectID, CallID: c.CallID, Tool: c.Tool}
	case wire.StatusFailed:
		msg := req.Message
		if msg == "" {
			msg = DefaultResolvedMessage
		}
		if r.Error, err = json.Marshal(wire.CallError{Code: wire.CodeResolvedFailed, Message: msg}); err != nil {
			return Call{}, err
		}
	default:
		return Call{}, fmt.Errorf("resolve: outcome must be %q or %q, got %q", wire.StatusSucceeded, wire.StatusFailed, req.Outcome)
	}
	done, ok, err := st.Resolve(ctx, r)
	if err != nil {
		return Call{}, err
	}
	if !ok {
		return done, ErrNotResolvable
	}
	return done, nil
}
