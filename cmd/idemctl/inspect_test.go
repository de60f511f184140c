package main

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", to tamper with a test database

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// inspectDB builds a database through the store with two charges, one
// succeeded (with its effect) and one pending, and returns its path and the
// succeeded call's id.
func inspectDB(t *testing.T) (path, paidID string) {
	t.Helper()
	ctx := t.Context()
	path = filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlite.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"c_00000000000000a1", "c_00000000000000b2"} {
		if _, _, err := st.CreateOrGet(ctx, store.NewCall{CallID: id, IdemKey: "k-" + id, Fingerprint: "fp", Tool: "charge", ArgsJSON: json.RawMessage(`{"amount":7}`)}); err != nil {
			t.Fatal(err)
		}
		if id == "c_00000000000000b2" {
			break // stays pending
		}
		claimed, err := st.ClaimNext(ctx, "test-owner", time.Minute, 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		amount := int64(7)
		if _, err := st.Succeed(ctx, store.Completion{Lease: store.Lease{CallID: id, Owner: "test-owner", Attempt: claimed[0].Attempt},
			Result: json.RawMessage(`{"charged":7}`),
			Effect: &store.Effect{EffectID: "eff_00000000000000a1", CallID: id, Tool: "charge", Amount: &amount}}); err != nil {
			t.Fatal(err)
		}
	}
	return path, "c_00000000000000a1"
}

func TestInspectStatsJSON(t *testing.T) {
	t.Parallel()
	path, _ := inspectDB(t)
	out, errOut, code := cliRun(t, "inspect", "stats", "--db", path, "--output", "json")
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var s struct {
		Calls, Effects int64
		ByStatus       map[string]int64 `json:"by_status"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s.Calls != 2 || s.Effects != 1 || s.ByStatus["succeeded"] != 1 || s.ByStatus["pending"] != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestInspectCallsFilterAndDSN(t *testing.T) {
	t.Parallel()
	path, paid := inspectDB(t)
	// sqlite:// DSN, --status filter, table output.
	out, errOut, code := cliRun(t, "inspect", "calls", "--db", "sqlite://"+path, "--status", "pending")
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "c_00000000000000b2") || strings.Contains(out, paid) || !strings.Contains(out, "pending") {
		t.Errorf("calls --status pending:\n%s", out)
	}
	if _, errOut, code := cliRun(t, "inspect", "calls", "--db", path, "--status", "done"); code != exitcode.Usage || !strings.Contains(errOut, "--status") {
		t.Errorf("bad --status: exit %d, %q", code, errOut)
	}
	if _, errOut, code := cliRun(t, "inspect", "calls", "--db", path, "-o", "xml"); code != exitcode.Usage || !strings.Contains(errOut, "--output") {
		t.Errorf("bad --output: exit %d, %q", code, errOut)
	}
}

func TestInspectAuditTimeline(t *testing.T) {
	t.Parallel()
	path, paid := inspectDB(t)
	out, errOut, code := cliRun(t, "inspect", "audit", paid, "--db", path)
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	events := regexp.MustCompile(`\+\d+\.\d{3}s\s*│[^│]*│\s*(\w+)`).FindAllStringSubmatch(out, -1)
	var names []string
	for _, m := range events {
		names = append(names, m[1])
	}
	if strings.Join(names, ",") != "created,claimed,succeeded" {
		t.Errorf("timeline events %q:\n%s", names, out)
	}
	if _, _, code := cliRun(t, "inspect", "audit", "c_ffffffffffffffff", "--db", path); code != exitcode.Failed {
		t.Errorf("audit of an unknown call exited %d, want %d", code, exitcode.Failed)
	}
}

func TestInspectAttemptsAndEffects(t *testing.T) {
	t.Parallel()
	path, paid := inspectDB(t)
	out, _, code := cliRun(t, "inspect", "attempts", "--db", path, "-o", "json")
	var a struct {
		Total   int64 `json:"total"`
		Buckets []struct {
			Attempt, Calls int64
		} `json:"buckets"`
	}
	if code != exitcode.OK || json.Unmarshal([]byte(out), &a) != nil || a.Total != 2 || len(a.Buckets) != 2 {
		t.Errorf("attempts: exit %d %s", code, out)
	}
	out, _, code = cliRun(t, "inspect", "effects", "--db", path)
	if code != exitcode.OK || !strings.Contains(out, "eff_00000000000000a1") || !strings.Contains(out, paid) {
		t.Errorf("effects: exit %d\n%s", code, out)
	}
}

func TestInspectDupesNone(t *testing.T) {
	t.Parallel()
	path, _ := inspectDB(t)
	out, errOut, code := cliRun(t, "inspect", "dupes", "--db", path)
	if code != exitcode.OK || strings.TrimSpace(out) != "no duplicate effects" {
		t.Errorf("exit %d, out %q, err %q", code, out, errOut)
	}
}

// TestInspectDupesExitsOne forces a duplicate effect into a real database:
// the effects table is rebuilt without its UNIQUE(call_id) constraint (the
// failure docs/design.md, "Why effects are unique per call", guards
// against) and a second
// effect for the paid call is inserted. dupes must show it and exit 1.
func TestInspectDupesExitsOne(t *testing.T) {
	t.Parallel()
	path, paid := inspectDB(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'effects'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	// Drop the UNIQUE on call_id, keep every other column as the store made it.
	weak := regexp.MustCompile(`(?i)(call_id[^,]*?)\s+UNIQUE`).ReplaceAllString(ddl, "$1")
	if weak == ddl {
		t.Fatalf("no UNIQUE on effects.call_id in %q", ddl)
	}
	for _, stmt := range []string{
		`PRAGMA foreign_keys = OFF`,
		`ALTER TABLE effects RENAME TO effects_strict`,
		weak,
		`INSERT INTO effects SELECT * FROM effects_strict`,
		`DROP TABLE effects_strict`,
		`INSERT INTO effects SELECT 'eff_forged00000000', call_id, tool, amount, created_at FROM effects WHERE call_id = '` + paid + `'`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	db.Close()

	out, errOut, code := cliRun(t, "inspect", "dupes", "--db", path)
	if code != exitcode.Failed {
		t.Fatalf("exit %d, want 1; out %s err %s", code, out, errOut)
	}
	if !strings.Contains(out, paid) || !strings.Contains(out, "eff_forged00000000") || !strings.Contains(out, "eff_00000000000000a1") {
		t.Errorf("dupes output lacks the call and its effects:\n%s", out)
	}
	if !strings.Contains(errOut, "more than one effect") {
		t.Errorf("stderr %q", errOut)
	}
	out, _, code = cliRun(t, "inspect", "dupes", "--db", path, "-o", "json")
	var rows []struct {
		CallID    string   `json:"call_id"`
		Effects   int64    `json:"effects"`
		EffectIDs []string `json:"effect_ids"`
	}
	if code != exitcode.Failed || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].CallID != paid || rows[0].Effects != 2 || len(rows[0].EffectIDs) != 2 {
		t.Errorf("dupes JSON: exit %d %s", code, out)
	}
}

// TestInspectTombstone: after a purge with tombstones, inspect tombstone
// KEY prints the purged call the key named (table and JSON); a key
// without one exits 1 naming it.
func TestInspectTombstone(t *testing.T) {
	path, paidID := inspectDB(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE calls SET updated_at = updated_at - 7200 WHERE call_id = ?`, paidID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := sqlite.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.Purge(t.Context(), time.Hour, 10, true); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	st.Close()

	out, errOut, code := cliRun(t, "inspect", "tombstone", "k-"+paidID, "--db", path, "-o", "json")
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		CallID   string  `json:"call_id"`
		Key      string  `json:"idem_key"`
		Tool     string  `json:"tool"`
		PurgedAt float64 `json:"purged_at"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.CallID != paidID || got.Key != "k-"+paidID || got.Tool != "charge" || got.PurgedAt == 0 {
		t.Fatalf("inspect tombstone -o json = %+v, %v: %s", got, err, out)
	}
	out, _, code = cliRun(t, "inspect", "tombstone", "k-"+paidID, "--db", path)
	if code != exitcode.OK || !strings.Contains(out, paidID) || !strings.Contains(out, "purged_at") {
		t.Fatalf("inspect tombstone table: exit %d\n%s", code, out)
	}
	_, errOut, code = cliRun(t, "inspect", "tombstone", "k-never", "--db", path)
	if code != exitcode.Failed || !strings.Contains(errOut, `no tombstone of key "k-never"`) {
		t.Fatalf("unknown key: exit %d, %s; want 1 naming the key", code, errOut)
	}
}
