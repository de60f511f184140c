package inspect

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// StatsOptions format `inspect stats`.
type StatsOptions struct {
	Output Format
}

// allStatuses is the order stats prints states in.
var allStatuses = store.Statuses

// Stats prints calls, effects and calls by status, and returns them. Normally
// effects never exceed succeeded calls with an effect tool; more effects than
// calls means duplicate side effects (see Dupes).
func Stats(ctx context.Context, st store.Store, opts StatsOptions, w io.Writer) (store.Stats, error) {
	s, err := st.Stats(ctx)
	if err != nil {
		return store.Stats{}, fmt.Errorf("reading stats: %w", err)
	}
	by := map[string]int64{}
	for _, status := range allStatuses {
		by[string(status)] = s.ByStatus[status]
	}
	for status, n := range s.ByStatus { // a state this version does not know still shows
		by[string(status)] = n
	}
	if opts.Output == FormatJSON {
		// The shape of GET /stats without the queue (wire.Stats): by_status
		// always holds the four states, zero when empty, so scripts can read
		// any of them without a default.
		byStatus := make(map[store.Status]int64, len(by))
		for k, n := range by {
			byStatus[store.Status(k)] = n
		}
		return s, writeJSON(w, wire.Stats{Calls: s.Calls, Effects: s.Effects, ByStatus: byStatus})
	}
	rows := [][]string{
		{"calls", strconv.FormatInt(s.Calls, 10)},
		{"effects", strconv.FormatInt(s.Effects, 10)},
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	// Known states in lifecycle order, then any others alphabetically.
	slices.SortFunc(keys, func(a, b string) int {
		ia, ib := slices.Index(allStatuses, store.Status(a)), slices.Index(allStatuses, store.Status(b))
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	for _, k := range keys {
		rows = append(rows, []string{"status " + k, strconv.FormatInt(by[k], 10)})
	}
	return s, render(newTable(w, "metric", "value"), rows)
}
