package server

// The seven failure scenarios of the design, in Go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/wire"
)

const charge100 = `{"tool":"charge","args":{"amount":100},"client_id":"demo","seq":1}`

func TestSameKeyReturnsSameCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post("k-same", charge100)
	if first.status != http.StatusAccepted {
		t.Fatalf("first POST: got %d, want 202: %s", first.status, first.body)
	}
	c1 := first.call(t)
	done := b.waitFinal(c1.CallID)

	again := b.post("k-same", charge100)
	if again.status != http.StatusOK {
		t.Fatalf("second POST of a finished call: got %d, want 200: %s", again.status, again.body)
	}
	c2 := again.call(t)
	if c2.CallID != c1.CallID {
		t.Fatalf("same key gave two calls: %s and %s", c1.CallID, c2.CallID)
	}
	if !bytes.Equal(c2.Result, done.Result) || c2.Attempt != 1 {
		t.Fatalf("replay changed the call: result %s attempt %d, want %s attempt 1", c2.Result, c2.Attempt, done.Result)
	}
	if s := b.stats(); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
}

func TestDifferentKeyCreatesNewCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.post("k-a", charge100).call(t)
	c := b.post("k-b", charge100).call(t)
	if a.CallID == c.CallID {
		t.Fatalf("two keys share call %s", a.CallID)
	}
	b.waitFinal(a.CallID)
	b.waitFinal(c.CallID)
	if s := b.stats(); s.Calls != 2 || s.Effects != 2 {
		t.Fatalf("calls=%d effects=%d, want 2 and 2 (a new key is a new logical call)", s.Calls, s.Effects)
	}
}

func TestSameKeyDifferentArgsConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post("k-conflict", `{"tool":"charge","args":{"amount":1}}`).call(t)
	r := b.post("k-conflict", `{"tool":"charge","args":{"amount":2}}`)
	if r.status != http.StatusConflict || r.errCode(t) != wire.CodeIdempotencyConflict {
		t.Fatalf("got %d %s, want 409 %s", r.status, r.body, wire.CodeIdempotencyConflict)
	}
	done := b.waitFinal(first.CallID)
	if string(done.Args) != `{"amount":1}` {
		t.Fatalf("the conflicting request changed the call's args: %s", done.Args)
	}
	// Still refused once the call is final.
	if r := b.post("k-conflict", `{"tool":"send_email","args":{"to":"a@example.com"}}`); r.status != http.StatusConflict {
		t.Fatalf("other tool, same key: got %d, want 409", r.status)
	}
	if s := b.stats(); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
}

func TestConcurrentSameKeyOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 16
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		ids   = make([]string, n)
		codes = make([]int, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start // all at once
			req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/v1/tool-calls", bytes.NewReader([]byte(charge100)))
			req.Header.Set("Idempotency-Key", "k-concurrent")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("POST %d: %v", i, err)
				return
			}
			defer res.Body.Close()
			var c wire.Call
			if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
				t.Errorf("POST %d: body is not a call: %v", i, err)
			}
			ids[i], codes[i] = c.CallID, res.StatusCode
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		if codes[i] != http.StatusOK && codes[i] != http.StatusAccepted {
			t.Fatalf("request %d: status %d", i, codes[i])
		}
		if !isCallID(ids[i]) {
			// Without this, n bodies that all lack a call_id would count
			// as one call id ("") and pass.
			t.Fatalf("request %d: call id %q", i, ids[i])
		}
		seen[ids[i]] = true
	}
	if len(seen) != 1 {
		t.Fatalf("%d concurrent same-key requests saw %d call ids: %v", n, len(seen), seen)
	}
	b.waitFinal(ids[0])
	if s := b.stats(); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
	dupes, err := b.st.Dupes(context.Background())
	if err != nil || len(dupes) != 0 {
		t.Fatalf("dupes: %v %v", dupes, err)
	}
}

func TestFailedRetryableCanBeRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"tool":"fail","args":{"times":1,"message":"flaky"}}`
	c := b.post("k-flaky", body).call(t)
	failed := b.waitFinal(c.CallID)
	var e struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	if err := json.Unmarshal(failed.Error, &e); err != nil || failed.Status != "failed" || !e.Retryable {
		t.Fatalf("first attempt: status %s error %s, want failed and retryable", failed.Status, failed.Error)
	}

	// The server never retries by itself: only this same-key
	// request resets the call.
	r := b.post("k-flaky", body)
	if r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry of a retryable failure: got %d replayed=%q, want 202 replayed: %s",
			r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
	if got := r.call(t); got.CallID != c.CallID {
		t.Fatalf("retry made a new call %s, want %s", got.CallID, c.CallID)
	}
	done := b.waitFinal(c.CallID)
	if done.Status != "succeeded" || done.Attempt != 2 || string(done.Result) != `{"ok":true}` {
		t.Fatalf("after reset: status %s attempt %d result %s, want succeeded, 2, {\"ok\":true}", done.Status, done.Attempt, done.Result)
	}
	if ev := b.events(c.CallID); !contains(ev, "retry_reset") {
		t.Fatalf("audit %v lacks retry_reset", ev)
	}
}

func TestCrashAfterCommitThenRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Chaos = true })
	body := `{"tool":"charge","args":{"amount":9,"_crash_after_commit":true}}`
	c := b.post("k-crash-after", body).call(t)
	select {
	case code := <-b.exits:
		if code != exitcode.Crash {
			t.Fatalf("exit code %d, want %d", code, exitcode.Crash)
		}
	case <-time.After(waitDeadline):
		t.Fatal("the chaos hook never asked to exit")
	}
	// The commit happened before the "crash": the call is final, once.
	if s := b.stats(); s.Effects != 1 {
		t.Fatalf("effects=%d at the crash, want 1", s.Effects)
	}

	// Restart: a second server on the same database file.
	b2 := setupOn(t, b.dbPath, func(c *Config) { c.Chaos = true })
	r := b2.post("k-crash-after", body)
	if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same key after restart: got %d replayed=%q, want 200 replayed: %s", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
	got := r.call(t)
	if got.CallID != c.CallID || got.Status != "succeeded" || got.Attempt != 1 {
		t.Fatalf("after restart: %+v", got)
	}
	var res struct {
		Charged int64 `json:"charged"`
	}
	if err := json.Unmarshal(got.Result, &res); err != nil || res.Charged != 9 {
		t.Fatalf("result %s, want the original charge of 9", got.Result)
	}
	if s := b2.stats(); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
}

func TestDelayResponseThenRetrySameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A proxy that holds the first response long past the client's timeout
	// (the server has already recorded and run the call by then).
	var n atomic.Int64
	release := make(chan struct{})
	defer close(release)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(rec, r)
		if n.Add(1) == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return // the delayed response is never delivered
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer proxy.Close()

	client := &http.Client{Timeout: 300 * time.Millisecond}
	send := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/v1/tool-calls", bytes.NewReader([]byte(charge100)))
		req.Header.Set("Idempotency-Key", "k-delay")
		return client.Do(req)
	}
	if res, err := send(); err == nil {
		res.Body.Close()
		t.Fatalf("first attempt: got %d, want a client timeout", res.StatusCode)
	} else if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("first attempt: %v, want a timeout", err)
	}
	res, err := send() // same key
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusAccepted {
		t.Fatalf("retry: %d %s", res.StatusCode, data)
	}
	if res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("retry was not answered as a replay: the first request did not record the call?")
	}
	var c wire.Call
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	byKey := b.get("/v1/tool-calls/by-key/k-delay").call(t)
	if byKey.CallID != c.CallID {
		t.Fatalf("by-key %s, retry %s", byKey.CallID, c.CallID)
	}
	b.waitFinal(c.CallID)
	if s := b.stats(); s.Calls != 1 || s.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", s.Calls, s.Effects)
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
