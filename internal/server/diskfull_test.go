package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestDiskFull: with the SQLite file at its page limit (max_page_count, a
// full disk on any file system), a new key answers 503 unavailable and
// stores nothing, /readyz is not ready, everything acknowledged before is
// still there, and once space returns the same server takes the retried
// request and is ready again, without a restart.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.health.retest = time.Hour // only a write may make it ready again here
	acked := map[string]string{}
	for i := range 3 {
		key := fmt.Sprintf("before-%d", i)
		r := b.post(key, `{"tool":"charge","args":{"amount":7}}`)
		if r.status/100 != 2 {
			t.Fatalf("POST %s: %d %s", key, r.status, r.body)
		}
		acked[key] = b.waitFinal(r.call(t).CallID).CallID
	}
	if r := b.get("/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz before the disk filled: %d %s", r.status, r.body)
	}

	if _, err := b.st.(*sqlite.Store).SetMaxPageCount(t.Context(), 1); err != nil { // 1: the file's own size
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"tool":"send_email","args":{"to":"a@example.com","body":%q}}`, strings.Repeat("x", 3000))
	failed := ""
	for i := range 20 { // each new call needs pages; the first that needs a new one fails
		key := fmt.Sprintf("full-%d", i)
		r := b.post(key, body)
		if r.status == http.StatusServiceUnavailable {
			if code := r.errCode(t); code != wire.CodeUnavailable {
				t.Fatalf("POST %s on a full disk: error %q, want %q", key, code, wire.CodeUnavailable)
			}
			failed = key
			break
		}
		if r.status/100 != 2 {
			t.Fatalf("POST %s: %d %s", key, r.status, r.body)
		}
		acked[key] = r.call(t).CallID
	}
	if failed == "" {
		t.Fatal("no write failed with max_page_count at the file's size")
	}
	if r := b.get("/readyz"); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "database writes failing") {
		t.Fatalf("/readyz while writes fail: %d %s, want 503 database writes failing", r.status, r.body)
	}
	if r := b.get("/v1/tool-calls/by-key/" + failed); r.status != http.StatusNotFound {
		t.Errorf("the refused key %s: GET by key %d %s, want 404 (nothing stored)", failed, r.status, r.body)
	}
	for key, id := range acked {
		if r := b.get("/v1/tool-calls/by-key/" + key); r.status != http.StatusOK || r.call(t).CallID != id {
			t.Errorf("acknowledged key %s while the disk is full: %d %s", key, r.status, r.body)
		}
	}

	// Space returns: the same server, no restart.
	if _, err := b.st.(*sqlite.Store).SetMaxPageCount(t.Context(), 1<<30); err != nil {
		t.Fatal(err)
	}
	r := b.post(failed, body)
	if r.status/100 != 2 {
		t.Fatalf("retry of %s once space returned: %d %s", failed, r.status, r.body)
	}
	acked[failed] = r.call(t).CallID
	if r := b.get("/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz after a write succeeded again: %d %s", r.status, r.body)
	}
	for key, id := range acked {
		if c := b.waitFinal(id); c.Status != store.StatusSucceeded {
			t.Errorf("%s: %s, want succeeded", key, c.Status)
		}
	}
	if s := b.stats(); s.Effects != int64(len(acked)) || s.Calls != int64(len(acked)) {
		t.Errorf("%d calls and %d effects, want %d of each", s.Calls, s.Effects, len(acked))
	}
}

// TestWriteHealth: a failed write makes the instance not ready; a write of
// the same kind the database answered, or writeRetest without any, makes
// it ready again; another kind's success or a caller giving up does not.
func TestWriteHealth(t *testing.T) {
	t.Parallel()
	h := &writeHealth{log: testLogger(t), retest: time.Hour}
	if !h.ready() {
		t.Fatal("not ready before any write")
	}
	h.note(store.WriteCreate, fmt.Errorf("disk: %w", store.ErrUnavailable))
	if h.ready() {
		t.Fatal("ready after a failed write")
	}
	h.note(store.WriteCreate, fmt.Errorf("sqlite create: %w", context.Canceled))
	if h.ready() {
		t.Fatal("ready after a caller gave up (says nothing of the database)")
	}
	h.note(store.WriteClaim, nil)
	if h.ready() {
		t.Fatal("ready after a claim succeeded while creates fail")
	}
	h.note(store.WriteCreate, store.ErrConflict)
	if !h.ready() {
		t.Fatal("not ready after the database answered a create (conflict)")
	}
	h.note(store.WriteSucceed, store.ErrUnavailable)
	h.retest = time.Millisecond
	eventually(t, "ready after retest without writes", h.ready)
}
