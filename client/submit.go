package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/clientknob"
	"github.com/idemctl/idemctl/internal/wire"
)

// CallOption sets a part of one call (Call, Submit).
type CallOption func(*callConfig)

type callConfig struct {
	key        string
	clientID   string
	seq        *int64
	notifyURL  string
	preferWait *time.Duration
}

// WithKey sends the call under key instead of a fresh NewKey(). A program
// that may crash between attempts stores the key before the first one and
// passes it again after a restart: the server then answers with the call
// it already has instead of making a second one.
func WithKey(key string) CallOption { return func(c *callConfig) { c.key = key } }

// WithClientID labels the call with the caller's name (client_id). It is
// not part of the fingerprint.
func WithClientID(id string) CallOption { return func(c *callConfig) { c.clientID = id } }

// WithSeq labels the call with the caller's sequence number (seq). It is
// not part of the fingerprint.
func WithSeq(n int64) CallOption { return func(c *callConfig) { c.seq = &n } }

// WithNotifyURL asks the server to deliver the call's final state to url
// (a completion webhook: docs/api.md, "Completion webhooks"), so the
// caller need not poll. The server must allow url (serve --webhook-allow),
// else Submit ends with an *APIError of code notify_url_not_allowed. It is
// not part of the fingerprint: a retry with the same key and another url
// is the same call, which keeps its first url. Receivers check each
// delivery with VerifyWebhook.
func WithNotifyURL(url string) CallOption { return func(c *callConfig) { c.notifyURL = url } }

// WithCallPreferWait overrides the client's WithPreferWait for this call.
func WithCallPreferWait(d time.Duration) CallOption {
	return func(c *callConfig) { c.preferWait = &d }
}

// AttemptRecord is what one POST attempt saw, printed by idemctl call as
// one JSON line: {"attempt":1,"error":"timed out","key":"..."} or
// {"attempt":2,"http":202,"key":"...","call_id":"...","status":"pending"}.
type AttemptRecord struct {
	// Attempt numbers the client's POSTs from 1, as the server numbers a
	// call's executions (the call's "attempt"): one numbering for readers
	// of both. The two counts are different things; only the origin is
	// shared.
	Attempt int `json:"attempt"`
	// HTTP is the answer's status, 0 if none came.
	HTTP int `json:"http,omitempty"`
	// Error says why no answer came ("timed out", "connection refused").
	Error string `json:"error,omitempty"`
	// Key is the idempotency key the attempt was sent with.
	Key string `json:"key"`
	// CallID and Status are the call's, on a 2xx answer.
	CallID string `json:"call_id,omitempty"`
	Status Status `json:"status,omitempty"`
	// Replayed: the answer was a call that already existed
	// (Idempotent-Replayed: true).
	Replayed bool `json:"replayed,omitempty"`
	// Code is the server's error code on a non-2xx answer.
	Code string `json:"code,omitempty"`
	// Retry says whether the client will try again after this attempt.
	Retry bool `json:"retry,omitempty"`
}

// Submission is how Submit's POST ended.
type Submission struct {
	// Call is the call from the last 2xx answer (zero if none). It may
	// still be pending or running: Wait for it.
	Call Call
	// Key is the idempotency key the call was sent under: keep it to ask
	// again (GetByKey, WaitByKey, or Submit WithKey) if the answer is lost.
	Key string
	// HTTP is the status of the last answer (0 if the last attempt got
	// none).
	HTTP int
	// Replayed: the server answered with an existing call
	// (Idempotent-Replayed: true) rather than creating one.
	Replayed bool
	// Attempts holds one record per attempt, in order.
	Attempts []AttemptRecord
}

// Call makes one logical call of tool with args and returns it once it is
// final: Submit, then Wait for the call if the held answer was not final
// yet. args is anything that encodes to a JSON object (a map, a struct,
// json.RawMessage); nil sends {}.
//
// A call that ended failed is returned with a *CallError (its code, and
// whether a same-key retry may run it again: call Call again WithKey of
// the call's IdemKey). When the POST never got an answer, the error
// matches ErrRetryExhausted and the call may or may not exist: ask again
// with the same key, never a new one.
func (c *Client) Call(ctx context.Context, tool string, args any, opts ...CallOption) (Call, error) {
	sub, err := c.Submit(ctx, tool, args, opts...)
	if err != nil {
		return sub.Call, err
	}
	if sub.Call.Final() {
		return sub.Call, finalError(sub.Call)
	}
	return c.Wait(ctx, sub.Call.CallID)
}

// Submit sends the call (POST /v1/tool-calls) and returns the server's
// first answer, retrying:
//   - the key is chosen once, before the first attempt (WithKey, or a
//     fresh NewKey()), and every attempt sends it unchanged;
//   - only timeouts (the client's, or the server's 408), connection
//     errors, 429 and 503 are retried, after
//     min(2^attempt × 100ms, 1s) + jitter, or the server's Retry-After if
//     longer;
//   - any other non-2xx ends at once with an *APIError carrying the
//     server's code (bad_request, idempotency_conflict, ...);
//   - when the retries run out the error is an *APIError with code
//     retry_exhausted (errors.Is(err, ErrRetryExhausted)), wrapping the
//     last attempt's failure (errors.Is(err, ErrOverloaded) after a full
//     queue, say).
//
// The call it returns may still be pending: Wait for it. The Submission
// is filled as far as the POST got, also on error.
func (c *Client) Submit(ctx context.Context, tool string, args any, opts ...CallOption) (Submission, error) {
	var cc callConfig
	for _, o := range opts {
		o(&cc)
	}
	key := cc.key
	if key == "" {
		key = NewKey()
	}
	if err := CheckKey(key); err != nil {
		return Submission{Key: key}, err
	}
	if args == nil {
		args = struct{}{}
	}
	body, err := json.Marshal(wire.CallRequest{Tool: tool, Args: args, ClientID: cc.clientID, Seq: cc.seq, NotifyURL: cc.notifyURL})
	if err != nil {
		return Submission{Key: key}, fmt.Errorf("client: encoding request: %w", err)
	}
	hold := c.cfg.preferWait
	if cc.preferWait != nil {
		hold = max(0, *cc.preferWait)
	}
	// Prefer: wait counts whole seconds: the server holds the rounded-up
	// time, and the attempt's timeout must cover that, not the asked one.
	hold = (hold + time.Second - 1) / time.Second * time.Second
	newKeyOnRetry := clientknob.NewKeyOnRetry(ctx)

	res := Submission{Key: key}
	var lastErr error
	retries := c.cfg.retries
	for attempt := 0; attempt <= retries; attempt++ {
		attemptKey := key
		if newKeyOnRetry {
			attemptKey = fmt.Sprintf("%s-%d", key, attempt) // the new-key bug, on purpose
		}
		rec, rep, err := c.post(ctx, attemptKey, body, hold)
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
		if c.cfg.onAttempt != nil {
			c.cfg.onAttempt(rec)
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
		wait := Backoff(attempt) + c.randomJitter()
		if err == nil && rep.retryAfter > wait {
			wait = rep.retryAfter // the server knows better when it can take us
		}
		if err := c.pause(ctx, wait); err != nil {
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

// post sends one attempt, bounded by the attempt timeout plus the hold it
// asks the server for (whole seconds).
func (c *Client) post(ctx context.Context, key string, body []byte, hold time.Duration) (AttemptRecord, reply, error) {
	rec := AttemptRecord{Key: key}
	actx, cancel := context.WithTimeout(ctx, c.cfg.attemptTimeout+hold)
	defer cancel()
	hreq, err := c.newRequest(actx, http.MethodPost, wire.PathCalls, bytes.NewReader(body))
	if err != nil {
		return rec, reply{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(wire.HeaderIdempotencyKey, key)
	// net/http silently resends a request that carries an Idempotency-Key
	// when a reused connection dies, if it can rewind the body (GetBody).
	// Retries are this loop's job: each physical attempt must be counted,
	// backed off and reported, so the transport may not add invisible ones.
	hreq.GetBody = nil
	if via := clientknob.Via(ctx); via != "" {
		hreq.Header.Set(wire.HeaderVia, via)
	}
	if hold > 0 {
		hreq.Header.Set(wire.HeaderPrefer, wire.PreferWait+"="+strconv.FormatInt(int64(hold/time.Second), 10))
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

// finalError is nil for a succeeded call and a *CallError for a failed one.
func finalError(call Call) error {
	if call.Status != wire.StatusFailed {
		return nil
	}
	ce := &CallError{Call: call}
	// A call the server reports failed always has an error object; should
	// one be missing or unreadable, the CallError still says the call
	// failed, with an empty code.
	var obj wire.CallError
	if json.Unmarshal(call.Error, &obj) == nil {
		ce.Code, ce.Message, ce.Retryable, ce.Status = obj.Code, obj.Message, obj.Retryable, obj.Status
	}
	return ce
}
