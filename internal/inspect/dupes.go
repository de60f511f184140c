package inspect

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/idemctl/idemctl/internal/store"
)

// DupesOptions format `inspect dupes`.
type DupesOptions struct {
	Output Format
}

// DupeJSON is one call with more than one effect.
type DupeJSON struct {
	CallID    string   `json:"call_id"`
	Effects   int64    `json:"effects"`
	EffectIDs []string `json:"effect_ids"`
}

// Dupes prints the calls that have more than one effect, with the ids of
// those effects: `SELECT call_id,count(*) FROM effects GROUP BY
// call_id HAVING count(*)>1`, which must print nothing. effects.call_id is
// UNIQUE, so a row here means the constraint was bypassed (docs/design.md,
// "Why effects are unique per call").
// It returns the duplicates found; the command exits 1 when there are any.
func Dupes(ctx context.Context, st store.Store, opts DupesOptions, w io.Writer) ([]store.Dupe, error) {
	dupes, err := st.Dupes(ctx)
	if err != nil {
		return nil, fmt.Errorf("looking for duplicate effects: %w", err)
	}
	// Effect ids are only looked up when something is wrong: listing every
	// effect of a healthy database would be wasted work.
	ids := map[string][]string{}
	if len(dupes) > 0 {
		effs, err := st.ListEffects(ctx, 0)
		if err != nil {
			return nil, fmt.Errorf("listing effects: %w", err)
		}
		for _, e := range effs {
			ids[e.CallID] = append(ids[e.CallID], e.EffectID)
		}
	}
	if opts.Output == FormatJSON {
		out := make([]DupeJSON, 0, len(dupes))
		for _, d := range dupes {
			effectIDs := ids[d.CallID]
			if effectIDs == nil {
				effectIDs = []string{}
			}
			out = append(out, DupeJSON{CallID: d.CallID, Effects: d.Effects, EffectIDs: effectIDs})
		}
		return dupes, writeJSON(w, out)
	}
	if len(dupes) == 0 {
		_, err := fmt.Fprintln(w, "no duplicate effects")
		return dupes, err
	}
	rows := make([][]string, 0, len(dupes))
	for _, d := range dupes {
		rows = append(rows, []string{d.CallID, strconv.FormatInt(d.Effects, 10), strings.Join(ids[d.CallID], " ")})
	}
	if err := render(newTable(w, "call_id", "effects", "effect_ids"), rows); err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(w, "%d call(s) with more than one effect: the effects.call_id UNIQUE constraint was bypassed\n", len(dupes))
	return dupes, err
}
