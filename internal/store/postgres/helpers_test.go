package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// open opens a Store on dsn and closes it when the test ends.
func open(t *testing.T, dsn string, opts store.Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// scalar runs a one-value query on a store's own pool, for assertions on
// what is really stored and on the database's clock.
func scalar[T any](t *testing.T, s *Store, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := s.pool.QueryRow(t.Context(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// newCall is a NewCall for key with a fresh call id.
func newCall(t *testing.T, key string) store.NewCall {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return store.NewCall{
		CallID:      "c_" + hex.EncodeToString(b[:]),
		IdemKey:     key,
		Fingerprint: "fp-" + key,
		Tool:        "charge",
		ArgsJSON:    []byte(`{"amount":100}`),
	}
}

// create records a new call for key and fails unless it was created.
func create(t *testing.T, s store.Store, key string) store.Call {
	t.Helper()
	c, out, err := s.CreateOrGet(t.Context(), newCall(t, key))
	if err != nil || out != store.Created {
		t.Fatalf("CreateOrGet(%q) = %v, %v; want created", key, out, err)
	}
	return c
}

// createClaimed records a new call for key and claims it as worker "w"
// under lease, failing unless both happen.
func createClaimed(t *testing.T, s store.Store, key string, lease time.Duration) store.Call {
	t.Helper()
	create(t, s, key)
	got, err := s.ClaimNext(t.Context(), "w", lease, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	return got[0]
}

// success is the completion of a claimed call with a charge effect.
func success(c store.Call) store.Completion {
	amount := int64(100)
	eff := "eff_" + c.CallID[2:]
	return store.Completion{
		Lease:  store.Lease{CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt},
		Result: []byte(`{"charged":100}`),
		Effect: &store.Effect{EffectID: eff, CallID: c.CallID, Tool: c.Tool, Amount: &amount},
	}
}
