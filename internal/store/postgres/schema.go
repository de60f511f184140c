package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// migrationLockKey is the pg_advisory_xact_lock key that serialises schema
// migrations of idemctl instances starting at once on one database (the
// ASCII of "idemctl\x01"). Advisory locks are scoped to the database.
const migrationLockKey int64 = 0x6964656d63746c01

// migrations are applied in order; migrations[i] brings the schema from
// version i to version i+1. Append only: never edit a released step.
//
// Version 1 is SQLite's schema in PostgreSQL types: times are
// double precision Unix seconds, JSON is kept as text so the bytes the
// caller stored are the bytes read back, and audit.id is a bigserial.
var migrations = []string{
	`
CREATE TABLE calls (
  call_id      text PRIMARY KEY,
  idem_key     text NOT NULL UNIQUE,
  fingerprint  text NOT NULL,
  client_id    text,
  seq          bigint,
  tool         text NOT NULL,
  args_json    text NOT NULL,
  status       text NOT NULL
               CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  result_json  text,
  error_json   text,
  attempt      bigint NOT NULL DEFAULT 0,
  lease_until  double precision,
  owner        text,
  effect_id    text,
  created_at   double precision NOT NULL,
  updated_at   double precision NOT NULL
);
-- The scheduler's pick and recovery: status, then lease deadline.
CREATE INDEX idx_calls_status ON calls (status, lease_until);
CREATE INDEX idx_calls_client_seq ON calls (client_id, seq);
-- Oldest-first claims and newest-first listings.
CREATE INDEX idx_calls_created ON calls (created_at);

CREATE TABLE effects (
  effect_id   text PRIMARY KEY,
  -- The last gate: at most one effect per call, whatever any
  -- instance's worker does.
  call_id     text NOT NULL UNIQUE REFERENCES calls (call_id),
  tool        text NOT NULL,
  amount      bigint,
  created_at  double precision NOT NULL
);
CREATE INDEX idx_effects_created ON effects (created_at);

CREATE TABLE audit (
  id       bigserial PRIMARY KEY,
  ts       double precision NOT NULL,
  call_id  text,
  event    text NOT NULL,
  detail   text
);
CREATE INDEX idx_audit_call ON audit (call_id, id);
`,
	// 2: the claim's pick of pending calls, oldest first, read in index
	// order (see claimSQL). Partial: it holds only pending calls, so it is
	// as small as the queue and a call leaves it when claimed. Not
	// CONCURRENTLY (a migration is one transaction): building it blocks
	// writes to calls for as long as it takes, once, at the first start of
	// this version.
	`
CREATE INDEX IF NOT EXISTS idx_calls_pending ON calls (created_at, call_id) WHERE status = 'pending';
`,
	// 3: principals and retention (migrationPrincipals).
	migrationPrincipals,
	// 4: server-side retries (migrationNotBefore).
	migrationNotBefore,
	// 5: intent deduplication (migrationIntent).
	migrationIntent,
	// 6: the door a call came through (migrationVia).
	migrationVia,
	// 7: tombstones of purged keys (migrationTombstones).
	migrationTombstones,
	// 8: the index diet (migrationIndexDiet).
	migrationIndexDiet,
	// 9: the unknown outcome a call remembers (migrationUnknown).
	migrationUnknown,
	// 10: the gates of rate-limited and breaker-guarded tools
	// (migrationGates).
	migrationGates,
	// 11: completion webhooks (migrationWebhooks).
	migrationWebhooks,
	// 12: the creating request's trace context (migrationTraceParent).
	migrationTraceParent,
	// 13: the status index narrowed to running calls (migrationRunningIndex).
	migrationRunningIndex,
}

// migrationRunningIndex narrows the index that every status change
// touched (docs/design.md, "The indexes of calls"): idx_calls_status
// (status, lease_until), which every version of every call entered (an
// update of status is never HOT), becomes idx_calls_running (lease_until)
// WHERE status = 'running', which only the versions of running calls enter;
// idx_calls_final_updated gains status, as on SQLite (where /stats counts
// final calls by status from it), so the rates' count of final calls by
// status reads that index alone. Not CONCURRENTLY (a migration is one
// transaction): building the two blocks writes to calls for as long as it
// takes, once, at the first start of this version.
const migrationRunningIndex = `
DROP INDEX idx_calls_status;
CREATE INDEX idx_calls_running ON calls (lease_until) WHERE status = 'running';
DROP INDEX idx_calls_final_updated;
CREATE INDEX idx_calls_final_updated ON calls (updated_at, status) WHERE status IN ('succeeded', 'failed');
`

// migrationIndexDiet drops idx_calls_client_seq: no statement reads calls
// by client_id or seq (they are labels a client sends and reads back), and
// every insert and, on PostgreSQL, every update that is not HOT (a claim, a
// completion) wrote an entry into it (BENCHMARKS.md, "Cost per call").
const migrationIndexDiet = `
DROP INDEX IF EXISTS idx_calls_client_seq;
`

// migrationUnknown adds calls.unknown_outcome (store.Call.Unknown): the
// case of the last attempt whose outcome is unknown and not settled since,
// NULL for none. A column, not only the audit: the claim that follows
// clears error_json, and the executor must still know, at the next claim,
// that it has to look up (or hold) before any new attempt. Every existing
// row gets NULL (no table rewrite): as before, nothing to settle.
const migrationUnknown = `
ALTER TABLE calls ADD COLUMN unknown_outcome text;
`

// migrationWebhooks adds completion webhooks (docs/api.md, "Completion
// webhooks"): calls.notify_url, where a call's final state is delivered
// (NULL for every existing call and for calls without one), and
// webhook_deliveries, the outbox: one row per final state of such a call,
// written in the transaction that makes it final, and sent by the delivery
// loop (store.Store.ClaimDeliveries). idx_webhook_deliveries_due is the
// loop's pick and the pending count, partial so it is as small as the
// backlog; idx_webhook_deliveries_call the console's list of a call's
// deliveries. The foreign key deletes a purged call's deliveries with it.
const migrationWebhooks = `
ALTER TABLE calls ADD COLUMN notify_url text;
CREATE TABLE webhook_deliveries (
  id          text PRIMARY KEY,
  call_id     text NOT NULL REFERENCES calls (call_id) ON DELETE CASCADE,
  url         text NOT NULL,
  state       text NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts    bigint NOT NULL DEFAULT 0,
  next_at     double precision NOT NULL,
  owner       text,
  lease_until double precision,
  last_error  text NOT NULL DEFAULT '',
  created_at  double precision NOT NULL,
  updated_at  double precision NOT NULL
);
CREATE INDEX idx_webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX idx_webhook_deliveries_call ON webhook_deliveries (call_id, created_at);
`

// migrationTraceParent adds calls.trace_parent, the W3C traceparent of the
// request that created the call (docs/operations.md, "Traces"), so the
// attempts that run it, on any instance, continue that trace. NULL for
// every existing row and for untraced requests.
const migrationTraceParent = `
ALTER TABLE calls ADD COLUMN trace_parent text;
`

// migrationTombstones adds tombstones, what retention keeps of a purged
// call's keys (store.Tombstone; docs/operations.md, "Retention"): keyed
// like calls by (principal, idem_key), so the create path's lookup is one
// primary-key probe, and indexed by purged_at for PurgeTombstones' oldest
// first batches. No foreign key: the call it names is gone.
const migrationTombstones = `
CREATE TABLE tombstones (
  principal    text NOT NULL,
  idem_key     text NOT NULL,
  fingerprint  text NOT NULL,
  call_id      text NOT NULL,
  tool         text NOT NULL,
  purged_at    double precision NOT NULL,
  PRIMARY KEY (principal, idem_key)
);
CREATE INDEX idx_tombstones_purged ON tombstones (purged_at);
`

// migrationVia adds calls.via, the door a call came through ('http' for
// POST /v1/tool-calls, 'mcp' for the MCP front door): every existing call
// came through the API.
const migrationVia = `
ALTER TABLE calls ADD COLUMN via text NOT NULL DEFAULT 'http';
`

// migrationIntent adds intent deduplication (docs/tools.md, "The tool
// registry"): calls.intent, the intent fingerprint the server computed
// (NULL for every existing row and for tools without a dedup rule),
// indexed by principal, intent and created_at for the lookup of a recent
// call of the same intent (partial: only calls that have one); and
// key_aliases, the keys recorded as aliases of an existing call, with the
// fingerprint of the request that brought each. (principal, idem_key) is
// the primary key of key_aliases; that it is not also a call's own key is
// checked by CreateOrGet in the transaction that inserts either. The
// foreign key deletes a purged call's aliases with it, so a purged alias
// key is unknown again, like a purged call's own key.
const migrationIntent = `
ALTER TABLE calls ADD COLUMN intent text;
CREATE INDEX idx_calls_intent ON calls (principal, intent, created_at) WHERE intent IS NOT NULL;
CREATE TABLE key_aliases (
  principal    text NOT NULL,
  idem_key     text NOT NULL,
  call_id      text NOT NULL REFERENCES calls (call_id) ON DELETE CASCADE,
  fingerprint  text NOT NULL,
  created_at   double precision NOT NULL,
  PRIMARY KEY (principal, idem_key)
);
CREATE INDEX idx_key_aliases_call ON key_aliases (call_id);
`

// migrationNotBefore adds calls.not_before, the time before which a
// pending call scheduled for a server-side retry is not claimed
// (store.Store.ScheduleRetry; docs/lifecycle.md, "Server-side retries"),
// NULL for every existing row (claimable as before). Adding a nullable
// column without a default rewrites nothing. No index changes: the claim
// still walks idx_calls_pending in order and tests not_before on the row it
// locks anyway (claimSQL).
const migrationNotBefore = `
ALTER TABLE calls ADD COLUMN not_before double precision;
`

// migrationPrincipals scopes keys per principal and lets final calls be
// purged while their effects stay (docs/design.md, "Why the key is
// unique", "Why effects are unique per call"):
//
//   - calls gains principal text NOT NULL DEFAULT ” (store.DefaultPrincipal,
//     which every existing row gets), and UNIQUE (idem_key) becomes
//     UNIQUE (principal, idem_key).
//   - effects loses its foreign key to calls, so a purged call's effect row
//     stays; effects.call_id keeps its own UNIQUE, which is what makes a
//     second effect for a purged call id impossible.
//   - idx_calls_final_updated serves the purge (final calls by age) and
//     idx_calls_principal_created the listing of one principal's calls.
//
// The constraint names are PostgreSQL's defaults for version 1's inline
// constraints; no IF EXISTS, so a database whose names differ fails the
// migration loudly instead of keeping a global key.
const migrationPrincipals = `
ALTER TABLE calls ADD COLUMN principal text NOT NULL DEFAULT '';
ALTER TABLE calls ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE calls DROP CONSTRAINT calls_idem_key_key;
ALTER TABLE calls ADD CONSTRAINT calls_principal_idem_key_key UNIQUE (principal, idem_key);
ALTER TABLE effects DROP CONSTRAINT effects_call_id_fkey;
CREATE INDEX idx_calls_final_updated ON calls (updated_at) WHERE status IN ('succeeded', 'failed');
CREATE INDEX idx_calls_principal_created ON calls (principal, created_at, call_id);
`

// schemaVersion is the version this binary writes and understands.
var schemaVersion = len(migrations)

// minReadVersion is the oldest schema a read-only store accepts: the one
// that added calls.trace_parent, the last column a read of a call uses (a read-only store
// cannot migrate: start a server on the database once).
var minReadVersion = slices.Index(migrations, migrationTraceParent) + 1

// migrate creates or upgrades the schema in one transaction. The advisory
// lock makes instances that start together take turns: the first applies
// the migrations, the others then find the schema current and do nothing.
// Without it, two concurrent CREATE TABLE IF NOT EXISTS can both pass the
// existence check and one fails on the catalog's unique index.
func (s *Store) migrate(ctx context.Context) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// A migration rewrites whole tables and builds indexes: on a large
		// database it may run longer than the session's statement_timeout,
		// which guards the short writes of serving (postgres.go).
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return err
		}
		// Transaction-scoped: released at commit or rollback, so a crashed
		// migrator can never leave it held.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
  version     integer NOT NULL,
  applied_at  double precision NOT NULL
)`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&current); err != nil {
			return err
		}
		if current > schemaVersion {
			return fmt.Errorf("database schema version %d is newer than this idemctl understands (%d): upgrade idemctl", current, schemaVersion)
		}
		for v := current; v < schemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migration to version %d: %w", v+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version, applied_at) VALUES ($1, `+dbNow+`)`, v+1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate schema: %w", err)
	}
	return nil
}

// checkSchema verifies, for a read-only store, that the schema exists and
// is one this binary can read; read-only stores never create it.
func (s *Store) checkSchema(ctx context.Context) error {
	var current int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&current)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return errors.New("postgres: no idemctl schema in this database (start idemctl serve on it once to create it)")
	}
	if err != nil {
		return fmt.Errorf("postgres: read schema version: %w", interpret(ctx, err))
	}
	if current > schemaVersion {
		return fmt.Errorf("postgres: database schema version %d is newer than this idemctl understands (%d)", current, schemaVersion)
	}
	if current < minReadVersion {
		return fmt.Errorf("postgres: database schema version %d is older than this idemctl's (%d): start idemctl serve on it once to migrate it", current, schemaVersion)
	}
	return nil
}

// migrationGates adds one row per guarded tool (store.GateState): its
// token bucket and its circuit breaker. Admit and ReportAttempt lock the
// row (FOR UPDATE), so the instances on one database share one budget.
const migrationGates = `
CREATE TABLE tool_gates (
  tool         text PRIMARY KEY,
  tokens       double precision NOT NULL,
  refilled_at  double precision NOT NULL,
  breaker      text NOT NULL CHECK (breaker IN ('closed', 'open', 'half_open')),
  failures     bigint NOT NULL DEFAULT 0,
  until        double precision NOT NULL DEFAULT 0
);
`
