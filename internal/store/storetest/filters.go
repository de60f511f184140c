package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// testListFilters: ListFilter.KeyPrefix matches the start of the key byte
// for byte (case-sensitive, no LIKE wildcards), Since and Until bound
// created_at (Since inclusive, Until exclusive), and both combine with a
// principal, a status and a cursor.
func testListFilters(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	made := map[string]string{} // key -> call id
	for i, key := range []string{"order-1", "order-2", "ORDER-3", "other", "or%der", "or_x", "order-9"} {
		n := newCall(t, key, "fp")
		if key == "order-9" {
			n.Principal = "someone-else"
		}
		c, _, err := s.CreateOrGet(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		made[key] = c.CallID
		// Fixed creation times, 100 s apart: 1000, 1100, ...
		su.f.Exec(t, db, fmt.Sprintf("UPDATE calls SET created_at = %d WHERE call_id = '%s'", 1000+100*i, c.CallID))
	}
	def := store.DefaultPrincipal
	f64 := func(v float64) *float64 { return &v }
	list := func(f store.ListFilter) []string {
		t.Helper()
		got, err := s.ListCalls(ctx, f)
		if err != nil {
			t.Fatalf("ListCalls(%+v): %v", f, err)
		}
		keys := []string{}
		for _, c := range got {
			keys = append(keys, c.IdemKey)
		}
		return keys
	}
	cases := []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"prefix", store.ListFilter{Principal: &def, KeyPrefix: "order-"}, []string{"order-2", "order-1"}},
		{"prefix is case-sensitive", store.ListFilter{Principal: &def, KeyPrefix: "ORDER"}, []string{"ORDER-3"}},
		{"percent is no wildcard", store.ListFilter{Principal: &def, KeyPrefix: "or%"}, []string{"or%der"}},
		{"underscore is no wildcard", store.ListFilter{Principal: &def, KeyPrefix: "or_"}, []string{"or_x"}},
		{"whole key", store.ListFilter{Principal: &def, KeyPrefix: "other"}, []string{"other"}},
		{"no match", store.ListFilter{Principal: &def, KeyPrefix: "order-1x"}, []string{}},
		{"prefix without principal", store.ListFilter{KeyPrefix: "order-"}, []string{"order-9", "order-2", "order-1"}},
		{"since inclusive", store.ListFilter{Principal: &def, Since: f64(1400)}, []string{"or_x", "or%der"}},
		{"until exclusive", store.ListFilter{Principal: &def, Until: f64(1200)}, []string{"order-2", "order-1"}},
		{"since and until", store.ListFilter{Principal: &def, Since: f64(1100), Until: f64(1300.5)}, []string{"other", "ORDER-3", "order-2"}},
		{"since alone, every principal", store.ListFilter{Since: f64(1500)}, []string{"order-9", "or_x"}},
		{"prefix and time", store.ListFilter{Principal: &def, KeyPrefix: "o", Since: f64(1250)}, []string{"or_x", "or%der", "other"}},
		{"prefix, time and cursor", store.ListFilter{Principal: &def, KeyPrefix: "o", Since: f64(1000),
			After: &store.Cursor{CreatedAt: 1400, CallID: made["or%der"]}}, []string{"other", "order-2", "order-1"}},
		{"prefix and status", store.ListFilter{Principal: &def, KeyPrefix: "order", Status: store.StatusRunning}, []string{}},
	}
	for _, tc := range cases {
		if got := list(tc.f); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: listed %v, want %v", tc.name, got, tc.want)
		}
	}
}

// testRates: Rates counts calls created and calls finished per minute of
// the window, every minute present (zeros included), oldest first, and
// leaves out calls created or finished before the window.
func testRates(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	for _, bad := range []int{-1, store.MaxRateMinutes + 1} {
		if _, err := s.Rates(ctx, bad); err == nil {
			t.Errorf("Rates(%d) = nil error", bad)
		}
	}
	empty, err := s.Rates(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.Buckets) != 6 {
		t.Fatalf("Rates(5) on an empty store: %d buckets, want 6", len(empty.Buckets))
	}
	var calls []store.Call
	for i := range 5 {
		calls = append(calls, create(t, s, fmt.Sprintf("r%d", i)))
	}
	claimed, err := s.ClaimNext(ctx, "w1", longLease, 3)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("ClaimNext = %v, %v", ids(claimed), err)
	}
	if _, err := s.Succeed(ctx, completion(claimed[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fail(ctx, failure(claimed[1], false)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Succeed(ctx, completion(claimed[2])); err != nil {
		t.Fatal(err)
	}
	// One call created, and one finished, two hours ago: outside the window.
	su.f.Exec(t, db, fmt.Sprintf("UPDATE calls SET created_at = created_at - 7200 WHERE call_id = '%s'", calls[4].CallID))
	su.f.Exec(t, db, fmt.Sprintf("UPDATE calls SET updated_at = updated_at - 7200 WHERE call_id = '%s'", claimed[2].CallID))

	r, err := s.Rates(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Buckets) != 6 {
		t.Fatalf("Rates(5): %d buckets, want 6", len(r.Buckets))
	}
	if last := r.Buckets[len(r.Buckets)-1].Minute; last != store.MinuteOf(r.Now) {
		t.Errorf("last bucket starts at %d, want the current minute %d (now %f)", last, store.MinuteOf(r.Now), r.Now)
	}
	var sum store.RateBucket
	for i, b := range r.Buckets {
		if b.Minute%60 != 0 || (i > 0 && b.Minute != r.Buckets[i-1].Minute+60) {
			t.Errorf("bucket %d starts at %d: not the minute after the previous one", i, b.Minute)
		}
		sum.Created += b.Created
		sum.Succeeded += b.Succeeded
		sum.Failed += b.Failed
	}
	if sum.Created != 4 || sum.Succeeded != 1 || sum.Failed != 1 {
		t.Errorf("window counts created %d succeeded %d failed %d, want 4, 1, 1", sum.Created, sum.Succeeded, sum.Failed)
	}
}

// testListByCode: ListFilter.Code keeps the calls whose error has that
// code, a failed call's or a pending call's (the failure a scheduled retry
// waits out), alone or with a status; calls without an error never match.
func testListByCode(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	held := createAndClaim(t, s, "held", "w", longLease)
	comp := failure(held, false)
	comp.Error = json.RawMessage(`{"code":"outcome_unknown","message":"m","retryable":false,"unknown":"abandoned"}`)
	if _, err := s.Fail(ctx, comp); err != nil {
		t.Fatal(err)
	}
	waiting := createAndClaim(t, s, "waiting", "w", longLease)
	comp = failure(waiting, true)
	comp.Error = json.RawMessage(`{"code":"outcome_unknown","message":"m","retryable":true,"unknown":"reset_after_send"}`)
	if _, err := s.ScheduleRetry(ctx, comp, time.Hour); err != nil {
		t.Fatal(err)
	}
	other := createAndClaim(t, s, "other", "w", longLease)
	if _, err := s.Fail(ctx, failure(other, false)); err != nil {
		t.Fatal(err)
	}
	create(t, s, "fresh")
	list := func(f store.ListFilter) []string {
		t.Helper()
		got, err := s.ListCalls(ctx, f)
		if err != nil {
			t.Fatalf("ListCalls(%+v): %v", f, err)
		}
		keys := []string{}
		for _, c := range got {
			keys = append(keys, c.IdemKey)
		}
		slices.Sort(keys)
		return keys
	}
	def := store.DefaultPrincipal
	for _, c := range []struct {
		f    store.ListFilter
		want []string
	}{
		{store.ListFilter{Code: "outcome_unknown"}, []string{"held", "waiting"}},
		{store.ListFilter{Principal: &def, Code: "outcome_unknown", Status: store.StatusFailed}, []string{"held"}},
		{store.ListFilter{Code: "tool_failed"}, []string{"other"}},
		{store.ListFilter{Code: "nothing_like_it"}, []string{}},
	} {
		if got := list(c.f); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ListCalls(code %q, status %q) = %v, want %v", c.f.Code, c.f.Status, got, c.want)
		}
	}
}
