package inspect

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// DefaultLimit is how many rows calls, effects and audit show by default.
const DefaultLimit = 50

// CallsOptions select and format `inspect calls`.
type CallsOptions struct {
	Output Format
	// Status keeps only calls in that state ("" = all).
	Status store.Status
	// Limit caps the rows, newest first (0 = all).
	Limit int
	// Notice, if not nil, gets a line when Limit cut the listing (see
	// noteTruncated). The command passes stderr, so JSON on stdout stays a
	// plain array.
	Notice io.Writer
}

// CallJSON is one call in `inspect calls --output json`: the API's call
// object (wire.Call, rendered as the API renders it) and what only inspect
// shows, the lease of a running call.
type CallJSON struct {
	wire.Call
	// Owner and LeaseUntil hold a running call's lease; null otherwise.
	Owner      *string  `json:"owner"`
	LeaseUntil *float64 `json:"lease_until"`
}

// callJSON converts a stored call to its JSON shape.
func callJSON(c store.Call) CallJSON {
	return CallJSON{Call: callview.Of(c), Owner: c.Owner, LeaseUntil: c.LeaseUntil}
}

// Calls lists calls newest first, every principal's ("-" for the default
// principal of a server without auth), with their key, tool, state, attempt
// and effect. It returns the calls it printed.
func Calls(ctx context.Context, st store.Store, opts CallsOptions, w io.Writer) ([]store.Call, error) {
	calls, err := st.ListCalls(ctx, store.ListFilter{Status: opts.Status, Limit: opts.Limit})
	if err != nil {
		return nil, fmt.Errorf("listing calls: %w", err)
	}
	if err := noteTruncated(ctx, st, opts.Notice, len(calls), opts.Limit, "calls", func(s store.Stats) int64 {
		if opts.Status != "" {
			return s.ByStatus[opts.Status]
		}
		return s.Calls
	}); err != nil {
		return nil, err
	}
	if opts.Output == FormatJSON {
		out := make([]CallJSON, 0, len(calls))
		for _, c := range calls {
			out = append(out, callJSON(c))
		}
		return calls, writeJSON(w, out)
	}
	rows := make([][]string, 0, len(calls))
	for _, c := range calls {
		rows = append(rows, []string{
			c.CallID, orDash(c.Principal), store.ViaOf(c.Via), c.IdemKey, c.Tool, string(c.Status),
			strconv.FormatInt(c.Attempt, 10), orDash(deref(c.EffectID)),
			formatTS(c.CreatedAt), formatTS(c.UpdatedAt),
		})
	}
	t := newTable(w, "call_id", "principal", "via", "idem_key", "tool", "status", "attempt", "effect_id", "created", "updated")
	if err := render(t, rows); err != nil {
		return nil, err
	}
	return calls, nil
}

// EffectsOptions select and format `inspect effects`.
type EffectsOptions struct {
	Output Format
	// Limit caps the rows, newest first (0 = all).
	Limit int
	// Notice, as in CallsOptions.
	Notice io.Writer
}

// EffectJSON is one effect in `inspect effects --output json`.
type EffectJSON struct {
	EffectID  string  `json:"effect_id"`
	CallID    string  `json:"call_id"`
	Tool      string  `json:"tool"`
	Amount    *int64  `json:"amount"`
	CreatedAt float64 `json:"created_at"`
}

// Effects lists the simulated side effects newest first and returns them.
func Effects(ctx context.Context, st store.Store, opts EffectsOptions, w io.Writer) ([]store.Effect, error) {
	effs, err := st.ListEffects(ctx, opts.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing effects: %w", err)
	}
	if err := noteTruncated(ctx, st, opts.Notice, len(effs), opts.Limit, "effects", func(s store.Stats) int64 {
		return s.Effects
	}); err != nil {
		return nil, err
	}
	if opts.Output == FormatJSON {
		out := make([]EffectJSON, 0, len(effs))
		for _, e := range effs {
			out = append(out, EffectJSON{EffectID: e.EffectID, CallID: e.CallID, Tool: e.Tool, Amount: e.Amount, CreatedAt: e.CreatedAt})
		}
		return effs, writeJSON(w, out)
	}
	rows := make([][]string, 0, len(effs))
	for _, e := range effs {
		amount := "-"
		if e.Amount != nil {
			amount = strconv.FormatInt(*e.Amount, 10)
		}
		rows = append(rows, []string{e.EffectID, e.CallID, e.Tool, amount, formatTS(e.CreatedAt)})
	}
	if err := render(newTable(w, "effect_id", "call_id", "tool", "amount", "created"), rows); err != nil {
		return nil, err
	}
	return effs, nil
}
