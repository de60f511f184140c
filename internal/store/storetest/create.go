package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

func testCreateOrGet(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("Created", func(t *testing.T) {
		s := open(t)
		clientID, seq := "demo", int64(7)
		n := newCall(t, "k1", "fp1")
		n.ClientID, n.Seq = &clientID, &seq
		c, out, err := s.CreateOrGet(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		if out != store.Created {
			t.Fatalf("outcome = %v, want created", out)
		}
		if c.CallID != n.CallID || c.IdemKey != "k1" || c.Fingerprint != "fp1" || c.Tool != "charge" {
			t.Fatalf("call = %+v, want the fields of %+v", c, n)
		}
		if c.Status != store.StatusPending || c.Attempt != 0 || c.Owner != nil || c.LeaseUntil != nil {
			t.Fatalf("new call = %+v, want pending, attempt 0, no owner or lease", c)
		}
		if c.ClientID == nil || *c.ClientID != "demo" || c.Seq == nil || *c.Seq != 7 {
			t.Fatalf("client_id/seq = %v/%v, want demo/7", c.ClientID, c.Seq)
		}
		if !jsonEq(t, c.ArgsJSON, n.ArgsJSON) {
			t.Fatalf("args = %s, want %s", c.ArgsJSON, n.ArgsJSON)
		}
		if c.ResultJSON != nil || c.ErrorJSON != nil || c.EffectID != nil {
			t.Fatalf("new call has result/error/effect: %+v", c)
		}
		if c.CreatedAt <= 0 || c.UpdatedAt < c.CreatedAt {
			t.Fatalf("created_at=%v updated_at=%v", c.CreatedAt, c.UpdatedAt)
		}
		// The stored row is what was returned.
		if g := get(t, s, c.CallID); !reflect.DeepEqual(normalize(t, g), normalize(t, c)) {
			t.Fatalf("Get = %+v, CreateOrGet returned %+v", g, c)
		}
		evs := audit(t, s, c.CallID)
		if len(evs) != 1 || evs[0].Event != store.EventCreated || evs[0].Detail != "charge" || evs[0].CallID != c.CallID {
			t.Fatalf("audit = %+v, want one created event with detail charge", evs)
		}
	})

	t.Run("NilClientIDAndArgs", func(t *testing.T) {
		s := open(t)
		n := newCall(t, "k1", "fp1")
		n.ArgsJSON = json.RawMessage(`{}`)
		c, _, err := s.CreateOrGet(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientID != nil || c.Seq != nil {
			t.Fatalf("client_id/seq = %v/%v, want nil", c.ClientID, c.Seq)
		}
		if !jsonEq(t, c.ArgsJSON, json.RawMessage(`{}`)) {
			t.Fatalf("args = %s, want {}", c.ArgsJSON)
		}
	})

	// Via: the door is stored as given and read back everywhere; an empty
	// one is the HTTP API's.
	t.Run("Via", func(t *testing.T) {
		s := open(t)
		viaMCP := newCall(t, "k-mcp", "fp1")
		viaMCP.Via = store.ViaMCP
		c, _, err := s.CreateOrGet(t.Context(), viaMCP)
		if err != nil || c.Via != store.ViaMCP {
			t.Fatalf("CreateOrGet via mcp = %q, %v; want %q", c.Via, err, store.ViaMCP)
		}
		if g := get(t, s, c.CallID); g.Via != store.ViaMCP {
			t.Fatalf("Get via = %q, want %q", g.Via, store.ViaMCP)
		}
		d, _, err := s.CreateOrGet(t.Context(), newCall(t, "k-http", "fp1"))
		if err != nil || d.Via != store.ViaHTTP {
			t.Fatalf("CreateOrGet without a door = %q, %v; want %q", d.Via, err, store.ViaHTTP)
		}
		byKey, err := s.GetByKey(t.Context(), d.Principal, "k-mcp")
		if err != nil || byKey.Via != store.ViaMCP {
			t.Fatalf("GetByKey via = %q, %v; want %q", byKey.Via, err, store.ViaMCP)
		}
	})

	// TraceParent: the creating request's trace context is stored as
	// given and comes back on every read and on the claim, where an
	// attempt picks it up; on both create paths (a dedup rule takes the
	// transactional one); none stays none.
	t.Run("TraceParent", func(t *testing.T) {
		s := open(t)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traced := newCall(t, "k-traced", "fp1")
		traced.TraceParent = tp
		c, _, err := s.CreateOrGet(t.Context(), traced)
		if err != nil || c.TraceParent != tp {
			t.Fatalf("CreateOrGet trace parent = %q, %v; want %q", c.TraceParent, err, tp)
		}
		deduped := newCall(t, "k-traced-dedup", "fp2")
		deduped.TraceParent, deduped.Intent, deduped.DedupWindow = tp, "intent-tp", time.Hour
		d, _, err := s.CreateOrGet(t.Context(), deduped)
		if err != nil || d.TraceParent != tp {
			t.Fatalf("CreateOrGet (dedup path) trace parent = %q, %v; want %q", d.TraceParent, err, tp)
		}
		plain, _, err := s.CreateOrGet(t.Context(), newCall(t, "k-untraced", "fp3"))
		if err != nil || plain.TraceParent != "" {
			t.Fatalf("CreateOrGet without a trace parent = %q, %v; want none", plain.TraceParent, err)
		}
		if g := get(t, s, c.CallID); g.TraceParent != tp {
			t.Fatalf("Get trace parent = %q, want %q", g.TraceParent, tp)
		}
		if g, err := s.GetByKey(t.Context(), c.Principal, "k-traced-dedup"); err != nil || g.TraceParent != tp {
			t.Fatalf("GetByKey trace parent = %q, %v; want %q", g.TraceParent, err, tp)
		}
		claimed, err := s.ClaimNext(t.Context(), "owner-tp", time.Minute, 3)
		if err != nil || len(claimed) != 3 {
			t.Fatalf("ClaimNext = %v, %v; want the 3 calls", ids(claimed), err)
		}
		for _, cl := range claimed {
			want := tp
			if cl.CallID == plain.CallID {
				want = ""
			}
			if cl.TraceParent != want {
				t.Fatalf("claimed %s trace parent = %q, want %q", cl.CallID, cl.TraceParent, want)
			}
		}
	})

	t.Run("Existing", func(t *testing.T) {
		s := open(t)
		first := create(t, s, "k1")
		// A retry of the same request carries a fresh call id the store
		// must ignore: one key is one logical call.
		again := newCall(t, "k1", "fp-k1")
		c, out, err := s.CreateOrGet(t.Context(), again)
		if err != nil {
			t.Fatal(err)
		}
		if out != store.Existing || c.CallID != first.CallID {
			t.Fatalf("got %s (%v), want existing %s", c.CallID, out, first.CallID)
		}
		if st := stats(t, s); st.Calls != 1 {
			t.Fatalf("calls = %d, want 1", st.Calls)
		}
		if n := countEvent(audit(t, s, ""), store.EventCreated); n != 1 {
			t.Fatalf("created events = %d, want 1", n)
		}
		if _, err := s.GetAny(t.Context(), again.CallID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the retry's own call id exists (err=%v)", err)
		}
	})

	t.Run("ConflictWritesNothing", func(t *testing.T) {
		s := open(t)
		first := create(t, s, "k1")
		auditBefore := audit(t, s, "")
		bad := newCall(t, "k1", "a-different-fingerprint")
		bad.Tool = "send_email"
		_, _, err := s.CreateOrGet(t.Context(), bad)
		wantErr(t, "CreateOrGet with another fingerprint", err, store.ErrConflict)
		if st := stats(t, s); st.Calls != 1 {
			t.Fatalf("calls = %d, want 1", st.Calls)
		}
		if after := audit(t, s, ""); len(after) != len(auditBefore) {
			t.Fatalf("audit grew on conflict: %v -> %v", events(auditBefore), events(after))
		}
		got := get(t, s, first.CallID)
		if !reflect.DeepEqual(normalize(t, got), normalize(t, first)) {
			t.Fatalf("conflict changed the call:\n%+v\n%+v", first, got)
		}
		if _, err := s.GetAny(t.Context(), bad.CallID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("conflicting call id exists (err=%v)", err)
		}
	})

	t.Run("CallIDOfAnotherKeyRefused", func(t *testing.T) {
		// The caller generates call ids; one reused for another key is
		// refused by the database for good and writes nothing.
		s := open(t)
		first := create(t, s, "k1")
		n := newCall(t, "k2", "fp-k2")
		n.CallID = first.CallID
		_, _, err := s.CreateOrGet(t.Context(), n)
		wantErr(t, "CreateOrGet reusing another key's call id", err, store.ErrRefused)
		if _, err := s.GetByKey(t.Context(), store.DefaultPrincipal, "k2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused key exists (err=%v)", err)
		}
		if st := stats(t, s); st.Calls != 1 {
			t.Fatalf("calls = %d, want 1", st.Calls)
		}
		if n := countEvent(audit(t, s, ""), store.EventCreated); n != 1 {
			t.Fatalf("created events = %d, want 1", n)
		}
	})

	t.Run("ConflictOnFinalCall", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		if _, err := s.Succeed(t.Context(), completion(c)); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "other"))
		wantErr(t, "CreateOrGet with another fingerprint on a succeeded call", err, store.ErrConflict)
	})
}

func testRetryReset(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("RetryableFailureResets", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		if _, err := s.Fail(t.Context(), failure(c, true)); err != nil {
			t.Fatal(err)
		}
		r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
		if err != nil {
			t.Fatal(err)
		}
		if out != store.RetryReset || r.CallID != c.CallID {
			t.Fatalf("got %s (%v), want retry_reset of %s", r.CallID, out, c.CallID)
		}
		if r.Status != store.StatusPending || r.ErrorJSON != nil || r.Owner != nil || r.LeaseUntil != nil {
			t.Fatalf("reset call = %+v, want pending with no error, owner or lease", r)
		}
		if r.Attempt != 1 {
			t.Fatalf("attempt = %d, want 1 (attempt counts physical tries, a reset keeps it)", r.Attempt)
		}
		if g := get(t, s, c.CallID); g.Status != store.StatusPending || g.ErrorJSON != nil {
			t.Fatalf("stored call = %+v, want pending without error", g)
		}
		want := []string{store.EventCreated, store.EventClaimed, store.EventFailed, store.EventRetryReset}
		evs := audit(t, s, c.CallID)
		if got := events(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("audit = %v, want %v", got, want)
		}
		if d := evs[3].Detail; d != "after tool_failed: boom" {
			t.Fatalf("retry_reset detail = %q, want \"after tool_failed: boom\"", d)
		}
		// It runs again: the next claim is attempt 2.
		again := claimOnly(t, s, "w2", longLease, c.CallID)
		if again.Attempt != 2 {
			t.Fatalf("attempt after reset = %d, want 2", again.Attempt)
		}
		// A request while it is pending again is plain Existing.
		if _, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1")); err != nil || out != store.Existing {
			t.Fatalf("CreateOrGet on running call = %v, %v; want existing", out, err)
		}
	})

	t.Run("NonRetryableFailureStays", func(t *testing.T) {
		for name, errJSON := range map[string]string{
			"retryable false":   `{"code":"tool_failed","message":"no","retryable":false}`,
			"retryable missing": `{"code":"tool_failed","message":"no"}`,
			"retryable string":  `{"code":"tool_failed","message":"no","retryable":"true"}`,
		} {
			t.Run(name, func(t *testing.T) {
				s := open(t)
				c := createAndClaim(t, s, "k1", "w1", longLease)
				f := failure(c, false)
				f.Error = json.RawMessage(errJSON)
				if _, err := s.Fail(t.Context(), f); err != nil {
					t.Fatal(err)
				}
				r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
				if err != nil {
					t.Fatal(err)
				}
				if out != store.Existing || r.Status != store.StatusFailed || !jsonEq(t, r.ErrorJSON, f.Error) {
					t.Fatalf("got %v %+v, want existing failed call with its error", out, r)
				}
				if n := countEvent(audit(t, s, c.CallID), store.EventRetryReset); n != 0 {
					t.Fatalf("retry_reset events = %d, want 0", n)
				}
			})
		}
	})

	t.Run("SucceededStays", func(t *testing.T) {
		s := open(t)
		c := createAndClaim(t, s, "k1", "w1", longLease)
		done, err := s.Succeed(t.Context(), completion(c))
		if err != nil {
			t.Fatal(err)
		}
		r, out, err := s.CreateOrGet(t.Context(), newCall(t, "k1", "fp-k1"))
		if err != nil {
			t.Fatal(err)
		}
		if out != store.Existing || r.Status != store.StatusSucceeded || !jsonEq(t, r.ResultJSON, done.ResultJSON) {
			t.Fatalf("got %v %+v, want the existing succeeded call", out, r)
		}
	})
}

func testConcurrentCreateOrGet(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	const n = 16
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		calls    = make([]store.Call, n)
		outcomes = make([]store.Outcome, n)
		errs     = make([]error, n)
	)
	for i := range n {
		nc := newCall(t, "same-key", "fp")
		wg.Go(func() {
			<-start // line them all up so they really race
			calls[i], outcomes[i], errs[i] = s.CreateOrGet(t.Context(), nc)
		})
	}
	close(start)
	wg.Wait()

	created := 0
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		seen[calls[i].CallID] = true
		switch outcomes[i] {
		case store.Created:
			created++
		case store.Existing:
		default:
			t.Fatalf("goroutine %d: outcome %v", i, outcomes[i])
		}
	}
	if len(seen) != 1 || created != 1 {
		t.Fatalf("%d distinct call ids, %d created; want 1 and 1", len(seen), created)
	}
	if st := stats(t, s); st.Calls != 1 {
		t.Fatalf("calls = %d, want 1", st.Calls)
	}
	if c := countEvent(audit(t, s, ""), store.EventCreated); c != 1 {
		t.Fatalf("created events = %d, want 1", c)
	}
}
