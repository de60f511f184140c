package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// TestGenSQLite: the generated database opens as an idemctl store and holds
// exactly n succeeded calls, each with its effect and three audit rows, and
// its keys are taken (a create with one of them is Existing).
func TestGenSQLite(t *testing.T) {
	const n = 250
	path := filepath.Join(t.TempDir(), "gen.db")
	if err := genSQLite(t.Context(), path, n); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stats, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if stats.Calls != n || stats.Effects != n || stats.ByStatus[store.StatusSucceeded] != n {
		t.Fatalf("stats %+v, want %d succeeded calls and %d effects", stats, n, n)
	}
	c, out, err := st.CreateOrGet(t.Context(), store.NewCall{CallID: "c_00000000000000ff", IdemKey: "gen-7",
		Fingerprint: "x", Tool: "charge", ArgsJSON: []byte(`{"amount":1}`)})
	if err == nil || out == store.Created {
		t.Fatalf("create with a generated key: %v %v %+v, want a conflict (the key is taken)", out, err, c)
	}
	got, err := st.GetByKey(t.Context(), store.DefaultPrincipal, "gen-7")
	if err != nil {
		t.Fatal(err)
	}
	if got.EffectID == nil || *got.EffectID != "eff_"+got.CallID[2:] {
		t.Fatalf("generated call %+v: want effect eff_ + its call id's hex", got)
	}
	// History lies in the past: a new call sorts after it.
	if now := float64(time.Now().UnixNano()) / 1e9; got.CreatedAt > now {
		t.Fatalf("generated created_at %v after now %v", got.CreatedAt, now)
	}
	audit, err := st.Audit(t.Context(), got.CallID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 3 {
		t.Fatalf("audit rows of one generated call: %d, want 3", len(audit))
	}
	if err := genSQLite(context.Background(), path, 1); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("gen over an existing file: %v, want refused", err)
	}
}
