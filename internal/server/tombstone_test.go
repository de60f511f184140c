package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// ageCall moves a call's last update two hours back in a test server's
// SQLite file, past a one-hour retention.
func ageCall(t *testing.T, b *bundle, callID string) {
	t.Helper()
	db, err := sql.Open("sqlite", b.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `PRAGMA busy_timeout = 5000; UPDATE calls SET updated_at = updated_at - 7200 WHERE call_id = ?`, callID); err != nil {
		t.Fatal(err)
	}
}

// expiredBody reads a 410 idempotency_key_expired answer's error.
func expiredBody(t *testing.T, r resp, what string) wire.ErrorDetail {
	t.Helper()
	var e wire.Error
	if err := json.Unmarshal(r.body, &e); err != nil || r.status != http.StatusGone || e.Error.Code != wire.CodeIdempotencyKeyExpired {
		t.Fatalf("%s: %d %s; want 410 %s", what, r.status, r.body, wire.CodeIdempotencyKeyExpired)
	}
	return e.Error
}

// TestPurgedKeyAnswers410: with tombstones, a key whose call retention
// purged answers POST and GET by key with 410 idempotency_key_expired,
// naming the purged call and the purge time, and runs nothing (no new
// call, no new effect), whatever the body; GET /v1 publishes the
// tombstones' retention.
func TestPurgedKeyAnswers410(t *testing.T) {
	b := setup(t, func(c *Config) { c.Retention, c.TombstoneRetention = time.Hour, 30*24*time.Hour })
	const body = `{"tool":"charge","args":{"amount":5}}`
	old := b.waitFinal(b.post("k-old", body).call(t).CallID)
	ageCall(t, b, old.CallID)
	before := float64(time.Now().Unix())
	if n := b.srv.purgeOnce(context.Background()); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}

	for _, try := range []struct {
		what string
		r    resp
	}{
		{"POST, same request", b.post("k-old", body)},
		{"POST, another request", b.post("k-old", `{"tool":"charge","args":{"amount":6}}`)},
		{"GET by key", b.get(wire.PathCallsByKey + "k-old")},
	} {
		e := expiredBody(t, try.r, try.what)
		if e.CallID != old.CallID || e.PurgedAt == nil || *e.PurgedAt < before-5 || *e.PurgedAt > before+60 {
			t.Fatalf("%s: call_id %q, purged_at %v; want %s purged at about %.0f", try.what, e.CallID, e.PurgedAt, old.CallID, before)
		}
	}
	if st := b.stats(); st.Calls != 0 || st.Effects != 1 {
		t.Fatalf("after the expired key: %d calls, %d effects; want 0 and the purged call's 1", st.Calls, st.Effects)
	}
	// A key never used is still just unknown.
	if r := b.get(wire.PathCallsByKey + "k-never"); r.status != http.StatusNotFound || r.errCode(t) != wire.CodeNotFound {
		t.Fatalf("GET by an unknown key: %d %s; want 404", r.status, r.body)
	}
	var v ServiceView
	if err := json.Unmarshal(b.get("/v1").body, &v); err != nil || v.TombstoneRetentionSeconds != 30*24*3600 {
		t.Fatalf("GET /v1 tombstone_retention_seconds = %d, %v; want %d", v.TombstoneRetentionSeconds, err, 30*24*3600)
	}
}

// TestPurgedKeyNewWithoutTombstones: with --tombstone-retention 0 a purged
// key is new again, as before tombstones; and tombstones left from when
// they were on are swept by the next purge, so the key is new then too.
func TestPurgedKeyNewWithoutTombstones(t *testing.T) {
	dir := t.TempDir()
	on := setupOn(t, dir+"/idem.db", func(c *Config) { c.Retention, c.TombstoneRetention = time.Hour, time.Hour })
	const body = `{"tool":"charge","args":{"amount":5}}`
	old := on.waitFinal(on.post("k-old", body).call(t).CallID)
	ageCall(t, on, old.CallID)
	if n := on.srv.purgeOnce(context.Background()); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	expiredBody(t, on.post("k-old", body), "with tombstones on")

	off := setupOn(t, dir+"/idem.db", func(c *Config) { c.Retention, c.TombstoneRetention = time.Hour, 0 })
	off.srv.purgeOnce(context.Background())
	if _, err := off.st.Tombstone(t.Context(), "", "k-old"); err == nil {
		t.Fatal("a purge with tombstones off left the old tombstone")
	}
	again := off.post("k-old", body)
	if again.status != http.StatusAccepted && again.status != http.StatusOK || again.call(t).CallID == old.CallID {
		t.Fatalf("purged key with tombstones off: %d %s; want a new call", again.status, again.body)
	}
	var v ServiceView
	if err := json.Unmarshal(off.get("/v1").body, &v); err != nil || v.TombstoneRetentionSeconds != 0 {
		t.Fatalf("GET /v1 tombstone_retention_seconds = %d, %v; want 0", v.TombstoneRetentionSeconds, err)
	}
}
