package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// createNotify records a new call whose final states are delivered to url.
func createNotify(t *testing.T, s store.Store, key, url string) store.Call {
	t.Helper()
	n := newCall(t, key, "fp-"+key)
	n.NotifyURL = &url
	c, out, err := s.CreateOrGet(t.Context(), n)
	if err != nil || out != store.Created {
		t.Fatalf("CreateOrGet(%q) = %v, %v; want created", key, out, err)
	}
	return c
}

func deliveries(t *testing.T, s store.Store, callID string) []store.Delivery {
	t.Helper()
	ds, err := s.Deliveries(t.Context(), callID)
	if err != nil {
		t.Fatalf("Deliveries(%s): %v", callID, err)
	}
	return ds
}

func pendingDeliveries(t *testing.T, s store.Store) int64 {
	t.Helper()
	n, err := s.PendingDeliveries(t.Context())
	if err != nil {
		t.Fatalf("PendingDeliveries: %v", err)
	}
	return n
}

// claimDeliveries claims for owner and fails the test on an error.
func claimDeliveries(t *testing.T, s store.Store, owner string, lease time.Duration) []store.Delivery {
	t.Helper()
	ds, err := s.ClaimDeliveries(t.Context(), owner, lease, 10)
	if err != nil {
		t.Fatalf("ClaimDeliveries(%s): %v", owner, err)
	}
	return ds
}

// testDeliveries: the webhook outbox. A call keeps its notify_url; a
// completion or a cancel that names a delivery writes it in its own
// transaction (a fenced one writes none); the claim leases a delivery to
// one sender at a time, counts its attempts and keeps its id; an end is
// fenced on the claim and audits notified or notify_failed; a retry waits
// its delay; a lapsed lease makes the delivery claimable again.
func testDeliveries(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := t.Context()
	const url = "https://hooks.example.com/idemctl"

	plain := createAndClaim(t, s, "plain", "w", longLease)
	if plain.NotifyURL != nil {
		t.Fatalf("a call without notify_url stored %q", *plain.NotifyURL)
	}
	if _, err := s.Succeed(ctx, completion(plain)); err != nil {
		t.Fatal(err)
	}
	if ds := deliveries(t, s, plain.CallID); len(ds) != 0 {
		t.Fatalf("a completion without Notify wrote deliveries %+v", ds)
	}

	c := createNotify(t, s, "hooked", url)
	if got := get(t, s, c.CallID).NotifyURL; got == nil || *got != url {
		t.Fatalf("Get: notify_url %v, want %q", got, url)
	}
	// The same key with another notify_url is the same call: the first
	// notify_url stays.
	again := newCall(t, "hooked", "fp-hooked")
	other := "https://other.example.com/"
	again.NotifyURL = &other
	if got, out, err := s.CreateOrGet(ctx, again); err != nil || out != store.Existing || *got.NotifyURL != url {
		t.Fatalf("replay with another notify_url = %v %v, %v; want existing with %q", out, got.NotifyURL, err, url)
	}
	claimed := claimOnly(t, s, "w", longLease, c.CallID)
	if claimed.NotifyURL == nil || *claimed.NotifyURL != url {
		t.Fatalf("the claim lost notify_url: %v", claimed.NotifyURL)
	}
	stale := completion(claimed)
	stale.Owner = "someone-else"
	stale.Notify = &store.NewDelivery{ID: "wh_00000000000000aa", URL: url}
	if _, err := s.Succeed(ctx, stale); err == nil {
		t.Fatal("a completion under another owner was not fenced")
	}
	if ds := deliveries(t, s, c.CallID); len(ds) != 0 {
		t.Fatalf("a fenced completion wrote deliveries %+v", ds)
	}
	done := completion(claimed)
	done.Notify = &store.NewDelivery{ID: "wh_0000000000000001", URL: url}
	if _, err := s.Succeed(ctx, done); err != nil {
		t.Fatal(err)
	}
	ds := deliveries(t, s, c.CallID)
	if len(ds) != 1 || ds[0].ID != "wh_0000000000000001" || ds[0].URL != url || ds[0].State != store.DeliveryPending || ds[0].Attempts != 0 {
		t.Fatalf("after Succeed with Notify: %+v, want one pending delivery wh_0000000000000001", ds)
	}
	if n := pendingDeliveries(t, s); n != 1 {
		t.Fatalf("PendingDeliveries = %d, want 1", n)
	}

	// One sender at a time: a live lease keeps it from a second claimer.
	got := claimDeliveries(t, s, "a", longLease)
	if len(got) != 1 || got[0].ID != ds[0].ID || got[0].Attempts != 1 || got[0].CallID != c.CallID || got[0].ClaimedAt < got[0].CreatedAt {
		t.Fatalf("first claim = %+v, want the delivery at attempt 1 with its claim time", got)
	}
	if again := claimDeliveries(t, s, "b", longLease); len(again) != 0 {
		t.Fatalf("a leased delivery was claimed again: %+v", again)
	}
	end := store.DeliveryEnd{ID: got[0].ID, CallID: c.CallID, Owner: "b", Attempts: 1, Outcome: store.Delivered}
	wantErr(t, "EndDelivery by another owner", s.EndDelivery(ctx, end), store.ErrNotHeld)

	// A failed attempt: pending again, after its delay; audited.
	end.Owner, end.Outcome, end.Reason = "a", store.DeliveryRetry, "receiver answered 500"
	if err := s.EndDelivery(ctx, end); err != nil {
		t.Fatalf("EndDelivery(retry): %v", err)
	}
	evs := audit(t, s, c.CallID)
	if last := evs[len(evs)-1]; last.Event != store.EventNotifyFailed || !strings.Contains(last.Detail, "receiver answered 500") ||
		!strings.Contains(last.Detail, url) {
		t.Fatalf("audit ends with %+v, want notify_failed naming the url and the reason", last)
	}
	wantErr(t, "EndDelivery twice", s.EndDelivery(ctx, end), store.ErrNotHeld)
	got = claimDeliveries(t, s, "b", longLease)
	if len(got) != 1 || got[0].ID != ds[0].ID || got[0].Attempts != 2 || got[0].LastError != "receiver answered 500" {
		t.Fatalf("claim after a retry with no delay = %+v, want the same id at attempt 2 with its last error", got)
	}
	// The first sender's late end is refused: its attempt is stale.
	wantErr(t, "stale EndDelivery", s.EndDelivery(ctx, end), store.ErrNotHeld)
	end.Owner, end.Attempts, end.Outcome, end.Reason = "b", 2, store.Delivered, ""
	if err := s.EndDelivery(ctx, end); err != nil {
		t.Fatalf("EndDelivery(delivered): %v", err)
	}
	if d := deliveries(t, s, c.CallID)[0]; d.State != store.DeliveryDelivered || d.Owner != nil || d.LeaseUntil != nil {
		t.Fatalf("after delivered: %+v", d)
	}
	if n := countEvent(audit(t, s, c.CallID), store.EventNotified); n != 1 {
		t.Fatalf("%d notified audit rows, want 1", n)
	}
	if left := claimDeliveries(t, s, "a", 0); len(left) != 0 || pendingDeliveries(t, s) != 0 {
		t.Fatalf("a delivered delivery is claimable (%+v) or pending", left)
	}

	// Fail and a cancel of a pending call write theirs; a cancel that only
	// asks a running call to stop writes none; a retry with a delay waits;
	// a lapsed lease is claimable again; give up ends it.
	f := createNotify(t, s, "failing", url)
	fc := failure(claimOnly(t, s, "w", longLease, f.CallID), false)
	fc.Notify = &store.NewDelivery{ID: "wh_0000000000000002", URL: url}
	if _, err := s.Fail(ctx, fc); err != nil {
		t.Fatal(err)
	}
	p := createNotify(t, s, "canceled", url)
	if _, out, err := s.Cancel(ctx, p.CallID, canceledErr, &store.NewDelivery{ID: "wh_0000000000000003", URL: url}); err != nil || out != store.Canceled {
		t.Fatalf("Cancel(pending) = %v, %v", out, err)
	}
	r := createNotify(t, s, "running", url)
	claimOnly(t, s, "w", longLease, r.CallID)
	if _, out, err := s.Cancel(ctx, r.CallID, canceledErr, &store.NewDelivery{ID: "wh_0000000000000004", URL: url}); err != nil || out != store.CancelRequested {
		t.Fatalf("Cancel(running) = %v, %v", out, err)
	}
	for id, want := range map[string]int{f.CallID: 1, p.CallID: 1, r.CallID: 0} {
		if n := len(deliveries(t, s, id)); n != want {
			t.Errorf("call %s has %d deliveries, want %d", id, n, want)
		}
	}
	got = claimDeliveries(t, s, "a", 0) // a lease of 0 lapses at once
	if len(got) != 2 {
		t.Fatalf("claimed %+v, want the fail's and the cancel's deliveries", got)
	}
	retaken := claimDeliveries(t, s, "b", longLease)
	if len(retaken) != 2 || retaken[0].Attempts != 2 {
		t.Fatalf("after the lease lapsed, claim = %+v, want both again at attempt 2", retaken)
	}
	for _, d := range retaken {
		e := store.DeliveryEnd{ID: d.ID, CallID: d.CallID, Owner: "b", Attempts: d.Attempts, Reason: "connection refused"}
		e.Outcome, e.Delay = store.DeliveryRetry, time.Hour
		if d.CallID == p.CallID {
			e.Outcome, e.Delay = store.DeliveryGiveUp, 0
		}
		if err := s.EndDelivery(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if left := claimDeliveries(t, s, "a", longLease); len(left) != 0 {
		t.Fatalf("claimed %+v: a retry waiting an hour and a delivery given up must not be", left)
	}
	if d := deliveries(t, s, p.CallID)[0]; d.State != store.DeliveryFailed {
		t.Fatalf("given up: state %s, want failed", d.State)
	}
	if n := pendingDeliveries(t, s); n != 1 {
		t.Fatalf("PendingDeliveries = %d, want 1 (the one waiting an hour)", n)
	}
	if err := s.EndDelivery(ctx, store.DeliveryEnd{ID: "x", Outcome: store.DeliveryRetry, Delay: -1}); err == nil {
		t.Error("EndDelivery with a negative delay was accepted")
	}
}

// testConcurrentClaimDeliveries: senders claiming at once take each
// delivery once.
func testConcurrentClaimDeliveries(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	const n = 12
	for i := range n {
		c := createNotify(t, s, "k"+string(rune('a'+i)), "https://hooks.example.com/")
		done := completion(claimOnly(t, s, "w", longLease, c.CallID))
		id, err := store.NewDeliveryID()
		if err != nil {
			t.Fatal(err)
		}
		done.Notify = &store.NewDelivery{ID: id, URL: "https://hooks.example.com/"}
		if _, err := s.Succeed(t.Context(), done); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for range 6 {
				ds, err := s.ClaimDeliveries(t.Context(), "sender"+string(rune('0'+w)), longLease, 2)
				if err != nil {
					t.Errorf("ClaimDeliveries: %v", err)
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("claimed %d distinct deliveries, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("delivery %s claimed %d times", id, k)
		}
	}
}
