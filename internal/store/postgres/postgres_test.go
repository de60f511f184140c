package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storetest"
)

// TestStoreSuite runs the shared behaviour suite, the same one SQLite
// passes, on PostgreSQL.
func TestStoreSuite(t *testing.T) {
	baseURL(t)
	storetest.Exercise(t,
		func(t *testing.T) store.Store { return open(t, freshURL(t), store.Options{}) },
		storetest.Options{OpenReadOnly: func(t *testing.T) (store.Store, store.Store) {
			u := freshURL(t)
			rw := open(t, u, store.Options{})
			ro := open(t, u, store.Options{ReadOnly: true})
			return rw, ro
		}},
	)
}

// instances opens n Stores on one fresh database. Each has its own pool,
// which is all that distinguishes two idemctl processes to PostgreSQL.
func instances(t *testing.T, n int) []*Store {
	t.Helper()
	u := freshURL(t)
	out := make([]*Store, n)
	for i := range out {
		out[i] = open(t, u, store.Options{})
	}
	return out
}

// TestInstancesCreateOrGetOneCall: many same-key requests spread over two
// instances at once make one call, created once.
func TestInstancesCreateOrGetOneCall(t *testing.T) {
	inst := instances(t, 2)
	const perInstance = 12
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		ids      = map[string]int{}
		outcomes = map[store.Outcome]int{}
		errs     []error
	)
	for _, s := range inst {
		for range perInstance {
			n := newCall(t, "one-key") // each request brings its own call id
			wg.Go(func() {
				<-start
				c, out, err := s.CreateOrGet(t.Context(), n)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ids[c.CallID]++
				outcomes[out]++
			})
		}
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("CreateOrGet errors: %v", errs)
	}
	if len(ids) != 1 || outcomes[store.Created] != 1 || outcomes[store.Existing] != 2*perInstance-1 {
		t.Fatalf("call ids %v, outcomes %v; want one id, 1 created, %d existing", ids, outcomes, 2*perInstance-1)
	}
	for _, s := range inst {
		if st, err := s.Stats(t.Context()); err != nil || st.Calls != 1 {
			t.Fatalf("stats = %+v, %v; want 1 call", st, err)
		}
	}
	if n := scalar[int64](t, inst[0], `SELECT count(*) FROM audit WHERE event = 'created'`); n != 1 {
		t.Fatalf("created audit rows = %d, want 1", n)
	}
}

// TestInstancesRetryResetOnce: same-key requests racing on two instances
// to re-run a retryable failure reset it once; the others see it pending.
func TestInstancesRetryResetOnce(t *testing.T) {
	inst := instances(t, 2)
	c := create(t, inst[0], "flaky")
	got, err := inst[0].ClaimNext(t.Context(), "w", time.Minute, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	fail := store.Completion{CallID: c.CallID, Owner: "w", Attempt: 1,
		Error: []byte(`{"code":"tool_failed","message":"try again","retryable":true}`)}
	if _, err := inst[0].Fail(t.Context(), fail); err != nil {
		t.Fatal(err)
	}

	const perInstance = 8
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		outcomes = map[store.Outcome]int{}
		errs     []error
	)
	for _, s := range inst {
		for range perInstance {
			n := newCall(t, "flaky")
			wg.Go(func() {
				<-start
				r, out, err := s.CreateOrGet(t.Context(), n)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && (r.CallID != c.CallID || r.Status != store.StatusPending) {
					err = fmt.Errorf("got %+v, want %s pending", r, c.CallID)
				}
				if err != nil {
					errs = append(errs, err)
				}
				outcomes[out]++
			})
		}
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("CreateOrGet errors: %v", errs)
	}
	if outcomes[store.RetryReset] != 1 || outcomes[store.Existing] != 2*perInstance-1 {
		t.Fatalf("outcomes = %v, want 1 retry_reset and %d existing", outcomes, 2*perInstance-1)
	}
	if n := scalar[int64](t, inst[0], `SELECT count(*) FROM audit WHERE event = 'retry_reset'`); n != 1 {
		t.Fatalf("retry_reset audit rows = %d, want 1", n)
	}
}

// TestInstancesClaimEachCallOnce: workers of two instances claiming at once
// (SKIP LOCKED) claim every call exactly once.
func TestInstancesClaimEachCallOnce(t *testing.T) {
	inst := instances(t, 2)
	const calls, workersPerInstance = 40, 3
	for i := range calls {
		create(t, inst[i%2], fmt.Sprintf("k%d", i))
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		claimed = map[string][]string{}
		errs    []error
	)
	for i, s := range inst {
		for w := range workersPerInstance {
			owner := fmt.Sprintf("inst%d-w%d", i, w)
			wg.Go(func() {
				<-start
				for {
					got, err := s.ClaimNext(t.Context(), owner, time.Minute, 4)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					}
					for _, c := range got {
						claimed[c.CallID] = append(claimed[c.CallID], owner)
					}
					mu.Unlock()
					if err != nil || len(got) == 0 {
						return
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("ClaimNext errors: %v", errs)
	}
	if len(claimed) != calls {
		t.Fatalf("claimed %d distinct calls, want %d", len(claimed), calls)
	}
	for id, owners := range claimed {
		if len(owners) != 1 {
			t.Errorf("call %s claimed %d times, by %v", id, len(owners), owners)
		}
	}
	if n := scalar[int64](t, inst[0], `SELECT count(*) FROM calls WHERE status = 'running' AND attempt = 1`); n != calls {
		t.Fatalf("running calls at attempt 1 = %d, want %d", n, calls)
	}
	if n := scalar[int64](t, inst[0], `SELECT count(*) FROM audit WHERE event = 'claimed'`); n != calls {
		t.Fatalf("claimed audit rows = %d, want %d", n, calls)
	}
}

// TestClaimSkipsLockedRows: while another transaction holds the oldest
// pending call's row lock (as another instance's claim does mid-statement),
// ClaimNext takes the next call at once instead of queueing behind it.
func TestClaimSkipsLockedRows(t *testing.T) {
	u := freshURL(t)
	// A lock timeout far below the test's patience: without SKIP LOCKED the
	// claim would wait on the row and fail with ErrUnavailable.
	s := open(t, u, store.Options{BusyTimeout: 200 * time.Millisecond})
	first := create(t, s, "first")
	second := create(t, s, "second")

	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM calls WHERE call_id = $1 FOR UPDATE`, first.CallID); err != nil {
		t.Fatal(err)
	}

	got, err := s.ClaimNext(t.Context(), "other-instance", time.Minute, 2)
	if err != nil {
		t.Fatalf("ClaimNext while a row is locked: %v", err)
	}
	if len(got) != 1 || got[0].CallID != second.CallID {
		t.Fatalf("claimed %v, want only %s (the unlocked one)", got, second.CallID)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err = s.ClaimNext(t.Context(), "other-instance", time.Minute, 2)
	if err != nil || len(got) != 1 || got[0].CallID != first.CallID {
		t.Fatalf("ClaimNext after the lock went = %v, %v; want %s", got, err, first.CallID)
	}
}

// TestLiveLeaseNeverTakenByOtherInstance: instance B can neither claim,
// recover, release nor complete a call under A's live lease; once A's lease
// lapses by the database clock B takes it over, never earlier, and A's late
// completion is fenced, leaving one effect.
func TestLiveLeaseNeverTakenByOtherInstance(t *testing.T) {
	inst := instances(t, 2)
	a, b := inst[0], inst[1]
	ctx := t.Context()

	live := create(t, a, "live")
	got, err := a.ClaimNext(ctx, "A", time.Minute, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("A's claim = %v, %v", got, err)
	}
	held := got[0]

	if got, err := b.ClaimNext(ctx, "B", time.Minute, 10); err != nil || len(got) != 0 {
		t.Fatalf("B claimed under A's live lease: %v, %v", got, err)
	}
	if rec, err := b.RecoverExpired(ctx); err != nil || len(rec) != 0 {
		t.Fatalf("B recovered A's live lease: %v, %v", rec, err)
	}
	if err := b.Release(ctx, live.CallID, "B", held.Attempt, "B thinks it is dead"); !errors.Is(err, store.ErrNotClaimable) {
		t.Fatalf("B's Release of A's call: err = %v, want ErrNotClaimable", err)
	}
	forged := success(held)
	forged.Owner = "B"
	if _, err := b.Succeed(ctx, forged); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("B's Succeed with its own name: err = %v, want ErrFenced", err)
	}
	if c, err := b.Get(ctx, live.CallID); err != nil || c.Status != store.StatusRunning || *c.Owner != "A" || c.Attempt != 1 {
		t.Fatalf("A's call after B's attempts = %+v, %v; want running by A, attempt 1", c, err)
	}

	// A short lease held by A, which then stalls.
	short := create(t, a, "short")
	got, err = a.ClaimNext(ctx, "A", 300*time.Millisecond, 1)
	if err != nil || len(got) != 1 || got[0].CallID != short.CallID {
		t.Fatalf("A's short claim = %v, %v", got, err)
	}
	stale := got[0]
	var taken store.Call
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.ClaimNext(ctx, "B", time.Minute, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			taken = got[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never took over the expired lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if taken.CallID != short.CallID || taken.Attempt != 2 {
		t.Fatalf("B took %+v, want %s at attempt 2", taken, short.CallID)
	}
	// The takeover's "now" (its updated_at, the database clock) is at or
	// after A's deadline: B did not move early.
	if taken.UpdatedAt < *stale.LeaseUntil {
		t.Fatalf("B took over at db time %.6f, before A's lease ended at %.6f", taken.UpdatedAt, *stale.LeaseUntil)
	}
	if _, err := a.Succeed(ctx, success(stale)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("A's late Succeed: err = %v, want ErrFenced", err)
	}
	if _, err := b.Succeed(ctx, success(taken)); err != nil {
		t.Fatalf("B's Succeed: %v", err)
	}
	if n := scalar[int64](t, a, `SELECT count(*) FROM effects WHERE call_id = $1`, short.CallID); n != 1 {
		t.Fatalf("effects of the taken-over call = %d, want 1", n)
	}
	if n := scalar[int64](t, a, `SELECT count(*) FROM audit WHERE call_id = $1 AND event = 'fenced'`, short.CallID); n != 1 {
		t.Fatalf("fenced audit rows = %d, want 1", n)
	}
}

// TestInstanceRecoversDeadInstancesCall: a call whose instance died holding
// it is recovered by another instance once the lease lapses, then finished.
func TestInstanceRecoversDeadInstancesCall(t *testing.T) {
	u := freshURL(t)
	dead, err := Open(t.Context(), u, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	survivor := open(t, u, store.Options{})
	c := create(t, dead, "k")
	if got, err := dead.ClaimNext(t.Context(), "dead", 200*time.Millisecond, 1); err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	_ = dead.Close() // the instance is gone; its lease remains in the database

	var recovered []string
	deadline := time.Now().Add(10 * time.Second)
	for len(recovered) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("survivor never recovered the dead instance's call")
		}
		time.Sleep(20 * time.Millisecond)
		if recovered, err = survivor.RecoverExpired(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(recovered) != 1 || recovered[0] != c.CallID {
		t.Fatalf("recovered %v, want [%s]", recovered, c.CallID)
	}
	got, err := survivor.ClaimNext(t.Context(), "survivor", time.Minute, 1)
	if err != nil || len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("survivor's claim = %+v, %v; want attempt 2", got, err)
	}
	done, err := survivor.Succeed(t.Context(), success(got[0]))
	if err != nil || done.Status != store.StatusSucceeded {
		t.Fatalf("survivor's Succeed = %+v, %v", done, err)
	}
	if st, err := survivor.Stats(t.Context()); err != nil || st.Calls != 1 || st.Effects != 1 {
		t.Fatalf("stats = %+v, %v; want 1 call 1 effect", st, err)
	}
	evs, err := survivor.Audit(t.Context(), c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range evs {
		names = append(names, e.Event)
	}
	want := "created claimed recover claimed succeeded"
	if strings.Join(names, " ") != want {
		t.Fatalf("audit = %v, want %s", names, want)
	}
}

// TestConcurrentMigrations: four instances starting at once on an empty
// database all open; the schema is created exactly once.
func TestConcurrentMigrations(t *testing.T) {
	u := freshURL(t)
	const n = 4
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		stores = make([]*Store, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(t.Context(), u, store.Options{})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	s := stores[0]
	if rows := scalar[int64](t, s, `SELECT count(*) FROM schema_version`); rows != int64(schemaVersion) {
		t.Fatalf("schema_version rows = %d, want %d (each migration applied once)", rows, schemaVersion)
	}
	if v := scalar[int](t, s, `SELECT max(version) FROM schema_version`); v != schemaVersion {
		t.Fatalf("schema version = %d, want %d", v, schemaVersion)
	}
	// Every instance works on the one schema.
	for i, st := range stores {
		create(t, st, fmt.Sprintf("k%d", i))
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM calls`); n != int64(len(stores)) {
		t.Fatalf("calls = %d, want %d", n, len(stores))
	}
	// A later start finds the schema current and changes nothing.
	open(t, u, store.Options{})
	if rows := scalar[int64](t, s, `SELECT count(*) FROM schema_version`); rows != int64(schemaVersion) {
		t.Fatalf("schema_version rows after reopen = %d, want %d", rows, schemaVersion)
	}
}

// TestNewerSchemaRefused: an older binary does not write to a schema a
// newer one migrated.
func TestNewerSchemaRefused(t *testing.T) {
	u := freshURL(t)
	s := open(t, u, store.Options{})
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_version (version, applied_at) VALUES ($1, 0)`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		if _, err := Open(t.Context(), u, store.Options{ReadOnly: ro}); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("Open (read-only %v) on a newer schema: err = %v, want a refusal", ro, err)
		}
	}
}

// TestLeaseUsesDatabaseClock: the lease deadline is the database's now plus
// the lease, and expiry is judged by the database's clock.
func TestLeaseUsesDatabaseClock(t *testing.T) {
	u := freshURL(t)
	s := open(t, u, store.Options{})
	const lease = 90 * time.Second
	c := create(t, s, "k")
	got, err := s.ClaimNext(t.Context(), "w", lease, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	claimed := got[0]
	// Set from one "now": lease_until - updated_at is the lease exactly.
	if d := *claimed.LeaseUntil - claimed.UpdatedAt; math.Abs(d-lease.Seconds()) > 1e-6 {
		t.Fatalf("lease_until - updated_at = %.9f, want %v", d, lease.Seconds())
	}
	// And that now is the database's: measured against the server's clock
	// right after, the lease has at most a few seconds less to run.
	left := scalar[float64](t, s, `SELECT lease_until - `+dbNow+` FROM calls WHERE call_id = $1`, c.CallID)
	if left > lease.Seconds() || left < lease.Seconds()-5 {
		t.Fatalf("lease left by the database clock = %.3fs, want just under %v", left, lease)
	}

	// Expiry is judged by the database clock alone: a deadline one second
	// in the database's past is expired, one second in its future is live.
	setLease := func(offset float64) {
		t.Helper()
		if _, err := s.pool.Exec(t.Context(), `UPDATE calls SET lease_until = `+dbNow+` + $2 WHERE call_id = $1`, c.CallID, offset); err != nil {
			t.Fatal(err)
		}
	}
	setLease(+60)
	if rec, err := s.RecoverExpired(t.Context()); err != nil || len(rec) != 0 {
		t.Fatalf("RecoverExpired of a lease live by the db clock = %v, %v", rec, err)
	}
	setLease(-1)
	if rec, err := s.RecoverExpired(t.Context()); err != nil || len(rec) != 1 {
		t.Fatalf("RecoverExpired of a lease expired by the db clock = %v, %v", rec, err)
	}
}

// TestAuditDetails: each event's detail says what the SQLite backend's
// says, so inspect reads the same on either database.
func TestAuditDetails(t *testing.T) {
	s := open(t, freshURL(t), store.Options{})
	ctx := t.Context()
	claim := func(owner string, lease time.Duration) store.Call {
		t.Helper()
		got, err := s.ClaimNext(ctx, owner, lease, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim = %v, %v", got, err)
		}
		return got[0]
	}

	c := create(t, s, "k")
	first := claim("w1", 50*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := s.RecoverExpired(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := claim("w2", time.Minute)
	if _, err := s.Succeed(ctx, success(first)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale Succeed: %v", err)
	}
	if _, err := s.Fail(ctx, store.Completion{CallID: c.CallID, Owner: "w2", Attempt: second.Attempt,
		Error: []byte(`{"code":"tool_failed","message":"boom","retryable":true}`)}); err != nil {
		t.Fatal(err)
	}
	if _, out, err := s.CreateOrGet(ctx, newCall(t, "k")); err != nil || out != store.RetryReset {
		t.Fatalf("reset = %v, %v", out, err)
	}
	third := claim("w3", time.Minute)
	if err := s.Release(ctx, c.CallID, "w3", third.Attempt, "owner pid 42 gone"); err != nil {
		t.Fatal(err)
	}
	fourth := claim("w4", time.Minute)
	done := success(fourth)
	if _, err := s.Succeed(ctx, done); err != nil {
		t.Fatal(err)
	}

	evs, err := s.Audit(ctx, c.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Event+": "+e.Detail)
	}
	want := []string{
		"created: charge",
		"claimed: w1",
		"recover: lease expired (owner w1, attempt 1)",
		"claimed: w2",
		"fenced: owner w1 attempt 1 refused: call is running under owner w2 attempt 2",
		"failed: tool_failed: boom",
		"retry_reset: after tool_failed: boom",
		"claimed: w3",
		"recover: owner pid 42 gone",
		"claimed: w4",
		"succeeded: " + done.Effect.EffectID,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A success without a side effect.
	create(t, s, "k2")
	quiet := success(claim("w5", time.Minute))
	quiet.Effect = nil
	if _, err := s.Succeed(ctx, quiet); err != nil {
		t.Fatal(err)
	}
	last, err := s.Audit(ctx, quiet.CallID, 1)
	if err != nil || len(last) != 1 || last[0].Detail != "no effect" {
		t.Fatalf("succeeded detail without effect = %+v, %v; want \"no effect\"", last, err)
	}
}

// TestSucceedKeepsExistingEffect: if a call somehow already has an effect
// row (planted here by hand; the fencing makes it impossible otherwise),
// Succeed adds none and points the call at the one that exists.
func TestSucceedKeepsExistingEffect(t *testing.T) {
	s := open(t, freshURL(t), store.Options{})
	create(t, s, "k")
	got, err := s.ClaimNext(t.Context(), "w", time.Minute, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	c := got[0]
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
VALUES ('eff_planted', $1, 'charge', 1, 0)`, c.CallID); err != nil {
		t.Fatal(err)
	}
	done, err := s.Succeed(t.Context(), success(c))
	if err != nil {
		t.Fatal(err)
	}
	if done.EffectID == nil || *done.EffectID != "eff_planted" {
		t.Fatalf("call's effect_id = %v, want eff_planted", done.EffectID)
	}
	if n := scalar[int64](t, s, `SELECT count(*) FROM effects WHERE call_id = $1`, c.CallID); n != 1 {
		t.Fatalf("effects of the call = %d, want 1", n)
	}
}

// TestSessionSettings: every pooled connection runs at READ COMMITTED even
// when the URL asks for more, with the lock timeout from the options, and a
// read-only store's connections are read-only.
func TestSessionSettings(t *testing.T) {
	u := withParam(t, freshURL(t), "default_transaction_isolation", "serializable")
	rw := open(t, u, store.Options{BusyTimeout: 1234 * time.Millisecond})
	ro := open(t, u, store.Options{ReadOnly: true})
	for _, tc := range []struct {
		s          *Store
		name, want string
	}{
		{rw, "transaction_isolation", "read committed"},
		{rw, "lock_timeout", "1234ms"},
		{rw, "default_transaction_read_only", "off"},
		{ro, "transaction_isolation", "read committed"},
		{ro, "lock_timeout", "5s"},
		{ro, "default_transaction_read_only", "on"},
	} {
		if got := scalar[string](t, tc.s, "SHOW "+tc.name); got != tc.want {
			t.Errorf("%s (read-only %v) = %q, want %q", tc.name, tc.s.readOnly, got, tc.want)
		}
	}
}

// TestReadOnlyNeedsSchema: a read-only store never creates the schema, and
// says so when it is missing.
func TestReadOnlyNeedsSchema(t *testing.T) {
	u := freshURL(t)
	if _, err := Open(t.Context(), u, store.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "no idemctl schema") {
		t.Fatalf("read-only Open on an empty database: err = %v, want a missing-schema error", err)
	}
	rw := open(t, u, store.Options{})
	if n := scalar[int64](t, rw, `SELECT count(*) FROM schema_version`); n != int64(schemaVersion) {
		t.Fatalf("schema_version rows = %d: the read-only Open must not have created anything", n)
	}
	ro := open(t, u, store.Options{ReadOnly: true})
	// Even a write that bypassed the guard is refused by the server.
	_, err := ro.pool.Exec(t.Context(), `INSERT INTO audit (ts, event) VALUES (0, 'x')`)
	if err = interpret(t.Context(), err); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("raw write on a read-only pool: err = %v, want ErrReadOnly", err)
	}
}

// TestLockWaitPastTimeoutIsUnavailable: a write stuck behind another
// transaction's row lock longer than BusyTimeout reports ErrUnavailable
// (503), like SQLite's busy timeout, and the call is untouched.
func TestLockWaitPastTimeoutIsUnavailable(t *testing.T) {
	u := freshURL(t)
	s := open(t, u, store.Options{BusyTimeout: 100 * time.Millisecond})
	create(t, s, "k")
	got, err := s.ClaimNext(t.Context(), "w", time.Minute, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	c := got[0]

	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM calls WHERE call_id = $1 FOR UPDATE`, c.CallID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Succeed(t.Context(), success(c)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Succeed behind a held row lock: err = %v, want ErrUnavailable", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Succeed(t.Context(), success(c)); err != nil || done.Status != store.StatusSucceeded {
		t.Fatalf("Succeed once the lock is gone = %+v, %v", done, err)
	}
}

// TestClosedStoreIsUnavailable: a closed store reports ErrUnavailable.
func TestClosedStoreIsUnavailable(t *testing.T) {
	s := open(t, freshURL(t), store.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Get(t.Context(), "c_0000000000000000"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get on a closed store: err = %v, want ErrUnavailable", err)
	}
}

// TestOpenUnreachableIsUnavailable needs no server: nothing listens on
// port 1 of loopback.
func TestOpenUnreachableIsUnavailable(t *testing.T) {
	_, err := Open(t.Context(), "postgres://postgres@127.0.0.1:1/idemctl?sslmode=disable&connect_timeout=5", store.Options{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open of an unreachable server: err = %v, want ErrUnavailable", err)
	}
}

// TestLowerScheme: an upper-case scheme is still a URL to pgx.
func TestLowerScheme(t *testing.T) {
	for in, want := range map[string]string{
		"POSTGRES://u@h/db":       "postgres://u@h/db",
		"PostgreSQL://u@h/db?x=Y": "postgresql://u@h/db?x=Y",
		"postgres://u@h/DB":       "postgres://u@h/DB",
		"host=h dbname=DB":        "host=h dbname=DB",
	} {
		if got := lowerScheme(in); got != want {
			t.Errorf("lowerScheme(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestInterpret maps driver and server errors to the store's sentinels.
func TestInterpret(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("exec: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name string
		err  error
		want error // nil: passed through, no sentinel
	}{
		{"no rows", pgx.ErrNoRows, store.ErrNotFound},
		{"connection failure", pg("08006"), store.ErrUnavailable},
		{"too many connections", pg("53300"), store.ErrUnavailable},
		{"disk full", pg("53100"), store.ErrUnavailable},
		{"admin shutdown", pg("57P01"), store.ErrUnavailable},
		{"cannot connect now", pg("57P03"), store.ErrUnavailable},
		{"lock timeout", pg("55P03"), store.ErrUnavailable},
		{"serialization failure", pg("40001"), store.ErrUnavailable},
		{"read-only transaction", pg("25006"), store.ErrReadOnly},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), store.ErrUnavailable},
		{"already a sentinel", fmt.Errorf("x: %w", store.ErrFenced), store.ErrFenced},
		{"unique violation is a refusal", pg("23505"), store.ErrRefused},
		{"canceled", context.Canceled, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := interpret(t.Context(), tc.err)
			if !errors.Is(got, tc.err) {
				t.Fatalf("interpret lost the original error: %v", got)
			}
			if tc.want != nil && !errors.Is(got, tc.want) {
				t.Fatalf("interpret(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if tc.want == nil {
				for _, s := range []error{store.ErrNotFound, store.ErrUnavailable, store.ErrReadOnly} {
					if errors.Is(got, s) {
						t.Fatalf("interpret(%v) = %v, want no sentinel", tc.err, got)
					}
				}
			}
		})
	}
	if interpret(t.Context(), nil) != nil {
		t.Fatal("interpret(nil) != nil")
	}
	// With the caller's context done, its error is the cause reported.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := interpret(ctx, fmt.Errorf("read: %w", io.ErrUnexpectedEOF)); !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("interpret with a canceled context = %v, want context.Canceled", err)
	}
}
