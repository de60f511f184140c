package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/store"
)

// testBeforeCommitFailpoints: every write's before-commit failpoint
// (docs/failpoints.md), given to the store as its Options.BeforeCommit
// hook, sits inside its transaction on every backend. Armed with
// "1*error", the write fails with the injected error (an ErrUnavailable),
// nothing of it is committed, and the same write then succeeds (the count
// is used up). A write that changes nothing does not reach its point (the
// count is left for the next one). The crash-point matrix
// (internal/failpoint) tests the crash action and the after-commit points,
// which sit above the seam, through real processes.
func testBeforeCommitFailpoints(t *testing.T, su suite) {
	errJSON := json.RawMessage(`{"code":"canceled","message":"canceled by request","retryable":false}`)
	cases := []struct {
		write store.Write
		// setup makes the state the write needs and returns the write.
		setup func(t *testing.T, s store.Store) func() error
	}{
		{store.WriteCreate, func(t *testing.T, s store.Store) func() error {
			old := create(t, s, "old")
			n := newCall(t, "new", "fp-new")
			return func() error {
				// A replay of a known key only reads: not the point.
				if _, out, err := s.CreateOrGet(t.Context(), newCall(t, old.IdemKey, "fp-"+old.IdemKey)); err != nil || out != store.Existing {
					t.Fatalf("replay of a known key: %v, %v", out, err)
				}
				_, _, err := s.CreateOrGet(t.Context(), n)
				return err
			}
		}},
		{store.WriteClaim, func(t *testing.T, s store.Store) func() error {
			create(t, s, "k")
			return func() error { _, err := s.ClaimNext(t.Context(), "w", longLease, 1); return err }
		}},
		{store.WriteLease, func(t *testing.T, s store.Store) func() error {
			c := createAndClaim(t, s, "k", "w", longLease)
			return func() error {
				return s.ExtendLease(t.Context(), store.Lease{CallID: c.CallID, Owner: "w", Attempt: c.Attempt}, 2*longLease)
			}
		}},
		{store.WriteSucceed, func(t *testing.T, s store.Store) func() error {
			c := createAndClaim(t, s, "k", "w", longLease)
			return func() error { _, err := s.Succeed(t.Context(), completion(c)); return err }
		}},
		{store.WriteFail, func(t *testing.T, s store.Store) func() error {
			c := createAndClaim(t, s, "k", "w", longLease)
			return func() error { _, err := s.Fail(t.Context(), failure(c, false)); return err }
		}},
		{store.WriteRetry, func(t *testing.T, s store.Store) func() error {
			c := createAndClaim(t, s, "k", "w", longLease)
			return func() error { _, err := s.ScheduleRetry(t.Context(), failure(c, true), time.Second); return err }
		}},
		{store.WriteRecover, func(t *testing.T, s store.Store) func() error {
			createAndClaim(t, s, "k", "w", shortLease)
			return func() error {
				var err error
				// Until the lease has expired there is nothing to
				// recover, and the point is not reached.
				eventually(t, "the lease to expire", func() bool {
					var ids []string
					ids, err = s.RecoverExpired(t.Context())
					return err != nil || len(ids) > 0
				})
				return err
			}
		}},
		{store.WriteRelease, func(t *testing.T, s store.Store) func() error {
			c := createAndClaim(t, s, "k", "w", longLease)
			return func() error {
				return s.Release(t.Context(), store.Lease{CallID: c.CallID, Owner: "w", Attempt: c.Attempt}, "owner gone")
			}
		}},
		{store.WriteCancel, func(t *testing.T, s store.Store) func() error {
			done := createAndClaim(t, s, "done", "w", longLease)
			if _, err := s.Succeed(t.Context(), completion(done)); err != nil {
				t.Fatal(err)
			}
			c := create(t, s, "k")
			return func() error {
				// A cancel of a final call changes nothing: not the point.
				if _, out, err := s.Cancel(t.Context(), done.CallID, errJSON, nil); err != nil || out != store.AlreadyFinal {
					t.Fatalf("cancel of a final call: %v, %v", out, err)
				}
				_, _, err := s.Cancel(t.Context(), c.CallID, errJSON, nil)
				return err
			}
		}},
	}
	// Every write with failpoints has its case here.
	var covered, want []failpoint.Name
	for _, tc := range cases {
		covered = append(covered, tc.write.BeforeCommit())
	}
	for _, n := range store.Failpoints() {
		if strings.HasSuffix(string(n), "/before-commit") {
			want = append(want, n)
		}
	}
	if !reflect.DeepEqual(covered, want) {
		t.Errorf("before-commit points tested %v, want every one: %v", covered, want)
	}
	for _, tc := range cases {
		t.Run(string(tc.write.BeforeCommit()), func(t *testing.T) {
			// The hook runs whatever registry is armed: none while the
			// setup writes.
			var armed atomic.Pointer[failpoint.Registry]
			s := su.openOn(t, su.f.NewDB(t), store.Options{BeforeCommit: func(w store.Write) error {
				if r := armed.Load(); r != nil {
					return store.FailpointHook(r, store.Write.BeforeCommit)(w)
				}
				return nil
			}})
			write := tc.setup(t, s)
			before := snapshot(t, s)
			r, err := failpoint.Parse(string(tc.write.BeforeCommit())+"=1*error", store.Failpoints())
			if err != nil {
				t.Fatal(err)
			}
			armed.Store(r)
			err = write()
			if !errors.Is(err, failpoint.ErrInjected) || !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("armed write: %v, want the injected error (ErrUnavailable)", err)
			}
			if after := snapshot(t, s); !reflect.DeepEqual(before, after) {
				t.Fatalf("the failed write changed the database:\nbefore %+v\nafter  %+v", before, after)
			}
			if err := write(); err != nil {
				t.Fatalf("the same write once the count is used up: %v", err)
			}
			if after := snapshot(t, s); reflect.DeepEqual(before, after) {
				t.Fatal("the write succeeded but changed nothing")
			}
		})
	}
}

// dbState is everything a write may change.
type dbState struct {
	Calls   []store.Call
	Effects []store.Effect
	Audit   []store.AuditEvent
}

func snapshot(t *testing.T, s store.Store) dbState {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	calls, err := s.ListCalls(ctx, store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		calls[i] = normalize(t, calls[i])
	}
	effs, err := s.ListEffects(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	aud, err := s.Audit(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return dbState{Calls: calls, Effects: effs, Audit: aud}
}
