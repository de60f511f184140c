package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// newCallID returns "c_" + 16 lowercase hex, the call id format
// (docs/api.md, "The call object").
func newCallID(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "c_" + hex.EncodeToString(b[:])
}

// effectIDFor derives an effect id from a call id; the real server derives
// it deterministically too, the suite only needs it stable.
func effectIDFor(callID string) string {
	return "eff_" + callID[len(callID)-16:]
}

// newCall builds a NewCall for key whose fingerprint is fp.
func newCall(t *testing.T, key, fp string) store.NewCall {
	t.Helper()
	return store.NewCall{
		CallID:      newCallID(t),
		IdemKey:     key,
		Fingerprint: fp,
		Tool:        "charge",
		ArgsJSON:    json.RawMessage(`{"amount":100}`),
	}
}

// create records a new call and fails the test unless it was Created.
func create(t *testing.T, s store.Store, key string) store.Call {
	t.Helper()
	c, out, err := s.CreateOrGet(t.Context(), newCall(t, key, "fp-"+key))
	if err != nil {
		t.Fatalf("CreateOrGet(%q): %v", key, err)
	}
	if out != store.Created {
		t.Fatalf("CreateOrGet(%q) outcome = %v, want created", key, out)
	}
	return c
}

// claimOnly claims with limit 1 and fails unless exactly wantID was claimed.
func claimOnly(t *testing.T, s store.Store, owner string, lease time.Duration, wantID string) store.Call {
	t.Helper()
	got, err := s.ClaimNext(t.Context(), owner, lease, 1)
	if err != nil {
		t.Fatalf("ClaimNext(%s): %v", owner, err)
	}
	if len(got) != 1 || got[0].CallID != wantID {
		t.Fatalf("ClaimNext(%s) = %v, want exactly %s", owner, ids(got), wantID)
	}
	return got[0]
}

// createAndClaim creates a call and claims it for owner.
func createAndClaim(t *testing.T, s store.Store, key, owner string, lease time.Duration) store.Call {
	t.Helper()
	c := create(t, s, key)
	return claimOnly(t, s, owner, lease, c.CallID)
}

// completion is the fencing token of a claimed call plus a charge result
// and its effect.
func completion(c store.Call) store.Completion {
	amount := int64(100)
	eff := effectIDFor(c.CallID)
	return store.Completion{
		Lease:  store.LeaseOf(c),
		Result: json.RawMessage(fmt.Sprintf(`{"charged":100,"effect_id":%q}`, eff)),
		Effect: &store.Effect{EffectID: eff, CallID: c.CallID, Tool: c.Tool, Amount: &amount},
	}
}

// failure is the fencing token of a claimed call plus an error object.
func failure(c store.Call, retryable bool) store.Completion {
	return store.Completion{
		Lease: store.LeaseOf(c),
		Error: json.RawMessage(fmt.Sprintf(`{"code":"tool_failed","message":"boom","retryable":%t}`, retryable)),
	}
}

func ids(cs []store.Call) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.CallID
	}
	return out
}

func get(t *testing.T, s store.Store, id string) store.Call {
	t.Helper()
	c, err := s.GetAny(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return c
}

func stats(t *testing.T, s store.Store) store.Stats {
	t.Helper()
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func audit(t *testing.T, s store.Store, callID string) []store.AuditEvent {
	t.Helper()
	evs, err := s.Audit(t.Context(), callID, 0)
	if err != nil {
		t.Fatalf("Audit(%q): %v", callID, err)
	}
	return evs
}

func events(evs []store.AuditEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Event
	}
	return out
}

func countEvent(evs []store.AuditEvent, name string) int {
	n := 0
	for _, e := range evs {
		if e.Event == name {
			n++
		}
	}
	return n
}

func effects(t *testing.T, s store.Store) []store.Effect {
	t.Helper()
	effs, err := s.ListEffects(t.Context(), 0)
	if err != nil {
		t.Fatalf("ListEffects: %v", err)
	}
	return effs
}

// jsonEq reports whether a and b hold the same JSON value.
func jsonEq(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// eventually polls f until it returns true or the deadline passes.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(pollEvery)
	}
}

// tick makes sure the next row gets a strictly later timestamp than the last
// one even on a backend whose clock has coarse resolution, so ordering
// assertions ("oldest first", "newest first") are well defined.
func tick() { time.Sleep(2 * time.Millisecond) }

// normalize re-encodes the JSON columns of c so calls read back through
// different paths compare equal regardless of how the backend formats JSON.
func normalize(t *testing.T, c store.Call) store.Call {
	t.Helper()
	re := func(m json.RawMessage) json.RawMessage {
		if m == nil {
			return nil
		}
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatalf("bad JSON %q: %v", m, err)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	c.ArgsJSON, c.ResultJSON, c.ErrorJSON = re(c.ArgsJSON), re(c.ResultJSON), re(c.ErrorJSON)
	return c
}
