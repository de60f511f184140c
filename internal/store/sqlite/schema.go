package sqlite

import (
	"context"
	"database/sql"
	"fmt"
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
}

// schemaVersion is the user_version this build creates and understands.
var schemaVersion = len(migrations)

// minReadVersion is the oldest schema a read-only store accepts. Migrations
// after 1 only add indexes, which change no query's result, so inspect can
// read a database that an older server still runs on without migrating it
// (a read-only store cannot migrate).
const minReadVersion = 1

// migrate brings the database to schemaVersion in one IMMEDIATE transaction,
// so two servers starting on one file at once migrate it once.
func migrate(ctx context.Context, w *sql.DB, path string) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, mapErr(ctx, "migrate: begin", err))
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, mapErr(ctx, "read user_version", err))
	}
	if v > schemaVersion {
		return fmt.Errorf("sqlite: %s has schema version %d, newer than this idemctl's %d", path, v, schemaVersion)
	}
	for i := v; i < schemaVersion; i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("sqlite: %s: migration %d: %w", path, i+1, mapErr(ctx, "migrate", err))
		}
	}
	if v != schemaVersion {
		// user_version lives in the file header and is transactional: it
		// commits with the tables or not at all. PRAGMA takes no bind
		// parameters; the value is our own integer.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
			return fmt.Errorf("sqlite: %s: set user_version: %w", path, mapErr(ctx, "migrate", err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, mapErr(ctx, "migrate: commit", err))
	}
	return nil
}

// checkVersion verifies, for a read-only open, that the file holds a schema
// this build can read. A read-only store never creates or migrates.
func checkVersion(ctx context.Context, r *sql.DB, path string) error {
	var v int
	if err := r.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("sqlite: open %s read-only: %w", path, mapErr(ctx, "read user_version", err))
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
