// Package redrive sends failed calls back to pending in bulk
// (docs/operations.md, "Redrive"): the selection (failed calls of a tool,
// an error code and a creation window, redrivable by store.Redrivable)
// and the reset of each through store.Store.Redrive, the same reset as a
// same-key retry. The API's POST /v1/redrive runs it for the token's
// principal; idemctl redrive calls that route.
//
// A redriven call is an ordinary pending call: the executor claims it
// under the tool's concurrency like any other, so a recovery is paced by
// the same limits as new work.
package redrive

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// Limits of one redrive.
const (
	// DefaultLimit is how many calls a redrive resets when no limit is
	// given.
	DefaultLimit = 100
	// MaxLimit bounds one redrive, so one request holds no lock and no
	// memory out of proportion; run it again for more.
	MaxLimit = 1000
	// maxScanned bounds the failed calls one redrive reads to find its
	// selection (a rare code among many failures): More is then true.
	maxScanned = 20 * MaxLimit
	// page is how many failed calls are read at a time.
	page = 500
)

// ErrBadFilter: the filter is invalid (a limit out of range, an empty
// window); nothing was read or changed.
var ErrBadFilter = errors.New("redrive: invalid filter")

// Filter selects the calls of one redrive. Zero values mean "any".
type Filter struct {
	// Principal, if set, selects only that principal's calls (the API's
	// redrive is always scoped to the token's principal).
	Principal *string
	// Tool and Code select calls of that tool, and whose error has that
	// code.
	Tool, Code string
	// Since and Until select calls created at or after Since and before
	// Until (Unix seconds, the database's clock).
	Since, Until *float64
	// Limit is the most calls reset (0: DefaultLimit; at most MaxLimit).
	Limit int
	// Force selects definite failures too (retryable false); never an
	// outcome_unknown one (store.Redrivable).
	Force bool
	// DryRun selects without resetting anything.
	DryRun bool
}

// Check validates f and fills its default limit.
func (f *Filter) Check() error {
	switch {
	case f.Limit == 0:
		f.Limit = DefaultLimit
	case f.Limit < 0 || f.Limit > MaxLimit:
		return fmt.Errorf("%w: limit must be 1 to %d, got %d", ErrBadFilter, MaxLimit, f.Limit)
	}
	if f.Since != nil && f.Until != nil && *f.Until <= *f.Since {
		return fmt.Errorf("%w: until must be after since", ErrBadFilter)
	}
	return nil
}

// Result is what a redrive did.
type Result struct {
	// Calls are the calls selected, newest first: with DryRun as they
	// are, otherwise as redriven (pending). A call reset or changed by
	// someone else between the selection and its reset is not in it.
	Calls []store.Call
	// More is true when more calls may match: the limit was reached, or
	// the scan stopped at its bound before the end of the failed calls.
	More bool
}

// Run selects the calls f names and, unless f.DryRun, redrives each,
// recording by in its audit row. f must have passed Check.
func Run(ctx context.Context, st store.Store, f Filter, by string) (Result, error) {
	res := Result{Calls: []store.Call{}}
	since := f.Since
	if since == nil {
		// A lower bound makes the listing keyset-ordered (created_at,
		// then call_id) from its first page on, so pages never overlap.
		zero := 0.0
		since = &zero
	}
	lf := store.ListFilter{Status: store.StatusFailed, Tool: f.Tool, Principal: f.Principal, Since: since, Until: f.Until, Limit: page}
	scanned := 0
	for {
		calls, err := st.ListCalls(ctx, lf)
		if err != nil {
			return res, fmt.Errorf("listing failed calls: %w", err)
		}
		for _, c := range calls {
			scanned++
			if (f.Code != "" && store.ErrorCode(c.ErrorJSON) != f.Code) || !store.Redrivable(c.ErrorJSON, f.Force) {
				continue
			}
			if len(res.Calls) == f.Limit {
				res.More = true
				return res, nil
			}
			if f.DryRun {
				res.Calls = append(res.Calls, c)
				continue
			}
			rc, ok, err := st.Redrive(ctx, c.CallID, by, c.ErrorJSON)
			switch {
			case errors.Is(err, store.ErrNotFound):
				continue // purged meanwhile
			case err != nil:
				return res, fmt.Errorf("redriving %s: %w", c.CallID, err)
			case ok:
				res.Calls = append(res.Calls, rc)
			}
		}
		if len(calls) < page {
			return res, nil
		}
		if scanned >= maxScanned {
			res.More = true
			return res, nil
		}
		cur := store.CursorOf(calls[len(calls)-1])
		lf.After = &cur
	}
}
