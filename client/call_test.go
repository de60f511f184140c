package client

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCallHoldsThenWaitsUntilFinal: Call asks the server to hold the
// answer (Prefer: wait), and when the held answer is still not final it
// polls the call until it is, returning the final call.
func TestCallHoldsThenWaitsUntilFinal(t *testing.T) {
	var mu sync.Mutex
	var prefer []string
	fs := newFakeServer(t,
		func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			prefer = append(prefer, r.Header.Get("Prefer"))
			mu.Unlock()
			respond(202, callJSON("c_1", "K", "running"))(w, r)
		},
		respond(200, callJSON("c_1", "K", "running")),
		respond(200, callJSON("c_1", "K", "succeeded")))
	c, _ := setup(t, fs.srv.URL, WithPreferWait(2*time.Second))
	call, err := c.Call(t.Context(), "charge", map[string]any{"amount": 1}, WithKey("K"))
	if err != nil || call.Status != StatusSucceeded || call.CallID != "c_1" {
		t.Fatalf("Call = %+v, %v; want the succeeded call", call.Call, err)
	}
	if !slices.Equal(prefer, []string{"wait=2"}) {
		t.Fatalf("Prefer sent = %q, want [wait=2]", prefer)
	}
	if got := fs.seenPaths(); !slices.Equal(got, []string{"/v1/tool-calls", "/v1/tool-calls/c_1", "/v1/tool-calls/c_1"}) {
		t.Fatalf("paths = %v, want the POST then polls until final", got)
	}
}

// TestCallDefaultsToPreferWait: a client made without options holds each
// POST for DefaultPreferWait.
func TestCallDefaultsToPreferWait(t *testing.T) {
	var got string
	fs := newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Prefer")
		respond(200, callJSON("c_1", "K", "succeeded"))(w, r)
	})
	c, err := New(fs.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(t.Context(), "charge", nil); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("wait=%d", int(DefaultPreferWait/time.Second)); got != want {
		t.Fatalf("Prefer = %q, want %q", got, want)
	}
}

// TestCallWithoutKeySendsOneFreshKeyOnEveryRetry: with no WithKey, Call
// picks one new key before the first attempt and every retry sends it.
func TestCallWithoutKeySendsOneFreshKeyOnEveryRetry(t *testing.T) {
	fs := newFakeServer(t, hang, respond(503, errJSON("overloaded")), respond(200, callJSON("c_1", "K", "succeeded")))
	c, _ := setup(t, fs.srv.URL)
	if _, err := c.Call(t.Context(), "charge", nil); err != nil {
		t.Fatal(err)
	}
	keys := fs.seenKeys()
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("keys = %q, want one key, three times", keys)
	}
	if err := CheckKey(keys[0]); err != nil {
		t.Fatalf("the chosen key %q is not a valid key: %v", keys[0], err)
	}
	if _, err := c.Call(t.Context(), "charge", nil); err != nil {
		t.Fatal(err)
	}
	if k := fs.seenKeys()[3]; k == keys[0] {
		t.Fatalf("a second Call reused the first call's key %q", k)
	}
}

// TestCallFailedIsACallError: a call that ends failed is returned with a
// *CallError carrying its code, message, retryable and downstream status.
func TestCallFailedIsACallError(t *testing.T) {
	failed := `{"call_id":"c_1","idem_key":"K","tool":"charge","status":"failed","attempt":2,"result":null,` +
		`"error":{"code":"downstream_rejected","message":"card declined","retryable":false,"status":402},"effect_id":null}`
	for name, script := range map[string][]http.HandlerFunc{
		"held answer":  {respond(200, failed)},
		"after a poll": {respond(202, callJSON("c_1", "K", "pending")), respond(200, failed)},
	} {
		t.Run(name, func(t *testing.T) {
			fs := newFakeServer(t, script...)
			c, _ := setup(t, fs.srv.URL)
			call, err := c.Call(t.Context(), "charge", nil, WithKey("K"))
			var ce *CallError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCallFailed) {
				t.Fatalf("err = %v, want a *CallError", err)
			}
			if ce.Code != CodeDownstreamRejected || ce.Message != "card declined" || ce.Retryable || ce.Status != 402 ||
				ce.Call.CallID != "c_1" || call.Status != StatusFailed {
				t.Fatalf("CallError = %+v, call = %+v", ce, call.Call)
			}
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrRetryExhausted) {
				t.Fatalf("a failed call matched a sentinel of another error: %v", err)
			}
		})
	}
	retryable := `{"call_id":"c_2","status":"failed","error":{"code":"tool_failed","message":"try again","retryable":true}}`
	fs := newFakeServer(t, respond(200, retryable))
	c, _ := setup(t, fs.srv.URL)
	_, err := c.Call(t.Context(), "fail", nil)
	var ce *CallError
	if !errors.As(err, &ce) || !ce.Retryable || ce.Code != CodeToolFailed {
		t.Fatalf("err = %v, want a retryable tool_failed CallError", err)
	}
}

// TestTypedErrors: each error answer matches its own sentinel and no
// other, and is an *APIError with the status and code sent.
func TestTypedErrors(t *testing.T) {
	all := []error{ErrConflict, ErrNotFound, ErrUnauthorized, ErrForbidden, ErrOverloaded, ErrUnavailable,
		ErrAlreadyFinal, ErrRetryExhausted, ErrUnknown, ErrDeadline, ErrInvalidKey, ErrCallFailed}
	for _, tc := range []struct {
		status int
		code   string
		want   []error // the sentinels err must match
	}{
		{409, CodeIdempotencyConflict, []error{ErrConflict}},
		{404, CodeNotFound, []error{ErrNotFound}},
		{401, CodeUnauthenticated, []error{ErrUnauthorized}},
		{403, CodeToolForbidden, []error{ErrForbidden}},
		{400, CodeBadRequest, nil},
		// 503s are retried; once the retries run out, the error is
		// retry_exhausted and still says why.
		{503, CodeOverloaded, []error{ErrRetryExhausted, ErrOverloaded}},
		{503, CodeUnavailable, []error{ErrRetryExhausted, ErrUnavailable}},
	} {
		t.Run(tc.code, func(t *testing.T) {
			fs := newFakeServer(t, respond(tc.status, errJSON(tc.code)))
			c, _ := setup(t, fs.srv.URL, WithRetries(1))
			_, err := c.Call(t.Context(), "charge", nil, WithKey("K"))
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tc.status {
				t.Fatalf("err = %#v, want an *APIError with HTTP %d", err, tc.status)
			}
			for _, s := range all {
				if got, want := errors.Is(err, s), slices.Contains(tc.want, s); got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, want)
				}
			}
		})
	}
}

// TestCancelAlreadyFinal: canceling an ended call is ErrAlreadyFinal, with
// the call as it ended.
func TestCancelAlreadyFinal(t *testing.T) {
	fs := newFakeServer(t, respond(409, `{"error":{"code":"already_final","message":"m","call_id":"c_1"},`+
		`"call":{"call_id":"c_1","status":"succeeded"}}`))
	c, _ := setup(t, fs.srv.URL)
	call, err := c.Cancel(t.Context(), "c_1")
	if !errors.Is(err, ErrAlreadyFinal) || call.CallID != "c_1" || call.Status != StatusSucceeded {
		t.Fatalf("Cancel = %+v, %v; want already_final with the call", call.Call, err)
	}
	if got := fs.seenPaths(); !slices.Equal(got, []string{"/v1/tool-calls/c_1/cancel"}) {
		t.Fatalf("paths = %v", got)
	}
}

// TestWithTokenSendsBearer: WithToken puts the token in the Authorization
// header of every request, and nowhere in an error.
func TestWithTokenSendsBearer(t *testing.T) {
	var mu sync.Mutex
	var got []string
	fs := newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		respond(401, errJSON(CodeUnauthenticated))(w, r)
	})
	c, _ := setup(t, fs.srv.URL, WithToken("s3cret-token"))
	_, err := c.Call(t.Context(), "charge", nil)
	_, err2 := c.Get(t.Context(), "c_1")
	if !slices.Equal(got, []string{"Bearer s3cret-token", "Bearer s3cret-token"}) {
		t.Fatalf("Authorization sent = %q", got)
	}
	for _, e := range []error{err, err2} {
		if !errors.Is(e, ErrUnauthorized) || strings.Contains(e.Error(), "s3cret") {
			t.Fatalf("err = %v, want unauthenticated without the token", e)
		}
	}
}

// TestNewKey: keys are valid Idempotency-Keys and do not repeat.
func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := NewKey()
		if err := CheckKey(k); err != nil {
			t.Fatalf("NewKey() = %q: %v", k, err)
		}
		if seen[k] {
			t.Fatalf("NewKey() repeated %q", k)
		}
		seen[k] = true
	}
}

// TestHeldAttemptOutlastsTheHold: a hold of a fraction of a second asks
// the server for a whole second (Prefer: wait=1), and the attempt's
// deadline covers that second on top of the attempt timeout; else a
// server holding the answer the full second would see the attempt timed
// out and retried.
func TestHeldAttemptOutlastsTheHold(t *testing.T) {
	var prefer string
	var left time.Duration
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		prefer = r.Header.Get("Prefer")
		if d, ok := r.Context().Deadline(); ok {
			left = time.Until(d)
		}
		rec := httptest.NewRecorder()
		respond(200, callJSON("c_1", "K", "running"))(rec, r)
		return rec.Result(), nil
	})
	c, _ := setup(t, "http://127.0.0.1:1", WithAttemptTimeout(500*time.Millisecond),
		WithHTTPClient(&http.Client{Transport: rt}))
	if _, err := c.Submit(t.Context(), "sleep", nil, WithKey("K"), WithCallPreferWait(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// The deadline was set just before the request: it has all of the
	// second and most of the 500ms left.
	if prefer != "wait=1" || left <= time.Second {
		t.Fatalf("Prefer = %q, time left = %s; want wait=1 and more than the 1s hold", prefer, left)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
