package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

func testGet(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	c := create(t, s, "k1")
	byKey, err := s.GetByKey(t.Context(), store.DefaultPrincipal, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(t, byKey), normalize(t, c)) {
		t.Fatalf("GetByKey = %+v, want %+v", byKey, c)
	}
	_, err = s.GetAny(t.Context(), newCallID(t))
	wantErr(t, "Get of an unknown id", err, store.ErrNotFound)
	_, err = s.GetByKey(t.Context(), store.DefaultPrincipal, "nope")
	wantErr(t, "GetByKey of an unknown key", err, store.ErrNotFound)
	// Keys are compared exactly (no case folding, no trimming).
	_, err = s.GetByKey(t.Context(), store.DefaultPrincipal, "K1")
	wantErr(t, "GetByKey with other case", err, store.ErrNotFound)
}

func testListCalls(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if got, err := s.ListCalls(t.Context(), store.ListFilter{}); err != nil || len(got) != 0 {
		t.Fatalf("ListCalls on empty store = %v, %v", ids(got), err)
	}
	var made []string
	for i := range 5 {
		made = append(made, create(t, s, fmt.Sprintf("k%d", i)).CallID)
		tick()
	}
	// Newest first.
	all, err := s.ListCalls(t.Context(), store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{made[4], made[3], made[2], made[1], made[0]}
	if !reflect.DeepEqual(ids(all), want) {
		t.Fatalf("ListCalls = %v, want newest first %v", ids(all), want)
	}
	limited, err := s.ListCalls(t.Context(), store.ListFilter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(limited), want[:2]) {
		t.Fatalf("ListCalls limit 2 = %v, want %v", ids(limited), want[:2])
	}

	// Claim the two oldest and finish one.
	got, err := s.ClaimNext(t.Context(), "w1", longLease, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("ClaimNext = %v, %v", ids(got), err)
	}
	if _, err := s.Succeed(t.Context(), completion(got[0])); err != nil {
		t.Fatal(err)
	}
	for status, want := range map[store.Status][]string{
		store.StatusSucceeded: {made[0]},
		store.StatusRunning:   {made[1]},
		store.StatusPending:   {made[4], made[3], made[2]},
		store.StatusFailed:    {},
	} {
		got, err := s.ListCalls(t.Context(), store.ListFilter{Status: status})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids(got), want) {
			t.Fatalf("ListCalls(%s) = %v, want %v", status, ids(got), want)
		}
		for _, c := range got {
			if c.Status != status {
				t.Fatalf("ListCalls(%s) returned a %s call", status, c.Status)
			}
		}
	}
	pend, err := s.ListCalls(t.Context(), store.ListFilter{Status: store.StatusPending, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(pend), []string{made[4]}) {
		t.Fatalf("ListCalls(pending, 1) = %v, want %v", ids(pend), made[4])
	}
	// Rows carry their columns.
	for _, c := range all {
		if !jsonEq(t, c.ArgsJSON, json.RawMessage(`{"amount":100}`)) || c.Fingerprint == "" || c.IdemKey == "" {
			t.Fatalf("listed call lacks columns: %+v", c)
		}
	}
}

func testListEffects(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if effs, err := s.ListEffects(t.Context(), 0); err != nil || len(effs) != 0 {
		t.Fatalf("ListEffects on empty store = %v, %v", effs, err)
	}
	var made []string
	for i := range 3 {
		c := createAndClaim(t, s, fmt.Sprintf("k%d", i), "w1", longLease)
		comp := completion(c)
		if i == 1 {
			comp.Effect.Tool, comp.Effect.Amount = "send_email", nil
		}
		if _, err := s.Succeed(t.Context(), comp); err != nil {
			t.Fatal(err)
		}
		made = append(made, comp.Effect.EffectID)
		tick()
	}
	effs := effects(t, s)
	var got []string
	for _, e := range effs {
		got = append(got, e.EffectID)
	}
	if want := []string{made[2], made[1], made[0]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEffects = %v, want newest first %v", got, want)
	}
	if effs[1].Tool != "send_email" || effs[1].Amount != nil {
		t.Fatalf("email effect = %+v, want tool send_email and no amount", effs[1])
	}
	// EffectOf finds each call's row; a call without one is ErrNotFound.
	for _, e := range effs {
		got, err := s.EffectOf(t.Context(), e.CallID)
		if err != nil || got.EffectID != e.EffectID || got.Tool != e.Tool || got.CreatedAt != e.CreatedAt {
			t.Fatalf("EffectOf(%s) = %+v, %v; want %+v", e.CallID, got, err, e)
		}
	}
	_, err := s.EffectOf(t.Context(), create(t, s, "no-effect").CallID)
	wantErr(t, "EffectOf a call without an effect", err, store.ErrNotFound)
	lim, err := s.ListEffects(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(lim) != 2 || lim[0].EffectID != made[2] || lim[1].EffectID != made[1] {
		t.Fatalf("ListEffects(2) = %+v", lim)
	}
}

func testAudit(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if evs, err := s.Audit(t.Context(), "", 0); err != nil || len(evs) != 0 {
		t.Fatalf("Audit on empty store = %v, %v", evs, err)
	}
	a := createAndClaim(t, s, "a", "w1", longLease)
	b := createAndClaim(t, s, "b", "w2", longLease)
	if _, err := s.Succeed(t.Context(), completion(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fail(t.Context(), failure(b, false)); err != nil {
		t.Fatal(err)
	}

	all := audit(t, s, "")
	wantAll := []string{
		store.EventCreated, store.EventClaimed, // a
		store.EventCreated, store.EventClaimed, // b
		store.EventSucceeded, store.EventFailed,
	}
	if !reflect.DeepEqual(events(all), wantAll) {
		t.Fatalf("Audit(all) = %v, want %v", events(all), wantAll)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID || all[i].TS < all[i-1].TS {
			t.Fatalf("audit out of order at %d: %+v then %+v", i, all[i-1], all[i])
		}
	}
	for _, e := range all {
		if e.TS <= 0 || e.CallID == "" {
			t.Fatalf("audit row lacks ts or call id: %+v", e)
		}
	}

	onlyA := audit(t, s, a.CallID)
	if want := []string{store.EventCreated, store.EventClaimed, store.EventSucceeded}; !reflect.DeepEqual(events(onlyA), want) {
		t.Fatalf("Audit(a) = %v, want %v", events(onlyA), want)
	}
	for _, e := range onlyA {
		if e.CallID != a.CallID {
			t.Fatalf("Audit(a) returned a row of %s", e.CallID)
		}
	}
	if onlyA[1].Detail != "w1" {
		t.Fatalf("claimed detail = %q, want the owner w1", onlyA[1].Detail)
	}

	// With a limit: the newest rows, still oldest first.
	last2, err := s.Audit(t.Context(), "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(last2, all[len(all)-2:]) {
		t.Fatalf("Audit(all, 2) = %+v, want %+v", last2, all[len(all)-2:])
	}
	lastB, err := s.Audit(t.Context(), b.CallID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{store.EventClaimed, store.EventFailed}; !reflect.DeepEqual(events(lastB), want) {
		t.Fatalf("Audit(b, 2) = %v, want %v", events(lastB), want)
	}
	if evs, err := s.Audit(t.Context(), newCallID(t), 0); err != nil || len(evs) != 0 {
		t.Fatalf("Audit of unknown call = %v, %v; want empty", evs, err)
	}
}

func testStatsAttemptsDupes(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	st := stats(t, s)
	if st.Calls != 0 || st.Effects != 0 {
		t.Fatalf("empty stats = %+v", st)
	}
	if a, err := s.Attempts(t.Context()); err != nil || len(a) != 0 {
		t.Fatalf("Attempts on empty store = %v, %v", a, err)
	}

	// running (1), succeeded with effect (1), failed (1), succeeded after
	// a takeover (2), and last a pending call (0), created last so that
	// no claim above picks it up.
	createAndClaim(t, s, "running", "w1", longLease)
	ok := createAndClaim(t, s, "ok", "w1", longLease)
	if _, err := s.Succeed(t.Context(), completion(ok)); err != nil {
		t.Fatal(err)
	}
	bad := createAndClaim(t, s, "bad", "w1", longLease)
	if _, err := s.Fail(t.Context(), failure(bad, false)); err != nil {
		t.Fatal(err)
	}
	slow := createAndClaim(t, s, "slow", "w1", shortLease)
	var again store.Call
	eventually(t, "the short lease to be taken over", func() bool {
		got, err := s.ClaimNext(t.Context(), "w2", longLease, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			again = got[0]
		}
		return len(got) == 1
	})
	if again.CallID != slow.CallID {
		t.Fatalf("took over %s, want %s", again.CallID, slow.CallID)
	}
	if _, err := s.Succeed(t.Context(), completion(again)); err != nil {
		t.Fatal(err)
	}
	create(t, s, "pending")

	st = stats(t, s)
	if st.Calls != 5 || st.Effects != 2 {
		t.Fatalf("stats = %+v, want 5 calls 2 effects", st)
	}
	for status, want := range map[store.Status]int64{
		store.StatusPending: 1, store.StatusRunning: 1, store.StatusSucceeded: 2, store.StatusFailed: 1,
	} {
		if got := st.ByStatus[status]; got != want {
			t.Fatalf("by_status[%s] = %d, want %d (%+v)", status, got, want, st.ByStatus)
		}
	}

	att, err := s.Attempts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []store.AttemptBucket{{Attempt: 0, Calls: 1}, {Attempt: 1, Calls: 3}, {Attempt: 2, Calls: 1}}
	if !reflect.DeepEqual(att, want) {
		t.Fatalf("Attempts = %+v, want %+v", att, want)
	}
	if !sort.SliceIsSorted(att, func(i, j int) bool { return att[i].Attempt < att[j].Attempt }) {
		t.Fatalf("Attempts not ascending: %+v", att)
	}

	d, err := s.Dupes(t.Context())
	if err != nil || len(d) != 0 {
		t.Fatalf("Dupes = %+v, %v; want none (effects.call_id is UNIQUE)", d, err)
	}
}

func testPing(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ping with a canceled context: err = %v, want context.Canceled", err)
	}
}

func testReadOnly(t *testing.T, su suite) {
	db, rw := su.fresh(t)
	ro := su.openOn(t, db, store.Options{ReadOnly: true})
	c := createAndClaim(t, rw, "k1", "w1", longLease)

	// Reads work and see the writer's commits.
	if g, err := ro.GetAny(t.Context(), c.CallID); err != nil || g.Status != store.StatusRunning {
		t.Fatalf("read-only Get = %+v, %v", g, err)
	}
	if _, err := ro.GetByKey(t.Context(), store.DefaultPrincipal, "k1"); err != nil {
		t.Fatalf("read-only GetByKey: %v", err)
	}
	if st, err := ro.Stats(t.Context()); err != nil || st.Calls != 1 {
		t.Fatalf("read-only Stats = %+v, %v", st, err)
	}
	if err := ro.Ping(t.Context()); err != nil {
		t.Fatalf("read-only Ping: %v", err)
	}
	for name, read := range map[string]func() error{
		"ListCalls":   func() error { _, err := ro.ListCalls(t.Context(), store.ListFilter{}); return err },
		"ListEffects": func() error { _, err := ro.ListEffects(t.Context(), 0); return err },
		"Audit":       func() error { _, err := ro.Audit(t.Context(), "", 0); return err },
		"Dupes":       func() error { _, err := ro.Dupes(t.Context()); return err },
		"Attempts":    func() error { _, err := ro.Attempts(t.Context()); return err },
		"Queue":       func() error { _, err := ro.Queue(t.Context()); return err },
	} {
		if err := read(); err != nil {
			t.Fatalf("read-only %s: %v", name, err)
		}
	}

	// Every write is refused with ErrReadOnly.
	for name, write := range map[string]func() error{
		"CreateOrGet": func() error { _, _, err := ro.CreateOrGet(t.Context(), newCall(t, "k2", "fp")); return err },
		"ClaimNext":   func() error { _, err := ro.ClaimNext(t.Context(), "w2", longLease, 1); return err },
		"Succeed":     func() error { _, err := ro.Succeed(t.Context(), completion(c)); return err },
		"Fail":        func() error { _, err := ro.Fail(t.Context(), failure(c, true)); return err },
		"RecoverExpired": func() error {
			_, err := ro.RecoverExpired(t.Context())
			return err
		},
		"Release": func() error {
			return ro.Release(t.Context(), store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, "x")
		},
		"ExtendLease": func() error {
			return ro.ExtendLease(t.Context(), store.Lease{CallID: c.CallID, Owner: "w1", Attempt: c.Attempt}, longLease)
		},
	} {
		wantErr(t, "read-only "+name, write(), store.ErrReadOnly)
	}

	// Nothing changed.
	if st := stats(t, rw); st.Calls != 1 || st.Effects != 0 {
		t.Fatalf("stats after refused writes = %+v", st)
	}
	if g := get(t, rw, c.CallID); g.Status != store.StatusRunning || *g.Owner != "w1" {
		t.Fatalf("refused writes changed the call: %+v", g)
	}

	// And the writer still works after the reader was used.
	if _, err := rw.Succeed(t.Context(), completion(c)); err != nil {
		t.Fatalf("writer after read-only use: %v", err)
	}
	if g, err := ro.GetAny(t.Context(), c.CallID); err != nil || g.Status != store.StatusSucceeded {
		t.Fatalf("reader does not see the later commit: %+v, %v", g, err)
	}
}
