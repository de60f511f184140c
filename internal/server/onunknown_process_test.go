package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestProcessKillDuringLookupToolAttempt: kill -9 of the server while an
// attempt of an on_unknown: lookup tool is in flight (the downstream has
// the request and has not answered). Restarted on the same database, the
// server recovers the call (its attempt abandoned: outcome unknown) and
// asks the downstream before any new attempt: with the charge made, the
// call succeeds from the lookup and the charge is never sent again;
// without it, the lookup comes first and then the attempt.
func TestProcessKillDuringLookupToolAttempt(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	for _, tc := range []struct {
		name    string
		charged bool // the in-flight request charged before the kill
		want    []string
		events  []string
	}{
		{"found", true, []string{"POST", "LOOKUP"}, []string{store.EventLookupFound, store.EventSucceeded}},
		{"not found", false, []string{"POST", "LOOKUP", "POST"}, []string{store.EventLookupNotFound, store.EventSucceeded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newKeylessDownstream(t)
			// The first POST never answers: it waits (charged or not)
			// until the test ends, long after the server was killed.
			hold, held := make(chan struct{}), make(chan struct{}, 1)
			inner := d.serve
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d.mu.Lock()
				first := r.Method == http.MethodPost && !contains(d.log, "POST")
				if first {
					d.log = append(d.log, "POST")
					if tc.charged {
						d.charges[r.Header.Get(wire.HeaderIdempotencyKey)]++
					}
				}
				d.mu.Unlock()
				if !first {
					inner(w, r)
					return
				}
				held <- struct{}{}
				<-hold
			}))
			t.Cleanup(ts.Close)
			t.Cleanup(func() { close(hold) }) // first: Close waits for the held request
			srv := ts.URL
			d.url = srv
			dir := t.TempDir()
			tools := filepath.Join(dir, "tools.yaml")
			if err := os.WriteFile(tools, []byte(`tools:
  - name: pay
    kind: http
    url: `+srv+`/charges
    timeout: 1h
    on_unknown: lookup
    lookup: {url: "`+srv+`/charges?key={effect_id}"}
`), 0o600); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "idem.db")
			p := startServe(t, bin, "--db", db, "--tools", tools)
			if s, _, err := tryPost(p.URL, "k-kill", payBody); err != nil || s != http.StatusAccepted {
				t.Fatalf("post: %d %v", s, err)
			}
			<-held // the attempt's request is at the downstream
			p.Kill()

			p2 := startServe(t, bin, "--db", db, "--tools", tools)
			done := waitByKey(t, p2.URL, "k-kill", func(c wire.Call) bool { return c.Status.Final() })
			if done.Status != store.StatusSucceeded || done.Attempt != 2 {
				t.Fatalf("after the kill: %s at attempt %d, want succeeded at attempt 2", done.Status, done.Attempt)
			}
			if got := d.requests(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("downstream saw %v, want %v: a lookup before any new attempt", got, tc.want)
			}
			if n := d.chargesOf(tool.EffectID(done.CallID)); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
			if _, err := p2.Stop(waitDeadline); err != nil {
				t.Fatal(err)
			}
			st := openDB(t, db)
			want := append([]string{store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventRecover,
				store.EventClaimed}, tc.events...)
			wantEvents(t, auditEvents(t, st, done.CallID), want...)
			if dt := lastDetail(t, st, done.CallID, store.EventOutcomeUnknown); dt[:len(wire.UnknownAbandoned)] != wire.UnknownAbandoned {
				t.Fatalf("outcome_unknown detail %q, want the abandoned case", dt)
			}
		})
	}
}
