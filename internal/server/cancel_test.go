package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

func errorCodeOf(t *testing.T, c wire.Call) string {
	t.Helper()
	var e struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	if err := json.Unmarshal(c.Error, &e); err != nil {
		t.Fatalf("call error %s: %v", c.Error, err)
	}
	if e.Retryable {
		t.Fatalf("call error %s is retryable", c.Error)
	}
	return e.Code
}

// TestCancelEachState: a pending call is failed canceled at once (200), a
// running one is stopped (202, then failed canceled: its tool's context is
// cancelled in this process), a final one is 409 already_final with the
// call, and a canceled key replays the canceled call.
func TestCancelEachState(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Workers = 1 })
	running := b.post("k-sleep", `{"tool":"sleep","args":{"seconds":10}}`).call(t)
	eventuallyStatus(t, b, running.CallID, "running")
	pending := b.post("k-pending", `{"tool":"charge","args":{"amount":1}}`).call(t)

	r := b.do(http.MethodPost, wire.CallPath(pending.CallID)+"/cancel", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("cancel pending: %d %s", r.status, r.body)
	}
	if c := r.call(t); c.Status != "failed" || errorCodeOf(t, c) != wire.CodeCanceled {
		t.Fatalf("canceled pending call = %s %s", c.Status, c.Error)
	}

	r = b.do(http.MethodPost, wire.CallPath(running.CallID)+"/cancel", nil, nil)
	if r.status != http.StatusAccepted || r.call(t).Status != "running" || !r.call(t).CancelRequested {
		t.Fatalf("cancel running: %d %s, want 202 with the running call", r.status, r.body)
	}
	done := b.waitFinal(running.CallID)
	if done.Status != "failed" || errorCodeOf(t, done) != wire.CodeCanceled {
		t.Fatalf("running call after cancel = %s %s, want failed canceled", done.Status, done.Error)
	}

	r = b.do(http.MethodPost, wire.CallPath(running.CallID)+"/cancel", nil, nil)
	var body wire.Error
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusConflict || body.Error.Code != wire.CodeAlreadyFinal || body.Error.CallID != running.CallID ||
		body.Call == nil || body.Call.Status != "failed" {
		t.Fatalf("cancel final: %d %s, want 409 already_final with the call", r.status, r.body)
	}

	again := b.post("k-pending", `{"tool":"charge","args":{"amount":1}}`)
	if c := again.call(t); c.CallID != pending.CallID || c.Status != "failed" {
		t.Fatalf("same key after cancel: %s %s, want the canceled call", c.CallID, c.Status)
	}
	if st := b.stats(); st.Effects != 0 {
		t.Fatalf("effects = %d, want 0", st.Effects)
	}

	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, wire.CallPath("c_ffffffffffffffff") + "/cancel", http.StatusNotFound},
		{http.MethodPost, "/v1/tool-calls/nonsense/cancel", http.StatusNotFound},
		{http.MethodGet, wire.CallPath(pending.CallID) + "/cancel", http.StatusMethodNotAllowed},
		{http.MethodPost, wire.CallPath(pending.CallID) + "/other", http.StatusNotFound},
	} {
		if r := b.do(tc.method, tc.path, nil, nil); r.status != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, r.status, r.body, tc.status)
		}
	}
}

func eventuallyStatus(t *testing.T, b *bundle, id, status string) {
	t.Helper()
	eventually(t, "call "+id+" is "+status, func() bool {
		r := b.get(wire.CallPath(id))
		return r.status == http.StatusOK && string(r.call(t).Status) == status
	})
}

// TestCancelOtherPrincipal: another principal's call cannot be canceled,
// and is not changed.
func TestCancelOtherPrincipal(t *testing.T) {
	t.Parallel()
	b, _ := setupAuth(t, func(c *Config) { c.Workers = 1 })
	c := b.post("k", `{"tool":"sleep","args":{"seconds":10}}`, "Authorization", bearer(aliceToken)).call(t)
	r := b.do(http.MethodPost, wire.CallPath(c.CallID)+"/cancel", nil, map[string]string{"Authorization": bearer(bobToken)})
	if r.status != http.StatusNotFound {
		t.Fatalf("bob cancels alice's call: %d %s, want 404", r.status, r.body)
	}
	got, err := b.st.GetAny(t.Context(), c.CallID)
	if err != nil || got.Status.Final() || got.CancelRequested {
		t.Fatalf("alice's call after bob's cancel: %+v, %v", got, err)
	}
	r = b.do(http.MethodPost, wire.CallPath(c.CallID)+"/cancel", nil, map[string]string{"Authorization": bearer(aliceToken)})
	if r.status != http.StatusOK && r.status != http.StatusAccepted {
		t.Fatalf("alice cancels her call: %d %s", r.status, r.body)
	}
}

// TestResultSizeLimit: a result above MaxResultBytes fails the call with
// result_too_large, not retryable, and leaves no effect.
func TestResultSizeLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.MaxResultBytes = 10 })
	c := b.waitFinal(b.post("k-big", `{"tool":"charge","args":{"amount":1}}`).call(t).CallID)
	if c.Status != "failed" || errorCodeOf(t, c) != wire.CodeResultTooLarge {
		t.Fatalf("call = %s %s, want failed %s", c.Status, c.Error, wire.CodeResultTooLarge)
	}
	if st := b.stats(); st.Effects != 0 {
		t.Fatalf("effects = %d, want 0", st.Effects)
	}
	ok := setup(t)
	if c := ok.waitFinal(ok.post("k", `{"tool":"charge","args":{"amount":1}}`).call(t).CallID); c.Status != "succeeded" {
		t.Fatalf("default limit: %s %s", c.Status, c.Error)
	}
}

// TestCancelThroughAnotherInstanceAtHeartbeat: a cancel recorded in the
// row by another instance (here: the store directly, so this process's
// running-call map never hears of it) reaches the tool at its next
// heartbeat: the 10 s sleep ends failed canceled long before it would
// have finished, with no effect.
func TestCancelThroughAnotherInstanceAtHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Workers = 1; c.Lease = executor.MinLease })
	running := b.post("k-sleep", `{"tool":"sleep","args":{"seconds":10}}`).call(t)
	eventuallyStatus(t, b, running.CallID, "running")
	errJSON := json.RawMessage(`{"code":"canceled","message":"canceled by request","retryable":false}`)
	if _, out, err := b.st.Cancel(t.Context(), running.CallID, errJSON, nil); err != nil || out != store.CancelRequested {
		t.Fatalf("Cancel in the store = %v, %v; want CancelRequested", out, err)
	}
	done := b.waitFinal(running.CallID)
	if done.Status != "failed" || errorCodeOf(t, done) != wire.CodeCanceled {
		t.Fatalf("call after a cancel through another instance = %s %s, want failed canceled", done.Status, done.Error)
	}
	if done.Attempt != 1 {
		t.Fatalf("attempt = %d, want 1: the tool was stopped, not re-run", done.Attempt)
	}
}
