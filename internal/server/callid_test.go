package server

import (
	"context"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
)

// TestCallIDsSortByCreation: call ids keep their format (c_ + 16 hex) and
// an id made later sorts after one made earlier, so inserts keyed by call id
// land together (newCallID); ids made at once still differ.
func TestCallIDsSortByCreation(t *testing.T) {
	t.Parallel()
	// Five ids, 10 ms (two or more ticks) apart, must come out in order:
	// random ids would, one time in 120.
	var ids []string
	for i := range 5 {
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		id, err := newCallID()
		if err != nil {
			t.Fatal(err)
		}
		if !isCallID(id) {
			t.Fatalf("id %q: want c_ + 16 lowercase hex", id)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("id %q made 10 ms after %q does not sort after it (%v)", id, ids[i-1], ids)
		}
		ids = append(ids, id)
	}
	seen := map[string]bool{}
	for range 2000 {
		id, err := newCallID()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("id %q made twice in 2000", id)
		}
		seen[id] = true
	}
}

// TestCreateRetriesTakenCallID: when the id made for a new call already
// names another call, the create is tried once more with a fresh id: the
// new key gets a call of its own and the other call is untouched.
func TestCreateRetriesTakenCallID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"tool":"charge","args":{"amount":1}}`
	first := b.post("k-id-first", body).call(t)
	made := 0
	b.srv.newCallID = func() (string, error) {
		made++
		if made == 1 {
			return first.CallID, nil // taken
		}
		return newCallID()
	}
	req, aerr := parseCreate([]byte(body), false, toolreg.Builtins(), "")
	if aerr != nil {
		t.Fatal(aerr)
	}
	c, out, aerr := b.srv.submit(context.Background(), store.DefaultPrincipal, "k-id-second", req)
	if aerr != nil {
		t.Fatalf("create with a taken id: %+v, want it retried with a fresh id", aerr)
	}
	if out != store.Created || c.CallID == first.CallID || c.IdemKey != "k-id-second" || made != 2 {
		t.Fatalf("create: %v %s key %s after %d ids, want created under a second, fresh id", out, c.CallID, c.IdemKey, made)
	}
	got, err := b.st.GetAny(context.Background(), first.CallID)
	if err != nil || got.IdemKey != "k-id-first" {
		t.Fatalf("the first call: %+v %v, want untouched", got, err)
	}
}
