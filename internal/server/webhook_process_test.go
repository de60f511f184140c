package server

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestProcessWebhookSurvivesKill: the server is killed (SIGKILL, the
// succeed/after-commit failpoint) right after a call's completion
// committed, before anything was delivered; the outbox row committed
// with it, so a server started again on the database delivers it, signed,
// to the receiver. On SQLite, and on PostgreSQL when
// IDEMCTL_TEST_POSTGRES_URL is set.
func TestProcessWebhookSurvivesKill(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testWebhookSurvivesKill(t, filepath.Join(t.TempDir(), "idem.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.BaseURL(t) // skips without PostgreSQL
		testWebhookSurvivesKill(t, pgtest.New(t).URL)
	})
}

func testWebhookSurvivesKill(t *testing.T, db string) {
	bin := idemctlBinary(t)
	recv := newHookReceiver(t, func(int) int { return http.StatusOK })
	args := []string{"--db", db, "--webhook-allow", recv.URL + "/hooks ${WEBHOOK_TEST_SECRET}", "--log-level", "warn"}
	env := []string{"WEBHOOK_TEST_SECRET=" + hookSecret}

	p, err := serveproc.Start(context.Background(), serveproc.Config{Binary: bin, Chaos: true, Args: args,
		Env: append(env, "IDEMCTL_FAILPOINTS=succeed/after-commit=crash")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("output of the first server:\n%s", p.Stderr())
		}
	})
	status, c, err := tryPost(p.URL, "hook-kill", `{"tool":"charge","args":{"amount":7},"notify_url":"`+recv.URL+`/hooks/k"}`)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("POST: %d %v", status, err)
	}
	if code, err := p.Wait(waitDeadline); err != nil || code != -1 {
		t.Fatalf("the server did not die by SIGKILL at succeed/after-commit: exit %d, %v", code, err)
	}

	// Between the completion and the delivery: the call is final, its
	// delivery waits in the outbox, nothing reached the receiver.
	st, err := backend.Open(context.Background(), db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetAny(context.Background(), c.CallID)
	if err != nil || got.Status != store.StatusSucceeded {
		t.Fatalf("after the kill: %s %v, want succeeded", got.Status, err)
	}
	ds, err := st.Deliveries(context.Background(), c.CallID)
	if err != nil || len(ds) != 1 || ds[0].State != store.DeliveryPending || ds[0].Attempts != 0 {
		t.Fatalf("after the kill: deliveries %+v, %v; want one pending, never attempted", ds, err)
	}
	_ = st.Close()
	if n := len(recv.deliveries()); n != 0 {
		t.Fatalf("%d deliveries before the restart, want 0", n)
	}

	q, err := serveproc.Start(context.Background(), serveproc.Config{Binary: bin, Args: args, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		q.Kill()
		if t.Failed() {
			t.Logf("output of the restarted server:\n%s", q.Stderr())
		}
	})
	eventually(t, "the delivery after the restart", func() bool { return len(recv.deliveries()) > 0 })
	d := recv.deliveries()[0]
	if d.header.Get(wire.HeaderIdempotencyKey) != ds[0].ID || d.header.Get(wire.HeaderCallID) != c.CallID {
		t.Fatalf("delivered %s of %s, want %s of %s", d.header.Get(wire.HeaderIdempotencyKey), d.header.Get(wire.HeaderCallID), ds[0].ID, c.CallID)
	}
	if err := wire.VerifyWebhook(d.header.Get(wire.HeaderSignature), d.body, []byte(hookSecret), time.Minute, time.Now()); err != nil {
		t.Fatalf("signature: %v", err)
	}
	var sent wire.Call
	if err := json.Unmarshal(d.body, &sent); err != nil || sent.CallID != c.CallID || sent.Status != wire.StatusSucceeded {
		t.Fatalf("delivered body %s: %v; want the succeeded call", d.body, err)
	}
	waitByKey(t, q.URL, "hook-kill", func(wire.Call) bool {
		ds := doURL(t, q.URL, http.MethodGet, "/metrics", nil, nil)
		return metricSample(t, ds.body, "idemctl_webhook_pending") == 0
	})
}

// TestProcessWebhookKilledMidDelivery: the server is killed (SIGKILL)
// while its delivery request is at the receiver, unanswered; a server
// started again on the database sends it again once the dead sender's
// lease has lapsed, with the same Idempotency-Key, so the receiver can
// tell it is the same delivery. SQLite.
func TestProcessWebhookKilledMidDelivery(t *testing.T) {
	t.Parallel()
	bin := idemctlBinary(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	recv := newHookReceiver(t, func(n int) int {
		if n == 1 {
			<-release // held until the sender is dead
		}
		return http.StatusOK
	})
	// --webhook-timeout 1s: a claim's lease is 2 × 1s + 5s.
	args := []string{"--db", db, "--webhook-allow", recv.URL + "/ ${WEBHOOK_TEST_SECRET}", "--webhook-timeout", "1s", "--log-level", "warn"}
	env := []string{"WEBHOOK_TEST_SECRET=" + hookSecret}
	p := startServeEnv(t, bin, env, args...)
	status, c, err := tryPost(p.URL, "hook-mid", `{"tool":"charge","args":{"amount":7},"notify_url":"`+recv.URL+`/h"}`)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("POST: %d %v", status, err)
	}
	eventually(t, "the first delivery request at the receiver", func() bool { return len(recv.deliveries()) == 1 })
	p.Kill()
	once.Do(func() { close(release) })

	q := startServeEnv(t, bin, env, args...)
	deadline := time.Now().Add(60 * time.Second) // the lease (7 s) must lapse first; a hang guard
	for len(recv.deliveries()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the delivery was not sent again after the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := recv.deliveries()
	first, second := got[0].header.Get(wire.HeaderIdempotencyKey), got[1].header.Get(wire.HeaderIdempotencyKey)
	if first == "" || first != second || got[1].header.Get(wire.HeaderCallID) != c.CallID {
		t.Fatalf("sent as %q, then as %q (call %s); want the same delivery id twice", first, second, got[1].header.Get(wire.HeaderCallID))
	}
	waitByKey(t, q.URL, "hook-mid", func(wire.Call) bool {
		return metricSample(t, doURL(t, q.URL, http.MethodGet, "/metrics", nil, nil).body, "idemctl_webhook_pending") == 0
	})
}

// startServeEnv is startServe with env added to the process's environment.
func startServeEnv(t *testing.T, bin string, env []string, args ...string) *serveproc.Process {
	t.Helper()
	p, err := serveproc.Start(context.Background(), serveproc.Config{Binary: bin, Args: args, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.CommandLine(), p.Stderr())
		}
	})
	return p
}
