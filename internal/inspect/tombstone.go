package inspect

import (
	"context"
	"fmt"
	"io"

	"github.com/idemctl/idemctl/internal/store"
)

// TombstoneOptions select and format `inspect tombstone`.
type TombstoneOptions struct {
	Output Format
	// Principal and Key name the tombstone; store.DefaultPrincipal is the
	// principal of a server without auth.
	Principal, Key string
}

// TombstoneJSON is a tombstone as `inspect tombstone -o json` prints it.
type TombstoneJSON struct {
	Principal   string  `json:"principal"`
	IdemKey     string  `json:"idem_key"`
	Fingerprint string  `json:"fingerprint"`
	CallID      string  `json:"call_id"`
	Tool        string  `json:"tool"`
	PurgedAt    float64 `json:"purged_at"`
}

// Tombstone prints what retention kept of a purged call's key
// (docs/operations.md, "Retention"): the call it named and when it went.
// A key without a tombstone is store.ErrNotFound.
func Tombstone(ctx context.Context, st store.Store, opts TombstoneOptions, w io.Writer) (store.Tombstone, error) {
	t, err := st.Tombstone(ctx, opts.Principal, opts.Key)
	if err != nil {
		return store.Tombstone{}, fmt.Errorf("no tombstone of key %q for principal %q: %w", opts.Key, opts.Principal, err)
	}
	if opts.Output == FormatJSON {
		return t, writeJSON(w, TombstoneJSON{Principal: t.Principal, IdemKey: t.IdemKey, Fingerprint: t.Fingerprint,
			CallID: t.CallID, Tool: t.Tool, PurgedAt: t.PurgedAt})
	}
	principal := t.Principal
	if principal == store.DefaultPrincipal {
		principal = "-"
	}
	return t, render(newTable(w, "field", "value"), [][]string{
		{"principal", principal},
		{"key", t.IdemKey},
		{"fingerprint", t.Fingerprint},
		{"call_id", t.CallID},
		{"tool", t.Tool},
		{"purged_at", formatTS(t.PurgedAt)},
	})
}
