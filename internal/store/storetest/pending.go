package storetest

import (
	"maps"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// testPendingByPrincipal: only pending calls count (running and final
// ones do not), each principal's apart, and principals below atLeast are
// left out.
func testPendingByPrincipal(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	mk := func(principal, key string) {
		n := newCall(t, key, "fp-"+key)
		n.Principal = principal
		if _, out, err := s.CreateOrGet(ctx, n); err != nil || out != store.Created {
			t.Fatalf("CreateOrGet(%s, %s) = %v, %v", principal, key, out, err)
		}
	}
	for _, k := range []string{"a0", "a1", "a2", "a3"} {
		mk("alice", k)
	}
	mk("bob", "b1")
	mk(store.DefaultPrincipal, "d1")
	mk(store.DefaultPrincipal, "d2")
	// The oldest (alice's a0) runs: not pending any more.
	if got, err := s.ClaimNext(ctx, "w1", longLease, 1); err != nil || len(got) != 1 || got[0].IdemKey != "a0" {
		t.Fatalf("ClaimNext = %v, %v; want alice's a0, the oldest", ids(got), err)
	}

	got, err := s.PendingByPrincipal(ctx, 0)
	if err != nil {
		t.Fatalf("PendingByPrincipal: %v", err)
	}
	want := map[string]int64{"alice": 3, "bob": 1, store.DefaultPrincipal: 2}
	if !maps.Equal(got, want) {
		t.Fatalf("PendingByPrincipal(0) = %v, want %v", got, want)
	}

	at3, err := s.PendingByPrincipal(ctx, 3)
	if err != nil {
		t.Fatalf("PendingByPrincipal(3): %v", err)
	}
	if want := map[string]int64{"alice": 3}; !maps.Equal(at3, want) {
		t.Fatalf("PendingByPrincipal(3) = %v, want %v (only principals with at least 3)", at3, want)
	}
}
