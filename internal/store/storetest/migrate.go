package storetest

import (
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// testMigrateNotBeforeKeepsRows migrates a database of the schema version
// before calls.not_before (Factory.SchemaBefore): its rows stay, with no
// not-before time, and its pending call is claimable as before.
func testMigrateNotBeforeKeepsRows(t *testing.T, su suite) {
	db := su.f.NewDB(t)
	su.f.SchemaBefore(t, db, MigrationNotBefore)
	su.f.Exec(t, db, `INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, attempt, created_at, updated_at)
		VALUES ('c_00000000000000aa', 'old', 'f', 'charge', '{}', 'pending', 0, 1.0, 1.0),
		       ('c_00000000000000bb', 'done', 'f', 'charge', '{}', 'failed', 1, 2.0, 2.0)`)

	s := su.openOn(t, db, store.Options{})
	for _, key := range []string{"old", "done"} {
		c, err := s.GetByKey(t.Context(), store.DefaultPrincipal, key)
		if err != nil || c.NotBefore != nil {
			t.Fatalf("GetByKey(%s) after migration = %+v, %v; want the row, without not_before", key, c, err)
		}
	}
	got, err := s.ClaimNext(t.Context(), "w", time.Minute, 5)
	if err != nil || len(got) != 1 || got[0].CallID != "c_00000000000000aa" {
		t.Fatalf("ClaimNext after migration = %+v, %v; want the old pending call", got, err)
	}
}
