package reconcile

import (
	"context"
	"encoding/json"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// FromStore reads a tool's effects and calls created at or after from.
// Effect rows outlive their calls (retention keeps them), so every effect
// of the window is seen.
func FromStore(ctx context.Context, st store.Store, toolName string, from time.Time) (Local, error) {
	fromTS := float64(from.UnixNano()) / 1e9
	effects, err := st.ListEffects(ctx, 0)
	if err != nil {
		return Local{}, err
	}
	var local Local
	for _, e := range effects {
		if e.Tool == toolName && e.CreatedAt >= fromTS {
			local.Effects = append(local.Effects, Effect{EffectID: e.EffectID, CallID: e.CallID, At: UnixTime(e.CreatedAt)})
		}
	}
	calls, err := st.ListCalls(ctx, store.ListFilter{Tool: toolName, Since: &fromTS})
	if err != nil {
		return Local{}, err
	}
	for _, c := range calls {
		local.Calls = append(local.Calls, CallOf(c.CallID, c.Status, c.ErrorJSON))
	}
	return local, nil
}

// CallOf is a call as reconcile sees it: the key its attempts send
// downstream (tool.EffectID), its status and, if it failed, its error
// code.
func CallOf(callID string, status wire.Status, errJSON json.RawMessage) Call {
	c := Call{CallID: callID, EffectID: tool.EffectID(callID), Status: status}
	if status == wire.StatusFailed {
		var ce wire.CallError
		if json.Unmarshal(errJSON, &ce) == nil {
			c.Code = ce.Code
		}
	}
	return c
}

// UnixTime converts the store's and the API's Unix seconds.
func UnixTime(ts float64) time.Time { return time.Unix(0, int64(ts*1e9)).UTC() }
