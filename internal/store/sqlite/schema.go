package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// migrations[i] brings the schema from user_version i to i+1. Append only;
// never edit a migration that has shipped.
var migrations = []string{
	// 1: the calls, effects and audit tables. IF NOT EXISTS so a database
	// created by the reference implementation idemctl grew from (same tables,
	// user_version 0) is adopted rather than refused.
	`
CREATE TABLE IF NOT EXISTS calls (
  call_id      TEXT PRIMARY KEY,
  -- first gate: one key, one logical call
  idem_key     TEXT NOT NULL UNIQUE,
  fingerprint  TEXT NOT NULL,
  client_id    TEXT,
  seq          INTEGER,
  tool         TEXT NOT NULL,
  args_json    TEXT NOT NULL,
  status       TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  result_json  TEXT,
  error_json   TEXT,
  attempt      INTEGER NOT NULL DEFAULT 0,
  lease_until  REAL,
  owner        TEXT,
  effect_id    TEXT,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL
);
-- claim and recovery scan by (status, lease_until)
CREATE INDEX IF NOT EXISTS idx_calls_status ON calls(status, lease_until);
CREATE INDEX IF NOT EXISTS idx_calls_client_seq ON calls(client_id, seq);
CREATE INDEX IF NOT EXISTS idx_calls_created ON calls(created_at);

CREATE TABLE IF NOT EXISTS effects (
  effect_id   TEXT PRIMARY KEY,
  -- last gate: at most one effect per call, whatever the leases did
  call_id     TEXT NOT NULL UNIQUE REFERENCES calls(call_id),
  tool        TEXT NOT NULL,
  amount      INTEGER,
  created_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_effects_created ON effects(created_at);

CREATE TABLE IF NOT EXISTS audit (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  ts       REAL NOT NULL,
  call_id  TEXT,
  event    TEXT NOT NULL,
  detail   TEXT
);
CREATE INDEX IF NOT EXISTS idx_audit_call ON audit(call_id, id);
`,
	// 2: the claim's pick of pending calls, oldest first, read in index
	// order instead of sorting every claimable row on each claim (see
	// sqlPickPending). Partial: it holds only pending calls, so it stays as
	// small as the queue, and a call leaves it when claimed; the later
	// running → succeeded update does not touch it. Ordered by created_at
	// then rowid, as every SQLite index ends with the rowid.
	`
CREATE INDEX IF NOT EXISTS idx_calls_pending ON calls(created_at) WHERE status = 'pending';
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
	// 10: the gates of rate-limited and breaker-guarded tools (migrationGates).
	migrationGates,
	// 11: completion webhooks (migrationWebhooks).
	migrationWebhooks,
	// 12: the creating request's trace context (migrationTraceParent).
	migrationTraceParent,
	// 13: the status index narrowed to running calls (migrationRunningIndex).
	migrationRunningIndex,
}

// migrationRunningIndex narrows the indexes that every status change
// touched (docs/design.md, "The indexes of calls"): idx_calls_status
// (status, lease_until), which a call entered at creation and moved in at
// every claim and completion, becomes idx_calls_running (lease_until)
// WHERE status = 'running', which a call enters when it starts running and
// leaves when it stops; idx_calls_final_updated gains status, so /stats
// counts the final calls by status from that index alone (the one reader
// of idx_calls_status's other statuses). Index builds, no table rebuild.
const migrationRunningIndex = `
DROP INDEX idx_calls_status;
CREATE INDEX idx_calls_running ON calls (lease_until) WHERE status = 'running';
DROP INDEX idx_calls_final_updated;
CREATE INDEX idx_calls_final_updated ON calls (updated_at, status) WHERE status IN ('succeeded', 'failed');
`

// migrationIndexDiet drops idx_calls_client_seq: no statement reads calls
// by client_id or seq (they are labels a client sends and reads back), and
// every insert wrote an entry into it (BENCHMARKS.md, "Cost per call").
const migrationIndexDiet = `
DROP INDEX IF EXISTS idx_calls_client_seq;
`

// migrationUnknown adds calls.unknown_outcome (store.Call.Unknown): the
// case of the last attempt whose outcome is unknown and not settled since,
// NULL for none. A column, not only the audit: the claim that follows
// clears error_json, and the executor must still know, at the next claim,
// that it has to look up (or hold) before any new attempt. Every existing
// row gets NULL: as before, nothing to settle.
const migrationUnknown = `
ALTER TABLE calls ADD COLUMN unknown_outcome TEXT;
`

// migrationGates adds one row per guarded tool (store.GateState): its
// token bucket and its circuit breaker.
const migrationGates = `
CREATE TABLE tool_gates (
  tool         TEXT PRIMARY KEY,
  tokens       REAL NOT NULL,
  refilled_at  REAL NOT NULL,
  breaker      TEXT NOT NULL CHECK (breaker IN ('closed', 'open', 'half_open')),
  failures     INTEGER NOT NULL DEFAULT 0,
  until        REAL NOT NULL DEFAULT 0
);
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
ALTER TABLE calls ADD COLUMN notify_url TEXT;
CREATE TABLE webhook_deliveries (
  id          TEXT PRIMARY KEY,
  call_id     TEXT NOT NULL REFERENCES calls (call_id) ON DELETE CASCADE,
  url         TEXT NOT NULL,
  state       TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts    INTEGER NOT NULL DEFAULT 0,
  next_at     REAL NOT NULL,
  owner       TEXT,
  lease_until REAL,
  last_error  TEXT NOT NULL DEFAULT '',
  created_at  REAL NOT NULL,
  updated_at  REAL NOT NULL
);
CREATE INDEX idx_webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX idx_webhook_deliveries_call ON webhook_deliveries (call_id, created_at);
`

// migrationTraceParent adds calls.trace_parent, the W3C traceparent of the
// request that created the call (docs/operations.md, "Traces"), so the
// attempts that run it, on any instance, continue that trace. NULL for
// every existing row and for untraced requests.
const migrationTraceParent = `
ALTER TABLE calls ADD COLUMN trace_parent TEXT;
`

// migrationTombstones adds tombstones, what retention keeps of a purged
// call's keys (store.Tombstone; docs/operations.md, "Retention"): keyed
// like calls by (principal, idem_key), so the create path's lookup is one
// primary-key probe, and indexed by purged_at for PurgeTombstones' oldest
// first batches. No foreign key: the call it names is gone.
const migrationTombstones = `
CREATE TABLE tombstones (
  principal    TEXT NOT NULL,
  idem_key     TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  call_id      TEXT NOT NULL,
  tool         TEXT NOT NULL,
  purged_at    REAL NOT NULL,
  PRIMARY KEY (principal, idem_key)
);
CREATE INDEX idx_tombstones_purged ON tombstones (purged_at);
`

// migrationVia adds calls.via, the door a call came through ('http' for
// POST /v1/tool-calls, 'mcp' for the MCP front door): every existing call
// came through the API.
const migrationVia = `
ALTER TABLE calls ADD COLUMN via TEXT NOT NULL DEFAULT 'http';
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
ALTER TABLE calls ADD COLUMN intent TEXT;
CREATE INDEX idx_calls_intent ON calls (principal, intent, created_at) WHERE intent IS NOT NULL;
CREATE TABLE key_aliases (
  principal    TEXT NOT NULL,
  idem_key     TEXT NOT NULL,
  call_id      TEXT NOT NULL REFERENCES calls (call_id) ON DELETE CASCADE,
  fingerprint  TEXT NOT NULL,
  created_at   REAL NOT NULL,
  PRIMARY KEY (principal, idem_key)
);
CREATE INDEX idx_key_aliases_call ON key_aliases (call_id);
`

// migrationNotBefore adds calls.not_before, the time before which a
// pending call scheduled for a server-side retry is not claimed
// (store.Store.ScheduleRetry; docs/lifecycle.md, "Server-side retries"),
// NULL for every existing row (claimable as before). No index changes: the
// claim's pick still walks idx_calls_pending in created_at order and tests
// not_before on the row it reads anyway for call_id (sqlPickPending).
const migrationNotBefore = `
ALTER TABLE calls ADD COLUMN not_before REAL;
`

// migrationPrincipals scopes keys per principal and lets final calls be
// purged while their effects stay (docs/design.md, "Why the key is
// unique", "Why effects are unique per call"):
//
//   - calls gains principal TEXT NOT NULL DEFAULT ” (store.DefaultPrincipal,
//     which every existing row gets), and UNIQUE(idem_key) becomes
//     UNIQUE(principal, idem_key). SQLite cannot drop a column constraint,
//     so calls is rebuilt (rowids kept: they order ties in listings).
//   - effects loses its foreign key to calls, so a purged call's effect
//     row stays; effects.call_id keeps its own UNIQUE, which is what makes a
//     second effect for a purged call id impossible. effects is rebuilt
//     first: with foreign_keys on, calls cannot be dropped while it is
//     referenced.
//   - idx_calls_final_updated serves the purge (final calls by age) and
//     idx_calls_principal_created the listing of one principal's calls.
//
// The whole step runs in migrate's one transaction.
const migrationPrincipals = `
CREATE TABLE effects_v3 (
  effect_id   TEXT PRIMARY KEY,
  -- last gate: at most one effect per call, whatever the leases did; no
  -- foreign key, so it outlives a purged call and still refuses a second effect
  call_id     TEXT NOT NULL UNIQUE,
  tool        TEXT NOT NULL,
  amount      INTEGER,
  created_at  REAL NOT NULL
);
INSERT INTO effects_v3 (rowid, effect_id, call_id, tool, amount, created_at)
  SELECT rowid, effect_id, call_id, tool, amount, created_at FROM effects;
DROP TABLE effects;
ALTER TABLE effects_v3 RENAME TO effects;
CREATE INDEX idx_effects_created ON effects(created_at);

CREATE TABLE calls_v3 (
  call_id      TEXT PRIMARY KEY,
  principal    TEXT NOT NULL DEFAULT '',
  idem_key     TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  client_id    TEXT,
  seq          INTEGER,
  tool         TEXT NOT NULL,
  args_json    TEXT NOT NULL,
  status       TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  result_json  TEXT,
  error_json   TEXT,
  attempt      INTEGER NOT NULL DEFAULT 0,
  lease_until  REAL,
  owner        TEXT,
  effect_id    TEXT,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL,
  -- a cancel request reached the call while it ran (docs/lifecycle.md, "Cancel")
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  -- first gate: one key, one logical call, per principal
  UNIQUE (principal, idem_key)
);
INSERT INTO calls_v3 (rowid, call_id, principal, idem_key, fingerprint, client_id, seq, tool, args_json,
                      status, result_json, error_json, attempt, lease_until, owner, effect_id, created_at, updated_at)
  SELECT rowid, call_id, '', idem_key, fingerprint, client_id, seq, tool, args_json,
         status, result_json, error_json, attempt, lease_until, owner, effect_id, created_at, updated_at
  FROM calls;
DROP TABLE calls;
ALTER TABLE calls_v3 RENAME TO calls;
CREATE INDEX idx_calls_status ON calls(status, lease_until);
CREATE INDEX idx_calls_client_seq ON calls(client_id, seq);
CREATE INDEX idx_calls_created ON calls(created_at);
CREATE INDEX idx_calls_pending ON calls(created_at) WHERE status = 'pending';
CREATE INDEX idx_calls_final_updated ON calls(updated_at) WHERE status IN ('succeeded', 'failed');
CREATE INDEX idx_calls_principal_created ON calls(principal, created_at, call_id);
`

// schemaVersion is the user_version this build creates and understands.
var schemaVersion = len(migrations)

// minReadVersion is the oldest schema a read-only store accepts: the one
// that added idx_calls_running, the last index a read names (INDEXED BY in
// Stats). A read-only store cannot migrate, so inspect asks for a server to
// be started on an older database first.
var minReadVersion = slices.Index(migrations, migrationRunningIndex) + 1

// migrate brings the database to schemaVersion in one IMMEDIATE transaction,
// so two servers starting on one file at once migrate it once.
func migrate(ctx context.Context, w *sql.DB, path string) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, interpret(ctx, "migrate: begin", err))
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, interpret(ctx, "read user_version", err))
	}
	if v > schemaVersion {
		return fmt.Errorf("sqlite: %s has schema version %d, newer than this idemctl's %d", path, v, schemaVersion)
	}
	for i := v; i < schemaVersion; i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("sqlite: %s: migration %d: %w", path, i+1, interpret(ctx, "migrate", err))
		}
	}
	if v != schemaVersion {
		// user_version lives in the file header and is transactional: it
		// commits with the tables or not at all. PRAGMA takes no bind
		// parameters; the value is our own integer.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
			return fmt.Errorf("sqlite: %s: set user_version: %w", path, interpret(ctx, "migrate", err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, interpret(ctx, "migrate: commit", err))
	}
	return nil
}

// checkVersion verifies, for a read-only open, that the file holds a schema
// this build can read. A read-only store never creates or migrates.
func checkVersion(ctx context.Context, r *sql.DB, path string) error {
	var v int
	if err := r.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("sqlite: open %s read-only: %w", path, interpret(ctx, "read user_version", err))
	}
	switch {
	case v == 0:
		return fmt.Errorf("sqlite: %s is not an idemctl database (no schema; start a server on it first)", path)
	case v > schemaVersion:
		return fmt.Errorf("sqlite: %s has schema version %d, newer than this idemctl's %d", path, v, schemaVersion)
	case v < minReadVersion:
		return fmt.Errorf("sqlite: %s has schema version %d; open it read-write once to migrate to %d", path, v, schemaVersion)
	}
	return nil
}
