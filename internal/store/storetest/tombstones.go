package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// tombstoned is a NewCall of principal's key that consults tombstones
// purged within an hour.
func tombstoned(t *testing.T, principal, key, fp string) store.NewCall {
	t.Helper()
	n := newCallFor(principal, key, fp, t)
	n.TombstoneRetention = time.Hour
	return n
}

// wantExpired fails unless err is ErrKeyExpired as an *ExpiredError naming
// callID.
func wantExpired(t *testing.T, what string, err error, callID string) store.Tombstone {
	t.Helper()
	var ee *store.ExpiredError
	if !errors.Is(err, store.ErrKeyExpired) || !errors.As(err, &ee) || ee.Tombstone.CallID != callID {
		t.Fatalf("%s: err = %v; want an *ExpiredError naming %s", what, err, callID)
	}
	return ee.Tombstone
}

// purgeOld ages callID by two hours and purges final calls older than an
// hour, with or without tombstones; it fails unless exactly one call went.
func purgeOld(t *testing.T, su suite, db string, s store.Store, callID string, tombstones bool) {
	t.Helper()
	age(t, su, db, callID, 2*time.Hour)
	if n, err := s.Purge(t.Context(), time.Hour, 100, tombstones); err != nil || n != 1 {
		t.Fatalf("Purge(tombstones %v) = %d, %v; want 1", tombstones, n, err)
	}
}

// testTombstones: a purge with tombstones leaves one for the call's own
// key and each alias key; a create of a tombstoned key, with any
// fingerprint, is ErrKeyExpired naming the purged call and records
// nothing, while the key stays new for another principal, for a create
// that does not consult tombstones, and once the tombstone is older than
// the create's retention; a call recorded under the key again wins over
// its tombstone; a purge without tombstones leaves none.
func testTombstones(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()

	first, out, err := s.CreateOrGet(ctx, dedupCall(t, "alice", "k1", "fp-1", "intent-A", time.Minute))
	if err != nil || out != store.Created {
		t.Fatalf("create k1 = %v, %v", out, err)
	}
	if _, out, err := s.CreateOrGet(ctx, dedupCall(t, "alice", "k1-alias", "fp-alias", "intent-A", time.Minute)); err != nil || out != store.Deduplicated {
		t.Fatalf("create k1-alias = %v, %v; want deduplicated", out, err)
	}
	first = claimOnly(t, s, "w", longLease, first.CallID)
	if _, err := s.Succeed(ctx, completion(first)); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	purgeOld(t, su, db, s, first.CallID, true)

	for key, fp := range map[string]string{"k1": "fp-1", "k1-alias": "fp-alias"} {
		ts, err := s.Tombstone(ctx, "alice", key)
		if err != nil {
			t.Fatalf("Tombstone(%s): %v", key, err)
		}
		want := store.Tombstone{Principal: "alice", IdemKey: key, Fingerprint: fp, CallID: first.CallID, Tool: first.Tool, PurgedAt: ts.PurgedAt}
		if ts != want {
			t.Fatalf("Tombstone(%s) = %+v, want %+v", key, ts, want)
		}
		if d := ts.PurgedAt - float64(before.Unix()); d < -5 || d > 60 {
			t.Fatalf("Tombstone(%s).PurgedAt = %f, %.0fs from the purge", key, ts.PurgedAt, d)
		}
	}
	_, err = s.Tombstone(ctx, "bob", "k1")
	wantErr(t, "Tombstone(bob's k1)", err, store.ErrNotFound)

	// Expired: the same request, another fingerprint, the alias key.
	for _, n := range []store.NewCall{
		tombstoned(t, "alice", "k1", "fp-1"),
		tombstoned(t, "alice", "k1", "fp-other"),
		tombstoned(t, "alice", "k1-alias", "fp-alias"),
	} {
		_, _, err := s.CreateOrGet(ctx, n)
		got := wantExpired(t, fmt.Sprintf("CreateOrGet(%s, %s)", n.IdemKey, n.Fingerprint), err, first.CallID)
		if got.IdemKey != n.IdemKey {
			t.Fatalf("the expired error's tombstone is of key %q, want %q", got.IdemKey, n.IdemKey)
		}
	}
	// With intent deduplication asked for too: expired, not an alias.
	dn := dedupCall(t, "alice", "k1", "fp-1", "intent-A", time.Minute)
	dn.TombstoneRetention = time.Hour
	_, _, err = s.CreateOrGet(ctx, dn)
	wantExpired(t, "CreateOrGet(k1 with a dedup window)", err, first.CallID)
	if st := stats(t, s); st.Calls != 0 {
		t.Fatalf("calls = %d after expired keys, want 0: nothing is recorded", st.Calls)
	}

	// Another principal's k1 is new.
	bobs, out, err := s.CreateOrGet(ctx, tombstoned(t, "bob", "k1", "fp-1"))
	if err != nil || out != store.Created {
		t.Fatalf("bob's k1 = %v, %v; want created", out, err)
	}
	bobs = claimOnly(t, s, "w", longLease, bobs.CallID)
	if _, err := s.Succeed(ctx, completion(bobs)); err != nil {
		t.Fatal(err)
	}
	// A create that does not consult tombstones finds the key new again;
	// then the key is that call's, and its tombstone no longer counts.
	again, out, err := s.CreateOrGet(ctx, newCallFor("alice", "k1", "fp-1", t))
	if err != nil || out != store.Created || again.CallID == first.CallID {
		t.Fatalf("k1 without tombstones = %s, %v, %v; want a new call", again.CallID, out, err)
	}
	if c, out, err := s.CreateOrGet(ctx, tombstoned(t, "alice", "k1", "fp-1")); err != nil || out != store.Existing || c.CallID != again.CallID {
		t.Fatalf("k1 replay = %s, %v, %v; want existing %s", c.CallID, out, err, again.CallID)
	}

	// A tombstone older than the create's retention is ignored, even
	// before PurgeTombstones deletes it.
	su.f.Exec(t, db, `UPDATE tombstones SET purged_at = purged_at - 7200 WHERE idem_key = 'k1-alias'`)
	if _, out, err := s.CreateOrGet(ctx, tombstoned(t, "alice", "k1-alias", "fp-x")); err != nil || out != store.Created {
		t.Fatalf("k1-alias past its tombstone's retention = %v, %v; want created", out, err)
	}

	// Purged again, k1 leaves a tombstone naming its new call.
	again = claimOnly(t, s, "w", longLease, again.CallID)
	if _, err := s.Fail(ctx, failure(again, false)); err != nil {
		t.Fatal(err)
	}
	purgeOld(t, su, db, s, again.CallID, true)
	if ts, err := s.Tombstone(ctx, "alice", "k1"); err != nil || ts.CallID != again.CallID {
		t.Fatalf("Tombstone(k1) after the second purge = %+v, %v; want call %s", ts, err, again.CallID)
	}
	_, _, err = s.CreateOrGet(ctx, tombstoned(t, "alice", "k1", "fp-1"))
	wantExpired(t, "CreateOrGet(k1) after the second purge", err, again.CallID)

	// Without tombstones, a purged key leaves none.
	purgeOld(t, su, db, s, bobs.CallID, false)
	_, err = s.Tombstone(ctx, "bob", "k1")
	wantErr(t, "Tombstone(bob's k1 purged without tombstones)", err, store.ErrNotFound)
	if _, out, err := s.CreateOrGet(ctx, tombstoned(t, "bob", "k1", "fp-1")); err != nil || out != store.Created {
		t.Fatalf("bob's k1 purged without tombstones = %v, %v; want created", out, err)
	}
}

// testPurgeTombstones: PurgeTombstones deletes tombstones older than the
// age, oldest first, at most limit of them, and no other.
func testPurgeTombstones(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	for _, key := range []string{"a", "b", "c"} {
		c := createAndClaim(t, s, key, "w", longLease)
		if _, err := s.Succeed(ctx, completion(c)); err != nil {
			t.Fatal(err)
		}
		purgeOld(t, su, db, s, c.CallID, true)
	}
	// a is the oldest, b next; c is recent.
	su.f.Exec(t, db, `UPDATE tombstones SET purged_at = purged_at - 7300 WHERE idem_key = 'a'`)
	su.f.Exec(t, db, `UPDATE tombstones SET purged_at = purged_at - 7200 WHERE idem_key = 'b'`)

	if n, err := s.PurgeTombstones(ctx, time.Hour, 0); err != nil || n != 0 {
		t.Fatalf("PurgeTombstones(limit 0) = %d, %v; want 0", n, err)
	}
	if _, err := s.PurgeTombstones(ctx, -time.Second, 10); err == nil {
		t.Fatal("PurgeTombstones(negative age) succeeded")
	}
	if n, err := s.PurgeTombstones(ctx, time.Hour, 1); err != nil || n != 1 {
		t.Fatalf("PurgeTombstones(limit 1) = %d, %v; want 1", n, err)
	}
	_, err := s.Tombstone(ctx, "", "a")
	wantErr(t, "Tombstone(a) after the first batch", err, store.ErrNotFound)
	if _, err := s.Tombstone(ctx, "", "b"); err != nil {
		t.Fatalf("Tombstone(b) after the first batch: %v; the oldest goes first", err)
	}
	if n, err := s.PurgeTombstones(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("second PurgeTombstones = %d, %v; want b only", n, err)
	}
	if _, err := s.Tombstone(ctx, "", "c"); err != nil {
		t.Fatalf("Tombstone(c), purged recently: %v", err)
	}
	if n, err := s.PurgeTombstones(ctx, 0, 10); err != nil || n != 1 {
		t.Fatalf("PurgeTombstones(age 0) = %d, %v; want c", n, err)
	}
}

// testTombstoneRacesCreate: a create of a key while the purge of its call
// commits sees the call (Existing) or its tombstone (ErrKeyExpired),
// never neither: it never records a new call under the key. (On
// PostgreSQL an INSERT that found the row being deleted would otherwise
// wait for the delete and then insert, its snapshot too old to see the
// tombstone.)
func testTombstoneRacesCreate(t *testing.T, su suite) {
	db, s := su.fresh(t)
	ctx := t.Context()
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("race-%d", i)
		create(t, s, keys[i])
	}
	claimed, err := s.ClaimNext(ctx, "w", longLease, n)
	if err != nil || len(claimed) != n {
		t.Fatalf("claimed %d, %v; want %d", len(claimed), err, n)
	}
	for _, c := range claimed {
		if _, err := s.Succeed(ctx, completion(c)); err != nil {
			t.Fatal(err)
		}
	}
	su.f.Exec(t, db, `UPDATE calls SET updated_at = updated_at - 7200`)

	stop := make(chan struct{})
	errs := make(chan error, 8)
	for w := range 4 {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				key := keys[(i*7+w*13)%n]
				c, out, err := s.CreateOrGet(ctx, tombstoned(t, "", key, "fp-"+key))
				switch {
				case errors.Is(err, store.ErrKeyExpired), err == nil && out == store.Existing:
				case err != nil:
					errs <- fmt.Errorf("CreateOrGet(%s): %w", key, err)
					return
				default:
					errs <- fmt.Errorf("CreateOrGet(%s) during the purge = %v (call %s); want existing or expired", key, out, c.CallID)
					return
				}
			}
		}()
	}
	purged := 0
	for purged < n {
		k, err := s.Purge(ctx, time.Hour, 50, true)
		if err != nil {
			t.Fatal(err)
		}
		purged += k
	}
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if st := stats(t, s); st.Calls != 0 {
		t.Fatalf("%d calls after the purge, want 0", st.Calls)
	}
}
