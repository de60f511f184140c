package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// testPrincipalScoping: keys are unique per principal (the UNIQUE
// constraint is on (principal, idem_key)): the same key from two
// principals is two calls, each principal finds only its own by key, and a
// conflict names the existing call of the same principal. Get by id is
// scoped the same way (testGetByPrincipal).
func testPrincipalScoping(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	mk := func(principal, fp string) store.NewCall {
		n := newCall(t, "shared-key", fp)
		n.Principal = principal
		return n
	}
	a, out, err := s.CreateOrGet(ctx, mk("alice", "fp-a"))
	if err != nil || out != store.Created {
		t.Fatalf("alice: CreateOrGet = %v, %v; want created", out, err)
	}
	b, out, err := s.CreateOrGet(ctx, mk("bob", "fp-b"))
	if err != nil || out != store.Created {
		t.Fatalf("bob, same key, other fingerprint: CreateOrGet = %v, %v; want created (a call of his own)", out, err)
	}
	anon, out, err := s.CreateOrGet(ctx, mk(store.DefaultPrincipal, "fp-x"))
	if err != nil || out != store.Created {
		t.Fatalf("default principal: CreateOrGet = %v, %v; want created", out, err)
	}
	if a.CallID == b.CallID || a.CallID == anon.CallID {
		t.Fatalf("one call for two principals: %s %s %s", a.CallID, b.CallID, anon.CallID)
	}
	if a.Principal != "alice" || b.Principal != "bob" || anon.Principal != store.DefaultPrincipal {
		t.Fatalf("principals stored as %q, %q, %q", a.Principal, b.Principal, anon.Principal)
	}
	if got := get(t, s, b.CallID); got.Principal != "bob" {
		t.Fatalf("Get(bob's call).Principal = %q", got.Principal)
	}
	for _, w := range []struct {
		principal string
		want      string
	}{{"alice", a.CallID}, {"bob", b.CallID}, {store.DefaultPrincipal, anon.CallID}} {
		got, err := s.GetByKey(ctx, w.principal, "shared-key")
		if err != nil || got.CallID != w.want {
			t.Fatalf("GetByKey(%q) = %s, %v; want %s", w.principal, got.CallID, err, w.want)
		}
	}
	_, err = s.GetByKey(ctx, "carol", "shared-key")
	wantErr(t, "GetByKey(carol, another principal's key)", err, store.ErrNotFound)
	testGetByPrincipal(t, s, a, b, anon)

	// Replays stay within the principal.
	again, out, err := s.CreateOrGet(ctx, mk("bob", "fp-b"))
	if err != nil || out != store.Existing || again.CallID != b.CallID {
		t.Fatalf("bob's replay = %s, %v, %v; want existing %s", again.CallID, out, err, b.CallID)
	}
	_, _, err = s.CreateOrGet(ctx, mk("alice", "fp-b"))
	var ce *store.ConflictError
	if !errors.Is(err, store.ErrConflict) || !errors.As(err, &ce) || ce.CallID != a.CallID {
		t.Fatalf("alice with bob's fingerprint: err = %v; want a *ConflictError naming %s", err, a.CallID)
	}
	if st := stats(t, s); st.Calls != 3 {
		t.Fatalf("calls = %d, want 3", st.Calls)
	}
}

// age moves a call's last update back by d, as if it had finished long ago.
func age(t *testing.T, su suite, db, callID string, d time.Duration) {
	t.Helper()
	su.f.Exec(t, db, fmt.Sprintf(`UPDATE calls SET updated_at = updated_at - %d WHERE call_id = '%s'`,
		int64(d.Seconds()), callID))
}

// testPurge: Purge deletes final calls older than the age, with their
// audit rows, never a pending or running one, and keeps every effect; a
// purged key is new again, and no second effect can be written for a
// purged call id.
func testPurge(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()

	done := createAndClaim(t, s, "old-done", "w", longLease)
	if _, err := s.Succeed(ctx, completion(done)); err != nil {
		t.Fatal(err)
	}
	failed := createAndClaim(t, s, "old-failed", "w", longLease)
	if _, err := s.Fail(ctx, failure(failed, false)); err != nil {
		t.Fatal(err)
	}
	running := createAndClaim(t, s, "old-running", "w", longLease)
	recent := createAndClaim(t, s, "recent-done", "w", longLease)
	if _, err := s.Succeed(ctx, completion(recent)); err != nil {
		t.Fatal(err)
	}
	recent = get(t, s, recent.CallID)
	pending := create(t, s, "old-pending")
	for _, id := range []string{done.CallID, failed.CallID, running.CallID, pending.CallID} {
		age(t, su, db, id, 2*time.Hour)
	}

	if n, err := s.Purge(ctx, time.Hour, 0, false); err != nil || n != 0 {
		t.Fatalf("Purge(limit 0) = %d, %v; want 0", n, err)
	}
	if _, err := s.Purge(ctx, -time.Second, 10, false); err == nil {
		t.Fatal("Purge(negative age) succeeded")
	}
	// A batch of one, then the rest: the limit is honoured.
	n1, err := s.Purge(ctx, time.Hour, 1, false)
	if err != nil || n1 != 1 {
		t.Fatalf("Purge(limit 1) = %d, %v; want 1", n1, err)
	}
	n2, err := s.Purge(ctx, time.Hour, 100, false)
	if err != nil || n2 != 1 {
		t.Fatalf("second Purge = %d, %v; want the other old final call", n2, err)
	}
	if n, err := s.Purge(ctx, time.Hour, 100, false); err != nil || n != 0 {
		t.Fatalf("third Purge = %d, %v; want nothing left", n, err)
	}

	for _, id := range []string{done.CallID, failed.CallID} {
		_, err := s.GetAny(ctx, id)
		wantErr(t, "Get(purged "+id+")", err, store.ErrNotFound)
		if evs := audit(t, s, id); len(evs) != 0 {
			t.Fatalf("purged call %s kept audit rows %v", id, events(evs))
		}
	}
	for _, c := range []store.Call{running, pending, recent} {
		if got := get(t, s, c.CallID); got.Status != c.Status {
			t.Fatalf("%s: status %s after purge, want %s", c.CallID, got.Status, c.Status)
		}
		if len(audit(t, s, c.CallID)) == 0 {
			t.Fatalf("kept call %s lost its audit rows", c.CallID)
		}
	}
	effs := effects(t, s)
	if len(effs) != 2 {
		t.Fatalf("effects after purge = %d, want 2 (the purged call's is kept)", len(effs))
	}

	// The key is new again: a new call, not the purged one.
	again := create(t, s, "old-done")
	if again.CallID == done.CallID {
		t.Fatal("a purged key returned the purged call")
	}
	if _, err := s.ClaimNext(ctx, "other", longLease, 10); err != nil { // out of the way
		t.Fatal(err)
	}

	// A call that reuses the purged call's id cannot leave a second effect:
	// effects.call_id is still UNIQUE without the call row.
	n := newCall(t, "reuses-id", "fp-reuse")
	n.CallID = done.CallID
	if _, _, err := s.CreateOrGet(ctx, n); err != nil {
		t.Fatalf("CreateOrGet(purged call id): %v", err)
	}
	c := claimOnly(t, s, "w", longLease, done.CallID)
	comp := completion(c)
	comp.Effect.EffectID = "eff_second_" + done.CallID
	if _, err := s.Succeed(ctx, comp); err != nil && !errors.Is(err, store.ErrRefused) {
		t.Fatalf("Succeed(second effect for a purged call id): %v", err)
	}
	count := 0
	for _, e := range effects(t, s) {
		if e.CallID == done.CallID {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("call %s has %d effects after a purge and a second completion, want 1", done.CallID, count)
	}
	if d, err := s.Dupes(ctx); err != nil || len(d) != 0 {
		t.Fatalf("Dupes = %v, %v", d, err)
	}
}

// pageAll lists f page by page (limit per page, each page after the last
// call of the previous one) and returns every call id in order.
func pageAll(t *testing.T, s store.Store, f store.ListFilter, limit int) []string {
	t.Helper()
	var out []string
	f.Limit = limit
	for range 100 {
		page, err := s.ListCalls(t.Context(), f)
		if err != nil {
			t.Fatalf("ListCalls(%+v): %v", f, err)
		}
		if len(page) > limit {
			t.Fatalf("page of %d calls, limit %d", len(page), limit)
		}
		out = append(out, ids(page)...)
		if len(page) < limit {
			return out
		}
		c := store.CursorOf(page[len(page)-1])
		f.After = &c
	}
	t.Fatal("pagination does not end")
	return nil
}

// testListKeyset: a principal's listing is its own calls only, newest
// first, and paging by cursor returns each exactly once, also when
// created_at ties (call_id breaks them) and when calls are inserted
// between pages (they sort before the first page).
func testListKeyset(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	alice, bob := "alice", "bob"
	var made []string // alice's, oldest first
	for i := range 7 {
		n := newCall(t, fmt.Sprintf("a%d", i), "fp")
		n.Principal = alice
		if i == 3 {
			n.Tool = "send_email"
		}
		c, _, err := s.CreateOrGet(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, c.CallID)
		tick()
	}
	for i := range 2 {
		n := newCall(t, fmt.Sprintf("a%d", i), "fp") // the same keys as alice's
		n.Principal = bob
		if _, _, err := s.CreateOrGet(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	newestFirst := func(ids []string) []string {
		out := append([]string(nil), ids...)
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return out
	}
	want := newestFirst(made)
	if got := pageAll(t, s, store.ListFilter{Principal: &alice}, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("alice's pages = %v, want %v", got, want)
	}
	if got := pageAll(t, s, store.ListFilter{Principal: &bob}, 10); len(got) != 2 {
		t.Fatalf("bob's listing = %v, want his 2 calls", got)
	}
	if got := pageAll(t, s, store.ListFilter{Principal: &alice, Tool: "send_email"}, 10); !reflect.DeepEqual(got, []string{made[3]}) {
		t.Fatalf("alice's send_email calls = %v, want [%s]", got, made[3])
	}
	if got := pageAll(t, s, store.ListFilter{Principal: &alice, Status: store.StatusSucceeded}, 10); len(got) != 0 {
		t.Fatalf("alice's succeeded calls = %v, want none", got)
	}
	if got, err := s.ListCalls(ctx, store.ListFilter{Principal: &alice, Status: "bogus"}); err != nil || len(got) != 0 {
		t.Fatalf("unknown status = %v, %v; want none", ids(got), err)
	}

	// Inserts between pages: the rest of the pages are unchanged.
	first, err := s.ListCalls(ctx, store.ListFilter{Principal: &alice, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		n := newCall(t, fmt.Sprintf("late%d", i), "fp")
		n.Principal = alice
		if _, _, err := s.CreateOrGet(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	c := store.CursorOf(first[len(first)-1])
	rest := pageAll(t, s, store.ListFilter{Principal: &alice, After: &c}, 2)
	if got := append(ids(first), rest...); !reflect.DeepEqual(got, want) {
		t.Fatalf("pages around concurrent inserts = %v, want %v", got, want)
	}

	// Every call of alice at one instant: call_id alone orders them.
	su.f.Exec(t, db, `UPDATE calls SET created_at = 1000.5 WHERE principal = 'alice'`)
	all, err := s.ListCalls(ctx, store.ListFilter{Principal: &alice})
	if err != nil {
		t.Fatal(err)
	}
	tied := pageAll(t, s, store.ListFilter{Principal: &alice}, 2)
	if len(tied) != 9 || !reflect.DeepEqual(tied, ids(all)) {
		t.Fatalf("pages over tied created_at = %v, want %v", tied, ids(all))
	}
	for i := 1; i < len(tied); i++ {
		if tied[i-1] <= tied[i] {
			t.Fatalf("tied calls not by call_id descending: %v", tied)
		}
	}
}

// testGetByPrincipal: Get finds a call by id for the principal that
// recorded it only; for any other principal (the default one included)
// the call does not exist. GetAny finds it for everyone.
func testGetByPrincipal(t *testing.T, s store.Store, calls ...store.Call) {
	ctx := t.Context()
	for _, c := range calls {
		got, err := s.Get(ctx, c.Principal, c.CallID)
		if err != nil || got.CallID != c.CallID || got.Principal != c.Principal {
			t.Fatalf("Get(%q, its own call %s) = %s of %q, %v", c.Principal, c.CallID, got.CallID, got.Principal, err)
		}
		for _, other := range []string{"alice", "bob", "carol", store.DefaultPrincipal} {
			if other == c.Principal {
				continue
			}
			_, err := s.Get(ctx, other, c.CallID)
			wantErr(t, fmt.Sprintf("Get(%q, %q's call)", other, c.Principal), err, store.ErrNotFound)
		}
		if got, err := s.GetAny(ctx, c.CallID); err != nil || got.CallID != c.CallID {
			t.Fatalf("GetAny(%s) = %s, %v", c.CallID, got.CallID, err)
		}
	}
	_, err := s.Get(ctx, calls[0].Principal, newCallID(t))
	wantErr(t, "Get(an unknown id)", err, store.ErrNotFound)
}
