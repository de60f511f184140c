// Package client is the Go client of the idemctl HTTP API: the same-key
// retry loop, bounded polling and lookup by key when no call_id was ever
// received (docs/api.md, "Submitting a call" and "Waiting for the result").
//
// The one rule the package exists to enforce: the idempotency key is chosen
// once, outside the retry loop, and every attempt presents it unchanged. A
// timeout is not a failure; it is "don't know", and the only safe way to find
// out is to ask again with the same key. NewKeyOnRetry breaks that rule on
// purpose, to reproduce the duplicate side effect (docs/design.md, "What a
// retry with a new key does").
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/ctxutil"
	"github.com/idemctl/idemctl/internal/wire"
)

// Defaults for a zero Client.
const (
	// DefaultTimeout bounds one attempt (connect, send, read the reply).
	DefaultTimeout = time.Second
	// DefaultRetries is how many times a retryable attempt is repeated.
	DefaultRetries = 3
	// MaxBackoff caps the exponential backoff between attempts.
	MaxBackoff = time.Second
	// BaseBackoff is the first backoff step: 2^attempt × BaseBackoff.
	BaseBackoff = 100 * time.Millisecond
	// MaxJitter bounds the default random jitter added to each backoff.
	MaxJitter = 50 * time.Millisecond
	// MaxRetryAfter caps how long a server's Retry-After can hold the client.
	MaxRetryAfter = 30 * time.Second
	// maxResponseBytes bounds how much of a reply is read; a call is small.
	maxResponseBytes = 4 << 20
)

// Client talks to one idemctl server. The zero value (with Base set) is
// ready to use; fields are read, never written, so one Client may be shared
// by many goroutines.
type Client struct {
	// Base is the server's base URL, e.g. http://127.0.0.1:8081.
	Base string
	// HTTP is the transport; nil means a private default client. Its own
	// Timeout should be zero: Client bounds each attempt with Timeout.
	HTTP *http.Client
	// Timeout bounds one attempt; zero means DefaultTimeout.
	Timeout time.Duration
	// Retries is how many times a retryable attempt is repeated after the
	// first: zero means DefaultRetries, negative means no retry at all.
	Retries int
	// NewKeyOnRetry sends each attempt under a key of its own, K-0, K-1,
	// ... (attempt n gets K-(n-1)) instead of K. It exists only to
	// demonstrate the bug (docs/design.md, "What a retry with a new key
	// does"): every retry becomes a new logical call and may charge again.
	NewKeyOnRetry bool
	// Sleep waits d or until ctx is done; nil means a timer. Tests inject
	// one that records the requested durations.
	Sleep func(ctx context.Context, d time.Duration) error
	// Jitter returns the random part added to a backoff; nil means uniform
	// in [0, MaxJitter). Jitter keeps many clients from retrying in step.
	Jitter func() time.Duration
	// OnAttempt, if set, is called after every POST attempt with its record
	// (idemctl call prints each as a JSON line).
	OnAttempt func(AttemptRecord)
	// PreferWait, if positive, asks the server to hold each POST's reply
	// until the call is final or this long has passed (Prefer: wait=N,
	// whole seconds rounded up; docs/api.md, "Waiting for the result").
	// Timeout must exceed it.
	PreferWait time.Duration
	// Via, if set, names the door a new call comes through (header
	// Idemctl-Via): "mcp" for `idemctl mcp`, which forwards an agent's calls
	// over this API. The server records it as the call's via.
	Via string
}

// Request is the body of POST /v1/tool-calls.
type Request struct {
	// Tool is the tool to call: charge, send_email, sleep, fail.
	Tool string
	// Args is anything that encodes to a JSON object: map[string]any,
	// json.RawMessage, a struct. nil sends {}.
	Args any
	// ClientID and Seq are optional labels, not part of the fingerprint.
	ClientID string
	Seq      *int64
}

// Call is the server's view of one logical call (docs/api.md, "The call
// object"), with the bytes the server sent (Raw), which printers prefer.
type Call = wire.ReceivedCall

// AttemptRecord is what one POST attempt saw, printed by idemctl call as one
// JSON line: {"attempt":1,"error":"timed out","key":"..."} or
// {"attempt":2,"http":202,"key":"...","call_id":"...","status":"pending"}.
type AttemptRecord struct {
	// Attempt numbers the client's POSTs from 1, as the server numbers a
	// call's executions (the call's "attempt"): one numbering for readers
	// of both. The two counts are different things; only the origin is
	// shared.
	Attempt  int         `json:"attempt"`
	HTTP     int         `json:"http,omitempty"`
	Error    string      `json:"error,omitempty"`
	Key      string      `json:"key"`
	CallID   string      `json:"call_id,omitempty"`
	Status   wire.Status `json:"status,omitempty"`
	Replayed bool        `json:"replayed,omitempty"`
	// Code is the server's error code on a non-2xx reply.
	Code string `json:"code,omitempty"`
	// Retry says whether the client will try again after this attempt.
	Retry bool `json:"retry,omitempty"`
}

// Result is how a logical call ended from the client's side.
type Result struct {
	// Call is the call from the last 2xx reply (zero if none).
	Call Call
	// HTTP is the status of the last reply (0 if the last attempt got none).
	HTTP int
	// Replayed: the server answered with an existing call
	// (Idempotent-Replayed: true) rather than creating one.
	Replayed bool
	// Key is the key of the last attempt (differs from the requested key
	// only with NewKeyOnRetry).
	Key string
	// Attempts holds one record per attempt, in order.
	Attempts []AttemptRecord
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
}

// defaultHTTP has no overall timeout: each attempt carries its own deadline.
var defaultHTTP = &http.Client{}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c *Client) retries() int {
	switch {
	case c.Retries < 0:
		return 0
	case c.Retries == 0:
		return DefaultRetries
	}
	return c.Retries
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	return ctxutil.Sleep(ctx, d)
}

func (c *Client) jitter() time.Duration {
	if c.Jitter != nil {
		return c.Jitter()
	}
	return rand.N(MaxJitter)
}

// Backoff is the pause before retry number attempt+1:
// min(2^attempt × 100ms, 1s), without jitter.
func Backoff(attempt int) time.Duration {
	if attempt >= 4 { // 2^4 × 100ms already exceeds the cap; avoids overflow
		return MaxBackoff
	}
	return min(BaseBackoff<<attempt, MaxBackoff)
}

// url joins Base and an API path.
func (c *Client) url(path string) string {
	return strings.TrimRight(c.Base, "/") + path
}

// CheckBase reports whether base is an absolute http:// or https:// URL
// with a host. Call and the polls check it first: net/http's error for a
// bad scheme looks like any other failed request, and would otherwise be
// retried until the retries or the deadline ran out.
func CheckBase(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("client: base URL %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("client: base URL %q: want an absolute http:// or https:// URL, like http://127.0.0.1:8081", base)
	}
	return nil
}

// wireRequest is the JSON body of POST /v1/tool-calls.
type wireRequest struct {
	Tool     string `json:"tool"`
	Args     any    `json:"args"`
	ClientID string `json:"client_id,omitempty"`
	Seq      *int64 `json:"seq,omitempty"`
}

// Call makes one logical call under key, retrying:
//   - the key is fixed here, outside the loop (unless NewKeyOnRetry);
//   - only timeouts (the client's, or the server's 408), connection
//     errors, 429 and 503 are retried, after
//     min(2^attempt × 100ms, 1s) + jitter, or the server's Retry-After if
//     longer;
//   - any other non-2xx ends at once with an *APIError carrying the
//     server's code (bad_request, idempotency_conflict, ...);
//   - when the retries run out the error is an *APIError with code
//     retry_exhausted (errors.Is(err, ErrRetryExhausted)).
//
// A 2xx ends the loop; the call it returns may still be pending: use Poll.
// The Result is filled as far as the call got, also on error.
func (c *Client) Call(ctx context.Context, key string, req Request) (Result, error) {
	if key == "" {
		return Result{}, errors.New("client: empty idempotency key")
	}
	if err := CheckBase(c.Base); err != nil {
		return Result{}, err
	}
	args := req.Args
	if args == nil {
		args = struct{}{}
	}
	body, err := json.Marshal(wireRequest{Tool: req.Tool, Args: args, ClientID: req.ClientID, Seq: req.Seq})
	if err != nil {
		return Result{}, fmt.Errorf("client: encoding request: %w", err)
	}

	var res Result
	var lastErr error
	retries := c.retries()
	for attempt := 0; attempt <= retries; attempt++ {
		attemptKey := key
		if c.NewKeyOnRetry {
			attemptKey = fmt.Sprintf("%s-%d", key, attempt) // the new-key bug, on purpose
		}
		rec, rep, err := c.post(ctx, attemptKey, body)
		if err != nil && ctx.Err() != nil {
			// The caller gave up: not a retryable timeout of this attempt.
			return res, ctx.Err()
		}
		rec.Attempt = attempt + 1
		res.Key = attemptKey
		res.HTTP = rec.HTTP
		retryable := (err == nil && rep.retryable()) || (err != nil && isTransport(err))
		rec.Retry = retryable && attempt < retries
		res.Attempts = append(res.Attempts, rec)
		if c.OnAttempt != nil {
			c.OnAttempt(rec)
		}

		switch {
		case err != nil && !isTransport(err):
			return res, err // a bug or a malformed reply: retrying will not help
		case err == nil && rep.status/100 == 2:
			res.Call = rep.call
			res.Replayed = rep.replayed
			return res, nil
		case err == nil && !retryable:
			return res, rep.apiError()
		}

		// Retryable: remember why, then back off.
		if err != nil {
			lastErr = err
		} else {
			lastErr = rep.apiError()
		}
		if attempt == retries {
			break
		}
		wait := Backoff(attempt) + c.jitter()
		if err == nil && rep.retryAfter > wait {
			wait = rep.retryAfter // the server knows better when it can take us
		}
		if err := c.sleep(ctx, wait); err != nil {
			return res, err
		}
	}
	return res, &APIError{
		Status:  res.HTTP,
		Code:    wire.CodeRetryExhausted,
		Message: fmt.Sprintf("no answer after %d attempts: %v", retries+1, lastErr),
		Err:     lastErr,
	}
}

// reply is one HTTP answer, decoded.
type reply struct {
	status     int
	body       []byte
	call       Call // decoded by doCall
	replayed   bool
	retryAfter time.Duration
	errBody    wire.Error
}

func (r reply) retryable() bool {
	// Only "try later" answers are retried; 400/409 and the rest mean the
	// same request will get the same answer. 408 is the server's
	// own timeout (the body did not arrive in time; nothing was stored), a
	// timeout like the client's, so the same key may safely be sent again.
	return r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable ||
		r.status == http.StatusRequestTimeout
}

func (r reply) apiError() *APIError {
	code := r.errBody.Error.Code
	if code == "" {
		code = fmt.Sprintf("http_%d", r.status)
	}
	msg := r.errBody.Error.Message
	if msg == "" {
		msg = http.StatusText(r.status)
	}
	return &APIError{Status: r.status, Code: code, Message: msg, CallID: r.errBody.Error.CallID}
}

// post sends one attempt bounded by the per-attempt timeout.
func (c *Client) post(ctx context.Context, key string, body []byte) (AttemptRecord, reply, error) {
	rec := AttemptRecord{Key: key}
	actx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, c.url(wire.PathCalls), bytes.NewReader(body))
	if err != nil {
		return rec, reply{}, fmt.Errorf("client: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(wire.HeaderIdempotencyKey, key)
	// net/http silently resends a request that carries an Idempotency-Key
	// when a reused connection dies, if it can rewind the body (GetBody).
	// Retries are this loop's job: each physical attempt must be counted,
	// backed off and reported, so the transport may not add invisible ones.
	hreq.GetBody = nil
	if c.Via != "" {
		hreq.Header.Set(wire.HeaderVia, c.Via)
	}
	if c.PreferWait > 0 {
		secs := int64((c.PreferWait + time.Second - 1) / time.Second)
		hreq.Header.Set(wire.HeaderPrefer, wire.PreferWait+"="+strconv.FormatInt(secs, 10))
	}
	rep, err := c.doCall(hreq)
	rec.HTTP = rep.status // 0 when no answer came
	if err != nil {
		rec.Error = describe(err)
		return rec, rep, err
	}
	rec.CallID = rep.call.CallID
	rec.Status = rep.call.Status
	rec.Replayed = rep.replayed
	if rep.status/100 != 2 {
		rec.Code = rep.apiError().Code
	}
	return rec, rep, nil
}

// do sends req and reads the whole reply (under req's deadline). Errors
// that happen before a status line arrives, or while the body is read, are
// wrapped in transportError: the request may or may not have been applied.
// A non-2xx body is decoded as the API's error shape; a 2xx body is left
// to the caller.
func (c *Client) do(req *http.Request) (reply, error) {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return reply{}, &transportError{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return reply{}, &transportError{err: err}
	}
	rep := reply{
		status:     resp.StatusCode,
		body:       bytes.TrimSpace(data),
		replayed:   strings.EqualFold(resp.Header.Get(wire.HeaderIdempotentReplayed), wire.ReplayedTrue),
		retryAfter: parseRetryAfter(resp.Header.Get(wire.HeaderRetryAfter), time.Now()),
	}
	if resp.StatusCode/100 != 2 {
		// A non-JSON error body (from a proxy, say) still yields an
		// APIError, with a synthetic code.
		_ = json.Unmarshal(data, &rep.errBody)
	}
	return rep, nil
}

// doCall is do for the endpoints that answer with a call: a 2xx body is
// decoded into rep.call.
func (c *Client) doCall(req *http.Request) (reply, error) {
	rep, err := c.do(req)
	if err != nil || rep.status/100 != 2 {
		return rep, err
	}
	if err := json.Unmarshal(rep.body, &rep.call); err != nil {
		return rep, fmt.Errorf("client: decoding %s %s reply (HTTP %d): %w", req.Method, req.URL.Path, rep.status, err)
	}
	return rep, nil
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date
// (RFC 9110 §10.2.3), capped at MaxRetryAfter; 0 when absent or malformed.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, MaxRetryAfter))
}

// get sends one GET bounded by the per-attempt timeout, through do (or
// doCall when the answer is a call).
func (c *Client) get(ctx context.Context, path string, isCall bool) (reply, error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, c.url(path), nil)
	if err != nil {
		return reply{}, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if isCall {
		return c.doCall(req)
	}
	return c.do(req)
}

// Get returns the call with that id: one request, no retry. A missing call
// is an *APIError with code not_found (errors.Is(err, ErrNotFound)).
func (c *Client) Get(ctx context.Context, callID string) (Call, error) {
	return c.getCall(ctx, callPath(callID))
}

// GetByKey returns the call recorded under an idempotency key:
// one request, no retry; not_found when the server never recorded the key.
func (c *Client) GetByKey(ctx context.Context, key string) (Call, error) {
	return c.getCall(ctx, keyPath(key))
}

func (c *Client) getCall(ctx context.Context, path string) (Call, error) {
	rep, err := c.get(ctx, path, true)
	if err != nil {
		return Call{}, err
	}
	if rep.status != http.StatusOK {
		return Call{}, rep.apiError()
	}
	return rep.call, nil
}

func callPath(callID string) string { return wire.CallPath(escapeSegment(callID)) }

// keyPath escapes the key as one path segment: keys may contain '/'.
func keyPath(key string) string { return wire.PathCallsByKey + escapeSegment(key) }

// escapeSegment escapes s as one path segment. url.PathEscape leaves '.'
// alone, so the keys "." and ".." would become dot segments, which the
// server's router cleans away (a redirect to another route, then 405); as
// %2E they stay a segment like any other. Every dot is escaped, not only
// whole "." and ".." segments: one rule, and the server decodes it either way.
func escapeSegment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ".", "%2E")
}

// Stats is GET /stats: logical calls against side effects (docs/api.md,
// "Health, stats and metrics").
type Stats struct {
	wire.Stats
	// Raw is the reply as sent, extra fields included.
	Raw json.RawMessage `json:"-"`
}

// Stats fetches GET /stats: one request, no retry.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	rep, err := c.get(ctx, wire.PathStats, false)
	if err != nil {
		return Stats{}, err
	}
	if rep.status != http.StatusOK {
		return Stats{}, rep.apiError()
	}
	var s Stats
	if err := json.Unmarshal(rep.body, &s); err != nil {
		return Stats{}, fmt.Errorf("client: decoding /stats: %w", err)
	}
	s.Raw = json.RawMessage(rep.body)
	return s, nil
}
