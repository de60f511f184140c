package sqlite

import (
	"context"
	"database/sql"
	"reflect"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// TestQueryCallHotMatchesQueryCall reads calls inside a write both ways,
// through database/sql (queryCall, scanCall) and on the driver connection
// (queryCallHot, callFromRow), and wants the same store.Call: one call
// with every nullable column set and one with none. A statement without a
// hot twin falls back to queryCall. An alias key and a tombstone read the
// same both ways too (aliasByKeyHot, tombstoneByKeyHot).
func TestQueryCallHotMatchesQueryCall(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	ctx := t.Context()
	clientID, seq, notify := "client-7", int64(42), "https://hooks.example/done"
	full, _, err := s.CreateOrGet(ctx, store.NewCall{CallID: "c_00000000000000f1", Principal: "p", IdemKey: "full",
		Fingerprint: "f", ClientID: &clientID, Seq: &seq, Tool: "charge", ArgsJSON: []byte(`{"amount":1}`),
		Via: store.ViaMCP, NotifyURL: &notify, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if err != nil {
		t.Fatal(err)
	}
	bare, _, err := s.CreateOrGet(ctx, store.NewCall{CallID: "c_00000000000000f2", IdemKey: "bare", Fingerprint: "f",
		Tool: "charge", ArgsJSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.w.PrepareContext(ctx, sqlCallByID) // not one of the twins
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	err = s.writeTx(ctx, store.WriteCreate, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE calls SET result_json = '{"r":1}', error_json = '{"code":"x"}',
			lease_until = 12.5, owner = 'w', effect_id = 'eff_1', cancel_requested = 1, not_before = 11.25,
			unknown_outcome = 'no_response' WHERE call_id = ?`, full.CallID); err != nil {
			return err
		}
		for _, id := range []string{full.CallID, bare.CallID} {
			want, err := queryCall(ctx, tx, s.wq.callByID, id)
			if err != nil {
				return err
			}
			for _, st := range []*sql.Stmt{s.wq.callByID, other} {
				got, err := s.queryCallHot(ctx, tx, st, id)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("queryCallHot = %+v\nqueryCall    = %+v", got, want)
				}
			}
		}
		if _, err := s.queryCallHot(ctx, tx, s.wq.callByID, "c_nope"); err != sql.ErrNoRows {
			t.Errorf("queryCallHot of no call = %v, want sql.ErrNoRows", err)
		}
		// An alias, read both ways.
		if _, err := tx.StmtContext(ctx, s.wq.insertAlias).ExecContext(ctx, "p", "alias-key", full.CallID, "fp-alias", 1.0); err != nil {
			return err
		}
		var wantID, wantFP string
		if err := tx.StmtContext(ctx, s.wq.aliasByKey).QueryRowContext(ctx, "p", "alias-key").Scan(&wantID, &wantFP); err != nil {
			return err
		}
		if id, fp, err := s.aliasByKeyHot("p", "alias-key"); err != nil || id != wantID || fp != wantFP || id != full.CallID {
			t.Errorf("aliasByKeyHot = %q, %q, %v; want %q, %q", id, fp, err, wantID, wantFP)
		}
		if _, _, err := s.aliasByKeyHot("p", "no-alias"); err != sql.ErrNoRows {
			t.Errorf("aliasByKeyHot of no alias = %v, want sql.ErrNoRows", err)
		}
		// A tombstone, read both ways.
		if _, err := tx.ExecContext(ctx, `INSERT INTO tombstones (principal, idem_key, fingerprint, call_id, tool, purged_at)
			VALUES ('p', 'gone', 'fp-gone', 'c_00000000000000f9', 'charge', 100.5)`); err != nil {
			return err
		}
		want, err := scanTombstone(tx.StmtContext(ctx, s.wq.tombstoneByKey).QueryRowContext(ctx, "p", "gone", 100.0))
		if err != nil {
			return err
		}
		if got, err := s.tombstoneByKeyHot("p", "gone", 100.0); err != nil || got != want || got.PurgedAt != 100.5 {
			t.Errorf("tombstoneByKeyHot = %+v, %v; want %+v", got, err, want)
		}
		if _, err := s.tombstoneByKeyHot("p", "gone", 101.0); err != sql.ErrNoRows {
			t.Errorf("tombstoneByKeyHot of a tombstone purged too long ago = %v, want sql.ErrNoRows", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHotOutsideCommitter: a hot statement run outside the committer is an
// error (a bug), not a statement on a connection someone else holds.
func TestHotOutsideCommitter(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	ran := false
	if err := s.hot(func(*hotStmts) error { ran = true; return nil }); err == nil || ran {
		t.Fatalf("hot outside the committer = %v (ran %v), want an error and nothing run", err, ran)
	}
}
