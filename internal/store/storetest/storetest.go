// Package storetest is the behaviour suite every store.Store backend must
// pass. Each invariant of the lifecycle that lives in the storage layer
// (docs/lifecycle.md, "Invariants") is tested here once, and each backend's
// own tests call Run, so SQLite and PostgreSQL are held to the same contract
// (river's riverdrivertest pattern).
//
// The suite is split by concern, one file each:
//   - create.go: CreateOrGet, same-key retry resets, concurrent creates;
//   - createclaim.go: a claim made by CreateOrGet itself (NewCall.Claim);
//   - claim.go: ClaimNext, tool quotas, concurrent claims, lease-expiry
//     takeover, the claim order across pending and expired calls;
//   - complete.go: Succeed, Fail, effect uniqueness;
//   - retry.go: ScheduleRetry and not-before times;
//   - recover.go: RecoverExpired, Release;
//   - lease.go: ExtendLease (heartbeats, cancel requests, fencing), Queue;
//   - reads.go: the read methods, Ping, read-only stores;
//   - audit.go: the exact detail of every audit event;
//   - principals.go: principal scoping, Purge, keyset listing;
//   - tombstones.go: the tombstones of purged keys, PurgeTombstones;
//   - redrive.go: Redrive;
//   - unknown.go: unknown outcomes (Call.Unknown), RecordLookup, Resolve;
//   - filters.go: the listing filters, Rates;
//   - dedup.go: intent deduplication and alias keys;
//   - gates.go: the rate limits' and breakers' rows (Admit, Unadmit,
//     ReportAttempt, GateStates), shared by two instances;
//   - cancel.go: Cancel;
//   - instances.go: two stores on one database, a closed store;
//   - failpoint.go: the before-commit hook (Options.BeforeCommit) of
//     every write;
//   - migrate.go: migrations that must keep a database's rows;
//   - helpers.go: the helpers the tests share.
//
// Nothing in this package may assume a particular backend: it talks only to
// the store.Store interface (and, through Factory.Exec, plain SQL that both
// dialects accept) and compares JSON semantically (a backend may store jsonb
// and hand back different whitespace).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Factory is how the suite gets databases and stores from a backend.
type Factory struct {
	// NewDB creates a fresh, empty database for one test and returns where
	// it is (a file path, a URL: the suite only hands it back to Open and
	// Exec). The backend removes it through t.Cleanup.
	NewDB func(t *testing.T) string
	// Open opens a store on a database NewDB made. Several stores may be
	// open on one database at once, as several server processes are; the
	// first one opened creates the schema. The suite closes every store
	// it opens (through t.Cleanup, possibly after closing it itself).
	Open func(ctx context.Context, db string, opts store.Options) (store.Store, error)
	// Exec runs one SQL statement on db outside any store, for states no
	// store method can produce (a running call without a lease deadline).
	// The statement uses no placeholders and only SQL both backends speak.
	Exec func(t *testing.T, db, sql string)
	// SchemaBefore creates in db, a fresh database, the schema as it was
	// before the named migration (MigrationNotBefore), without opening a
	// store: the migration tests fill it with Exec, then open a store.
	SchemaBefore func(t *testing.T, db, migration string)
}

// MigrationNotBefore names the migration that added calls.not_before
// (server-side retries), for Factory.SchemaBefore.
const MigrationNotBefore = "not_before"

// Timing used throughout. Short leases keep the suite fast; every wait for
// one to expire polls with a generous deadline instead of sleeping a fixed
// time, so a slow machine makes the suite slower, never flaky.
const (
	shortLease = 50 * time.Millisecond
	longLease  = time.Minute
	waitFor    = 10 * time.Second
	pollEvery  = 10 * time.Millisecond
)

// suite is a Factory with the helpers the tests use.
type suite struct{ f Factory }

// open returns a store on a fresh, empty database.
func (su suite) open(t *testing.T) store.Store {
	t.Helper()
	_, s := su.fresh(t)
	return s
}

// fresh makes a fresh database and opens a store on it.
func (su suite) fresh(t *testing.T) (db string, s store.Store) {
	t.Helper()
	db = su.f.NewDB(t)
	return db, su.openOn(t, db, store.Options{})
}

// openOn opens one more store on db; it is closed when the test ends.
func (su suite) openOn(t *testing.T, db string, opts store.Options) store.Store {
	t.Helper()
	s, err := su.f.Open(t.Context(), db, opts)
	if err != nil {
		t.Fatalf("Open(%+v): %v", opts, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Run runs the whole suite against a backend. Every field of f is required.
func Run(t *testing.T, f Factory) {
	t.Helper()
	if f.NewDB == nil || f.Open == nil || f.Exec == nil || f.SchemaBefore == nil {
		t.Fatal("storetest.Run: Factory needs NewDB, Open, Exec and SchemaBefore")
	}
	su := suite{f: f}
	open := su.open

	// create.go
	t.Run("CreateOrGet", func(t *testing.T) { testCreateOrGet(t, open) })
	t.Run("RetryReset", func(t *testing.T) { testRetryReset(t, open) })
	t.Run("ConcurrentCreateOrGet", func(t *testing.T) { testConcurrentCreateOrGet(t, open) })
	// createclaim.go
	t.Run("CreateClaim", func(t *testing.T) { testCreateClaim(t, open) })
	t.Run("CreateClaimOnlyCreated", func(t *testing.T) { testCreateClaimOnlyCreated(t, su) })
	t.Run("CreateClaimFencing", func(t *testing.T) { testCreateClaimFencing(t, open) })
	t.Run("CreateClaimRecovered", func(t *testing.T) { testCreateClaimRecovered(t, open) })
	// claim.go
	t.Run("ClaimNext", func(t *testing.T) { testClaimNext(t, open) })
	t.Run("ClaimQuotas", func(t *testing.T) { testClaimQuotas(t, open) })
	t.Run("ConcurrentClaimNext", func(t *testing.T) { testConcurrentClaimNext(t, open) })
	t.Run("LeaseExpiryTakeover", func(t *testing.T) { testLeaseExpiryTakeover(t, open) })
	t.Run("ClaimOldestAcrossPendingAndExpired", func(t *testing.T) { testClaimOldestAcrossPendingAndExpired(t, su) })
	// complete.go
	t.Run("Succeed", func(t *testing.T) { testSucceed(t, open) })
	t.Run("Fail", func(t *testing.T) { testFail(t, open) })
	t.Run("ScheduleRetry", func(t *testing.T) { testScheduleRetry(t, open) })
	t.Run("EffectUniqueness", func(t *testing.T) { testEffectUniqueness(t, open) })
	t.Run("EveryColumnReturned", func(t *testing.T) { testEveryColumnReturned(t, open) })
	// recover.go
	t.Run("RecoverExpired", func(t *testing.T) { testRecoverExpired(t, open) })
	t.Run("RecoverWithoutLease", func(t *testing.T) { testRecoverWithoutLease(t, su) })
	t.Run("Release", func(t *testing.T) { testRelease(t, open) })
	// unknown.go
	t.Run("OutcomeUnknownAudit", func(t *testing.T) { testOutcomeUnknownAudit(t, open) })
	t.Run("UnknownSurvives", func(t *testing.T) { testUnknownSurvives(t, open) })
	t.Run("RecordLookup", func(t *testing.T) { testRecordLookup(t, open) })
	t.Run("Resolve", func(t *testing.T) { testResolve(t, open) })
	// lease.go
	t.Run("ExtendLease", func(t *testing.T) { testExtendLease(t, open) })
	t.Run("ExtendLeaseCancelRequested", func(t *testing.T) { testExtendLeaseCancelRequested(t, open) })
	t.Run("ExtendLeaseFencing", func(t *testing.T) { testExtendLeaseFencing(t, open) })
	t.Run("Queue", func(t *testing.T) { testQueue(t, open) })
	t.Run("PendingByPrincipal", func(t *testing.T) { testPendingByPrincipal(t, open) })
	// reads.go
	t.Run("Get", func(t *testing.T) { testGet(t, open) })
	t.Run("ListCalls", func(t *testing.T) { testListCalls(t, open) })
	t.Run("ListEffects", func(t *testing.T) { testListEffects(t, open) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, open) })
	t.Run("StatsAttemptsDupes", func(t *testing.T) { testStatsAttemptsDupes(t, open) })
	t.Run("Ping", func(t *testing.T) { testPing(t, open) })
	t.Run("ReadOnly", func(t *testing.T) { testReadOnly(t, su) })
	// audit.go
	t.Run("AuditDetails", func(t *testing.T) { testAuditDetails(t, open) })
	// principals.go
	t.Run("PrincipalScoping", func(t *testing.T) { testPrincipalScoping(t, open) })
	t.Run("Purge", func(t *testing.T) { testPurge(t, su) })
	t.Run("ListKeyset", func(t *testing.T) { testListKeyset(t, su) })
	// redrive.go
	t.Run("Redrive", func(t *testing.T) { testRedrive(t, open) })
	// tombstones.go
	t.Run("Tombstones", func(t *testing.T) { testTombstones(t, su) })
	t.Run("PurgeTombstones", func(t *testing.T) { testPurgeTombstones(t, su) })
	t.Run("TombstoneRacesCreate", func(t *testing.T) { testTombstoneRacesCreate(t, su) })
	// filters.go
	t.Run("ListFilters", func(t *testing.T) { testListFilters(t, su) })
	t.Run("ListByCode", func(t *testing.T) { testListByCode(t, open) })
	t.Run("Rates", func(t *testing.T) { testRates(t, su) })
	// dedup.go
	t.Run("IntentDedup", func(t *testing.T) { testIntentDedup(t, su) })
	// gates.go
	t.Run("GateRate", func(t *testing.T) { testGateRate(t, open) })
	t.Run("GateShared", func(t *testing.T) { testGateShared(t, su) })
	t.Run("GateBreaker", func(t *testing.T) { testGateBreaker(t, open) })
	// cancel.go
	t.Run("Cancel", func(t *testing.T) { testCancel(t, open) })

	// deliveries.go
	t.Run("Deliveries", func(t *testing.T) { testDeliveries(t, open) })
	t.Run("ConcurrentClaimDeliveries", func(t *testing.T) { testConcurrentClaimDeliveries(t, open) })
	// instances.go
	t.Run("Instances", func(t *testing.T) { testInstances(t, su) })
	t.Run("ClosedStore", func(t *testing.T) { testClosedStore(t, su) })
	// failpoint.go
	t.Run("BeforeCommitFailpoints", func(t *testing.T) { testBeforeCommitFailpoints(t, su) })
	// migrate.go
	t.Run("MigrateNotBeforeKeepsRows", func(t *testing.T) { testMigrateNotBeforeKeepsRows(t, su) })
}
