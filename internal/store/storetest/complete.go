package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

func testSucceed(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("WithEffect", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		comp := completion(c)
		done, err := s.Succeed(t.Context(), comp)
		if err != nil {
			t.Fatal(err)
		}
		if done.Status != store.StatusSucceeded || !jsonEq(t, done.ResultJSON, comp.Result) {
			t.Fatalf("succeeded call = %+v", done)
		}
		if done.EffectID == nil || *done.EffectID != comp.Effect.EffectID {
			t.Fatalf("effect_id = %v, want %s", done.EffectID, comp.Effect.EffectID)
		}
		if done.Owner != nil || done.LeaseUntil != nil || done.ErrorJSON != nil || done.Attempt != 1 {
			t.Fatalf("succeeded call keeps lease/owner/error or lost attempt: %+v", done)
		}
		if g := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, done)) {
			t.Fatalf("stored %+v, Succeed returned %+v", g, done)
		}
		effs := effects(t, s)
		if len(effs) != 1 || effs[0].EffectID != comp.Effect.EffectID || effs[0].CallID != c.CallID ||
			effs[0].Tool != "charge" || effs[0].Amount == nil || *effs[0].Amount != 100 || effs[0].CreatedAt <= 0 {
			t.Fatalf("effects = %+v, want the one charge effect", effs)
		}
		evs := audit(t, s, c.CallID)
		if last := evs[len(evs)-1]; last.Event != store.EventSucceeded || last.Detail != comp.Effect.EffectID {
			t.Fatalf("last audit = %+v, want succeeded with the effect id", last)
		}
	})

	t.Run("WithoutEffect", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		comp := completion(c)
		comp.Effect = nil
		comp.Result = json.RawMessage(`{"slept":0.1}`)
		done, err := s.Succeed(t.Context(), comp)
		if err != nil {
			t.Fatal(err)
		}
		if done.Status != store.StatusSucceeded || done.EffectID != nil || !jsonEq(t, done.ResultJSON, comp.Result) {
			t.Fatalf("succeeded call = %+v, want no effect id", done)
		}
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
		evs := audit(t, s, c.CallID)
		if last := evs[len(evs)-1]; last.Event != store.EventSucceeded || last.Detail != "no effect" {
			t.Fatalf("last audit = %+v, want succeeded with detail \"no effect\"", last)
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		s := open(t)
		stale, fresh := takeover(t, s)
		auditBefore := len(audit(t, s, stale.CallID))

		// The old owner wakes up from its pause and tries to commit.
		_, err := s.Succeed(t.Context(), completion(stale))
		wantErr(t, "stale Succeed", err, store.ErrFenced)
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("stale Succeed left effects %+v", effs)
		}
		if g := get(t, s, stale.CallID); g.Status != store.StatusRunning || *g.Owner != "new" || g.Attempt != 2 {
			t.Fatalf("stale Succeed changed the call: %+v", g)
		}
		evs := audit(t, s, stale.CallID)
		if len(evs) != auditBefore+1 || evs[len(evs)-1].Event != store.EventFenced {
			t.Fatalf("audit = %v, want one fenced row added", events(evs))
		}

		// A stale Fail is fenced the same way.
		_, err = s.Fail(t.Context(), failure(stale, false))
		wantErr(t, "stale Fail", err, store.ErrFenced)
		if g := get(t, s, stale.CallID); g.Status != store.StatusRunning {
			t.Fatalf("stale Fail changed the call: %+v", g)
		}

		// Same owner name but the old attempt number is stale too: the
		// token is (owner, attempt), not owner alone.
		sameOwner := completion(fresh)
		sameOwner.Attempt = stale.Attempt
		_, err = s.Succeed(t.Context(), sameOwner)
		wantErr(t, "Succeed with the current owner but an old attempt", err, store.ErrFenced)

		// The current owner commits.
		done, err := s.Succeed(t.Context(), completion(fresh))
		if err != nil {
			t.Fatalf("current owner's Succeed: %v", err)
		}
		if done.Status != store.StatusSucceeded || done.Attempt != 2 {
			t.Fatalf("call = %+v, want succeeded at attempt 2", done)
		}
		if effs := effects(t, s); len(effs) != 1 {
			t.Fatalf("effects = %d, want exactly 1", len(effs))
		}
		if n := countEvent(audit(t, s, stale.CallID), store.EventFenced); n != 3 {
			t.Fatalf("fenced events = %d, want 3", n)
		}
	})

	t.Run("Twice", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		first, err := s.Succeed(t.Context(), completion(c))
		if err != nil {
			t.Fatal(err)
		}
		second := completion(c)
		second.Result = json.RawMessage(`{"charged":999}`)
		_, err = s.Succeed(t.Context(), second)
		wantErr(t, "second Succeed", err, store.ErrFenced)
		if g := get(t, s, c.CallID); !jsonEq(t, g.ResultJSON, first.ResultJSON) {
			t.Fatalf("second Succeed overwrote result: %s", g.ResultJSON)
		}
		if effs := effects(t, s); len(effs) != 1 {
			t.Fatalf("effects = %d, want 1", len(effs))
		}
		_, err = s.Fail(t.Context(), failure(c, true))
		wantErr(t, "Fail after Succeed", err, store.ErrFenced)
		if g := get(t, s, c.CallID); g.Status != store.StatusSucceeded {
			t.Fatalf("Fail after Succeed changed status to %s", g.Status)
		}
	})

	t.Run("PendingCallIsFenced", func(t *testing.T) {
		s := open(t)
		c := create(t, s, "k1")
		owner := "w1"
		c.Owner, c.Attempt = &owner, 1
		_, err := s.Succeed(t.Context(), completion(c))
		wantErr(t, "Succeed on an unclaimed call", err, store.ErrFenced)
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
	})

	t.Run("UnknownCall", func(t *testing.T) {
		s := open(t)
		owner := "w1"
		ghost := store.Call{CallID: newCallID(t), Owner: &owner, Attempt: 1, Tool: "charge"}
		_, err := s.Succeed(t.Context(), completion(ghost))
		wantErr(t, "Succeed of an unknown call", err, store.ErrNotFound)
		_, err = s.Fail(t.Context(), failure(ghost, true))
		wantErr(t, "Fail of an unknown call", err, store.ErrNotFound)
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
		if evs := audit(t, s, ""); len(evs) != 0 {
			t.Fatalf("audit = %v, want nothing for an unknown call", events(evs))
		}
	})

	t.Run("InvalidEffectWritesNothing", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		for name, mutate := range map[string]func(*store.Effect){
			"no effect id":      func(e *store.Effect) { e.EffectID = "" },
			"another call's id": func(e *store.Effect) { e.CallID = newCallID(t) },
		} {
			comp := completion(c)
			mutate(comp.Effect)
			if _, err := s.Succeed(t.Context(), comp); err == nil || store.IsSentinel(err) {
				t.Fatalf("Succeed with %s: err = %v, want a plain error (a bug of the caller)", name, err)
			}
		}
		if g := get(t, s, c.CallID); g.Status != store.StatusRunning || g.Attempt != 1 || *g.Owner != "w1" {
			t.Fatalf("refused Succeed changed the call: %+v", g)
		}
		if effs := effects(t, s); len(effs) != 0 {
			t.Fatalf("effects = %+v, want none", effs)
		}
		if n := countEvent(audit(t, s, c.CallID), store.EventSucceeded); n != 0 {
			t.Fatalf("succeeded events = %d, want 0", n)
		}
	})
}

func testFail(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	c := createAndClaim(t, s, "k1", "w1", longLease)
	f := failure(c, false)
	done, err := s.Fail(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != store.StatusFailed || !jsonEq(t, done.ErrorJSON, f.Error) || done.ResultJSON != nil {
		t.Fatalf("failed call = %+v", done)
	}
	if done.Owner != nil || done.LeaseUntil != nil || done.EffectID != nil || done.Attempt != 1 {
		t.Fatalf("failed call keeps lease/owner or has an effect: %+v", done)
	}
	if g := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, done)) {
		t.Fatalf("stored %+v, Fail returned %+v", g, done)
	}
	if effs := effects(t, s); len(effs) != 0 {
		t.Fatalf("Fail wrote effects %+v", effs)
	}
	want := []string{store.EventCreated, store.EventClaimed, store.EventFailed}
	if got := events(audit(t, s, c.CallID)); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	// Final: a second Fail is fenced and changes nothing.
	_, err = s.Fail(t.Context(), failure(c, true))
	wantErr(t, "second Fail", err, store.ErrFenced)
	if g := get(t, s, c.CallID); !jsonEq(t, g.ErrorJSON, f.Error) {
		t.Fatalf("second Fail overwrote the error: %s", g.ErrorJSON)
	}
}

func testEffectUniqueness(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("OnePerCallUnderRace", func(t *testing.T) {
		// Several workers finish the same attempt at once (a duplicated
		// delivery of one completion): exactly one commits.
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		const n = 8
		var (
			wg   sync.WaitGroup
			errs = make([]error, n)
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Succeed(t.Context(), completion(c))
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrFenced):
			default:
				t.Fatalf("Succeed %d: %v", i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d completions committed, want 1", ok)
		}
		if effs := effects(t, s); len(effs) != 1 {
			t.Fatalf("effects = %d, want 1", len(effs))
		}
		if d, err := s.Dupes(t.Context()); err != nil || len(d) != 0 {
			t.Fatalf("Dupes = %+v, %v; want none", d, err)
		}
	})

	t.Run("EffectIDIsUnique", func(t *testing.T) {
		// effect_id is the downstream idempotency key: two calls can never
		// share one. The second commit is refused as a whole.
		s := open(t)
		a := createAndClaim(t, s, "a", "w1", longLease)
		if _, err := s.Succeed(t.Context(), completion(a)); err != nil {
			t.Fatal(err)
		}
		b := createAndClaim(t, s, "b", "w1", longLease)
		comp := completion(b)
		comp.Effect.EffectID = effectIDFor(a.CallID)
		_, err := s.Succeed(t.Context(), comp)
		wantErr(t, "Succeed reusing another call's effect id", err, store.ErrRefused)
		var refused *store.RefusedError
		if !errors.As(err, &refused) || refused.Code == "" || strings.Contains(refused.Code, a.CallID[2:]) {
			t.Fatalf("refusal = %#v, want a *store.RefusedError with a data-free code", err)
		}
		if effs := effects(t, s); len(effs) != 1 || effs[0].CallID != a.CallID {
			t.Fatalf("effects = %+v, want only a's", effs)
		}
		if g := get(t, s, b.CallID); g.Status != store.StatusRunning || g.EffectID != nil {
			t.Fatalf("refused commit changed b: %+v", g)
		}
	})
}

// testEveryColumnReturned: ClaimNext, ScheduleRetry, Fail and Succeed
// return the call exactly as stored with every optional column set (a
// principal, client id and seq, the MCP door, a notify URL, a trace
// parent, a cancel request, a not-before time, an unknown outcome, an
// error, a result, an effect), not only the plain call of the other tests:
// a backend builds these answers from its write statements' rows, column
// by column.
func testEveryColumnReturned(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	same := func(what string, got store.Call) {
		t.Helper()
		if stored := get(t, s, got.CallID); !reflect.DeepEqual(normalize(t, stored), normalize(t, got)) {
			t.Fatalf("stored    %+v\n%s returned %+v", stored, what, got)
		}
	}
	n := newCall(t, "every-column", "fp-every-column")
	clientID, seq, notify := "client-7", int64(42), "https://hooks.example/done"
	n.Principal, n.ClientID, n.Seq, n.NotifyURL, n.Via = "tenant-a", &clientID, &seq, &notify, store.ViaMCP
	n.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c, out, err := s.CreateOrGet(ctx, n)
	if err != nil || out != store.Created {
		t.Fatalf("CreateOrGet = %v, %v", out, err)
	}
	first := claimOnly(t, s, "w1", longLease, c.CallID)
	same("ClaimNext", first)
	// A cancel request reaches the running call; the attempt's outcome is
	// unknown, and the tool allows a server-side retry.
	if _, co, err := s.Cancel(ctx, c.CallID, json.RawMessage(`{"code":"canceled","message":"x","retryable":false}`), nil); err != nil ||
		co != store.CancelRequested {
		t.Fatalf("Cancel of the running call = %v, %v; want cancel requested", co, err)
	}
	unknown := failure(first, true)
	unknown.Error = json.RawMessage(`{"code":"outcome_unknown","message":"no answer","retryable":true,"unknown":"no_response"}`)
	retried, err := s.ScheduleRetry(ctx, unknown, 0)
	if err != nil {
		t.Fatal(err)
	}
	if retried.Status != store.StatusPending || retried.NotBefore == nil || !retried.CancelRequested ||
		retried.Unknown == "" || retried.ErrorJSON == nil {
		t.Fatalf("ScheduleRetry returned %+v; want pending with not_before, the cancel request, the unknown outcome and the error", retried)
	}
	same("ScheduleRetry", retried)
	second := claimOnly(t, s, "w2", longLease, c.CallID)
	same("ClaimNext after a retry", second)
	failed, err := s.Fail(ctx, failure(second, true))
	if err != nil {
		t.Fatal(err)
	}
	same("Fail", failed)

	// Succeed, on a second call of the same kind, with its effect.
	n2 := n
	n2.CallID, n2.IdemKey = newCallID(t), "every-column-2"
	c2, out, err := s.CreateOrGet(ctx, n2)
	if err != nil || out != store.Created {
		t.Fatalf("CreateOrGet = %v, %v", out, err)
	}
	claimed := claimOnly(t, s, "w3", longLease, c2.CallID)
	same("ClaimNext", claimed)
	done, err := s.Succeed(ctx, completion(claimed))
	if err != nil {
		t.Fatal(err)
	}
	if done.EffectID == nil || done.NotifyURL == nil || done.ClientID == nil || done.Seq == nil || done.TraceParent == "" ||
		done.Via != store.ViaMCP || done.Principal != "tenant-a" {
		t.Fatalf("Succeed returned %+v; want every column the call was created with", done)
	}
	same("Succeed", done)
}
