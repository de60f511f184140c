// Package client is the Go client of the idemctl HTTP API (docs/client.md):
// it makes a side-effecting tool call through an idemctl server so that the
// effect happens at most once, however often the network loses a request or
// an answer.
//
// The one rule the package exists to enforce: the idempotency key is chosen
// once, before the first attempt, and every retry presents it unchanged. A
// timeout is not a failure; it is "don't know", and the only safe way to find
// out is to ask again with the same key. Call does the whole loop; Submit,
// Get, GetByKey, Wait and WaitByKey are its steps, for programs that keep
// the key and the call id themselves.
//
// Every error the server answers with is an *APIError; the common ones
// match a sentinel with errors.Is (ErrConflict, ErrNotFound,
// ErrUnauthorized, ErrOverloaded, ErrUnavailable). A call that ended failed
// is a *CallError carrying the call's error code and whether a same-key
// retry may run it again.
package client

import (
	"bytes"
	"context"
	"encoding/json"
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

// Defaults of a Client made by New without options.
const (
	// DefaultAttemptTimeout bounds one request (connect, send, read the
	// reply). A POST that asks the server to hold its answer gets the hold
	// on top (WithPreferWait).
	DefaultAttemptTimeout = time.Second
	// DefaultRetries is how many times a retryable POST is repeated after
	// the first attempt.
	DefaultRetries = 3
	// DefaultPreferWait is how long Call and Submit ask the server to hold
	// a POST's answer until the call is final (Prefer: wait=5).
	DefaultPreferWait = 5 * time.Second
	// DefaultWaitTimeout bounds Wait and WaitByKey, and Call's wait after
	// the POST.
	DefaultWaitTimeout = 30 * time.Second
)

// Backoff between attempts and polls.
const (
	// BaseBackoff is the first backoff step between POST attempts:
	// 2^attempt × BaseBackoff, capped at MaxBackoff.
	BaseBackoff = 100 * time.Millisecond
	// MaxBackoff caps the exponential backoff between attempts.
	MaxBackoff = time.Second
	// MaxJitter bounds the random jitter added to each backoff, which keeps
	// many clients from retrying in step.
	MaxJitter = 50 * time.Millisecond
	// MaxRetryAfter caps how long a server's Retry-After can hold the
	// client.
	MaxRetryAfter = 30 * time.Second
	// PollStart is the first pause between two polls of Wait; it doubles
	// each time up to PollMax.
	PollStart = 50 * time.Millisecond
	// PollMax caps the pause between two polls.
	PollMax = time.Second
)

// maxResponseBytes bounds how much of a reply is read; a call is small.
const maxResponseBytes = 4 << 20

// Client talks to one idemctl server. Make one with New; it is safe for
// use by many goroutines at once.
type Client struct {
	base string
	cfg  config
	// sleep and jitter are replaced by the package's tests, which measure
	// backoff without waiting for it.
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func() time.Duration
}

type config struct {
	hc             *http.Client
	token          string
	attemptTimeout time.Duration
	retries        int
	preferWait     time.Duration
	waitTimeout    time.Duration
	onAttempt      func(AttemptRecord)
}

// Option configures a Client (New).
type Option func(*config)

// WithToken sends "Authorization: Bearer token" on every request, for a
// server run with auth tokens (docs/api.md, "Authentication"). The token
// is only ever put in that header: never in a URL, a log line or an error.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHTTPClient makes requests through hc instead of a default
// *http.Client. Its own Timeout should be zero: the client bounds each
// request itself (WithAttemptTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithAttemptTimeout bounds one request (DefaultAttemptTimeout). A POST
// that asks the server to hold its answer gets the hold on top.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) { c.attemptTimeout = d }
}

// WithRetries sets how many times a POST whose outcome is unknown (a
// timeout, a lost connection) or that the server asked to come back later
// (408, 429, 503) is repeated after the first attempt: 0 means none
// (DefaultRetries).
func WithRetries(n int) Option { return func(c *config) { c.retries = n } }

// WithPreferWait sets how long a POST asks the server to hold its answer
// until the call is final (Prefer: wait=N, whole seconds rounded up;
// DefaultPreferWait). 0 sends no Prefer header: the server answers at once,
// usually with the call still pending.
func WithPreferWait(d time.Duration) Option { return func(c *config) { c.preferWait = d } }

// WithWaitTimeout bounds Wait and WaitByKey, and Call's wait once the POST
// was answered (DefaultWaitTimeout).
func WithWaitTimeout(d time.Duration) Option { return func(c *config) { c.waitTimeout = d } }

// WithOnAttempt calls f after every POST attempt with what it saw, for
// logging (`idemctl call` prints each as a JSON line). f must not block.
func WithOnAttempt(f func(AttemptRecord)) Option { return func(c *config) { c.onAttempt = f } }

// New returns a client of the server at base, an absolute http:// or
// https:// URL such as http://127.0.0.1:8081 (a path prefix is kept). A
// base or an option that can never work is an error here, before any
// request.
func New(base string, opts ...Option) (*Client, error) {
	if err := CheckBase(base); err != nil {
		return nil, err
	}
	cfg := config{
		attemptTimeout: DefaultAttemptTimeout,
		retries:        DefaultRetries,
		preferWait:     DefaultPreferWait,
		waitTimeout:    DefaultWaitTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.attemptTimeout <= 0:
		return nil, fmt.Errorf("client: attempt timeout must be positive, got %s", cfg.attemptTimeout)
	case cfg.retries < 0:
		return nil, fmt.Errorf("client: retries must be ≥ 0, got %d", cfg.retries)
	case cfg.preferWait < 0:
		return nil, fmt.Errorf("client: prefer wait must be ≥ 0, got %s", cfg.preferWait)
	case cfg.waitTimeout <= 0:
		return nil, fmt.Errorf("client: wait timeout must be positive, got %s", cfg.waitTimeout)
	}
	if cfg.hc == nil {
		cfg.hc = defaultHTTP
	}
	return &Client{base: strings.TrimRight(base, "/"), cfg: cfg}, nil
}

// defaultHTTP has no overall timeout: each request carries its own deadline.
var defaultHTTP = &http.Client{}

// Base is the server's base URL the client was made with, without a
// trailing slash.
func (c *Client) Base() string { return c.base }

// CheckBase reports whether base is an absolute http:// or https:// URL
// with a host. New checks it first: net/http's error for a bad scheme
// looks like any other failed request, and would otherwise be retried
// until the retries or the deadline ran out.
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

// Backoff is the pause before retry number attempt+1:
// min(2^attempt × BaseBackoff, MaxBackoff), without jitter.
func Backoff(attempt int) time.Duration {
	if attempt >= 4 { // 2^4 × 100ms already exceeds the cap; avoids overflow
		return MaxBackoff
	}
	return min(BaseBackoff<<attempt, MaxBackoff)
}

func (c *Client) pause(ctx context.Context, d time.Duration) error {
	if c.sleep != nil {
		return c.sleep(ctx, d)
	}
	return ctxutil.Sleep(ctx, d)
}

func (c *Client) randomJitter() time.Duration {
	if c.jitter != nil {
		return c.jitter()
	}
	return rand.N(MaxJitter)
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

// retryable reports a "try later" answer. 400/409 and the rest mean the
// same request will get the same answer. 408 is the server's own timeout
// (the body did not arrive in time; nothing was stored), a timeout like
// the client's, so the same key may safely be sent again.
func (r reply) retryable() bool {
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

// newRequest builds a request of path under the client's base.
func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.token != "" {
		req.Header.Set(wire.HeaderAuthorization, "Bearer "+c.cfg.token)
	}
	return req, nil
}

// do sends req and reads the whole reply (under req's deadline). Errors
// that happen before a status line arrives, or while the body is read, are
// wrapped in transportError: the request may or may not have been applied.
// A non-2xx body is decoded as the API's error shape; a 2xx body is left
// to the caller.
func (c *Client) do(req *http.Request) (reply, error) {
	resp, err := c.cfg.hc.Do(req)
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

// get sends one GET bounded by the attempt timeout, through do (or doCall
// when the answer is a call).
func (c *Client) get(ctx context.Context, path string, isCall bool) (reply, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.attemptTimeout)
	defer cancel()
	req, err := c.newRequest(actx, http.MethodGet, path, nil)
	if err != nil {
		return reply{}, err
	}
	if isCall {
		return c.doCall(req)
	}
	return c.do(req)
}

// Get returns the call with that id as it is now: one request, no retry. A
// missing call is an *APIError with code not_found (errors.Is(err,
// ErrNotFound)).
func (c *Client) Get(ctx context.Context, callID string) (Call, error) {
	return c.getCall(ctx, callPath(callID))
}

// GetByKey returns the call recorded under an idempotency key as it is
// now: one request, no retry; not_found when the server never recorded the
// key (or recorded it for another principal).
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
