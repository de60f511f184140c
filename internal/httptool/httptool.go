// Package httptool runs the http kind of tool (docs/tools.md, "The http
// kind"): one attempt of a call is one HTTP request to a configured URL,
// carrying the call's args as the JSON body and its effect id as the
// Idempotency-Key, so a downstream that honours keys performs the effect
// once however often the call is attempted. The answer is mapped to a
// tool.Outcome: a success with its result (and effect row), or a tool
// error that says whether a retry may help.
package httptool

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// DefaultMaxBody caps the response body read from the downstream (1 MiB).
const DefaultMaxBody = 1 << 20

// MaxResponseHeaderBytes caps the status line and headers of a downstream's
// answer (64 KiB). net/http's own default is 10 MiB, which every attempt
// of every worker could be made to buffer; real answers carry a few
// hundred bytes of headers.
const MaxResponseHeaderBytes = 64 << 10

// MaxRetryAfterLimit bounds a downstream's Retry-After when the tool sets
// no MaxRetryAfter of its own: a downstream answering "ten years" must not
// park a call (and a pending slot) that long.
const MaxRetryAfterLimit = time.Hour

// Error codes of http tool failures (docs/tools.md, "The http kind").
const (
	// CodeDownstreamError: the downstream answered 408, 425, 429 or 5xx
	// (retryable), or something idemctl cannot use: a redirect, a body
	// over the cap, headers over MaxResponseHeaderBytes, a status outside
	// 2xx–5xx (not retryable).
	CodeDownstreamError = wire.CodeDownstreamError
	// CodeDownstreamUnreachable: no answer (connection refused or reset,
	// DNS, TLS); retryable.
	CodeDownstreamUnreachable = wire.CodeDownstreamUnreachable
	// CodeDownstreamTimeout: no complete answer within the tool's timeout;
	// retryable.
	CodeDownstreamTimeout = wire.CodeDownstreamTimeout
	// CodeDownstreamRejected: any other 4xx; not retryable, since the same
	// request would be rejected again.
	CodeDownstreamRejected = wire.CodeDownstreamRejected
	// CodeOutcomeUnknown: the whole request was written, then the timeout
	// struck or the connection was lost before a complete answer: the
	// downstream may have performed the effect. Retryable (the next
	// attempt presents the same key).
	CodeOutcomeUnknown = wire.CodeOutcomeUnknown
)

// Headers idemctl sets on every request; configured headers may not
// replace them.
const (
	HeaderIdempotencyKey = wire.HeaderIdempotencyKey
	HeaderCallID         = wire.HeaderCallID
	HeaderAttempt        = wire.HeaderAttempt
)

// reserved are the header names a configuration may not set: idemctl's own
// and the ones net/http derives from the request.
var reserved = []string{HeaderIdempotencyKey, HeaderCallID, HeaderAttempt,
	"Content-Type", "Content-Length", "Host", "Transfer-Encoding", "Connection"}

// Methods allowed for an http tool; the body always carries the args.
var Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Header is one configured request header.
type Header struct {
	Name  string
	Value Secret
}

// Config describes one http tool.
type Config struct {
	// Name is the tool's name, written into effect rows.
	Name string
	// URL is the absolute http or https URL the request goes to.
	URL string
	// Method is one of Methods; "" means POST.
	Method string
	// Headers are sent on every request, after ${VAR} expansion.
	Headers []Header
	// Timeout bounds one attempt, from connecting to the last byte of
	// the answer; 0 means no bound beyond the caller's context.
	Timeout time.Duration
	// Effect: a success records an effect row under the call's effect id.
	Effect bool
	// MaxBody caps the response body; 0 means DefaultMaxBody.
	MaxBody int64
	// MaxRetryAfter caps how long a downstream's Retry-After may hold the
	// next attempt back (the tools file's retry.max_backoff); 0 means
	// MaxRetryAfterLimit.
	MaxRetryAfter time.Duration
	// Redact are values that must never reach a caller: the secrets the
	// configured headers were expanded from. A downstream that echoes
	// them gets them replaced by "[redacted]" in the result, in the
	// error's body and in the server log (docs/tools.md, "The http kind").
	Redact []Secret
	// Lookup, if set, is how to ask the downstream whether a call's
	// effect happened (Tool.Lookup); checked and defaulted by New.
	Lookup *LookupConfig
	// Transport, if set, replaces the default transport (tests).
	Transport http.RoundTripper
}

// Tool is a ready http tool. It implements tool.Runner.
type Tool struct {
	cfg    Config
	client *http.Client
	redact redactor
}

// New checks cfg and builds the tool. Errors name the field ("url: …").
func New(cfg Config) (*Tool, error) {
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	if !slices.Contains(Methods, cfg.Method) {
		return nil, fmt.Errorf("method: %q is not one of %s", cfg.Method, strings.Join(Methods, ", "))
	}
	if err := CheckURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	for _, h := range cfg.Headers {
		if err := checkHeader(h); err != nil {
			return nil, fmt.Errorf("headers.%s: %w", h.Name, err)
		}
	}
	if cfg.Lookup != nil {
		lc := *cfg.Lookup
		if err := checkLookup(&lc); err != nil {
			return nil, fmt.Errorf("lookup.%w", err)
		}
		cfg.Lookup = &lc
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("timeout: must not be negative, got %s", cfg.Timeout)
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxRetryAfter < 0 {
		return nil, fmt.Errorf("max retry after: must not be negative, got %s", cfg.MaxRetryAfter)
	}
	if cfg.MaxRetryAfter == 0 || cfg.MaxRetryAfter > MaxRetryAfterLimit {
		cfg.MaxRetryAfter = MaxRetryAfterLimit
	}
	rt := cfg.Transport
	if rt == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Workers call the same downstream at once; the default of 2 idle
		// connections per host would open a new one for most calls.
		tr.MaxIdleConnsPerHost = 64
		tr.MaxResponseHeaderBytes = MaxResponseHeaderBytes
		rt = tr
	}
	return &Tool{cfg: cfg, redact: newRedactor(cfg.Redact), client: &http.Client{
		Transport: rt,
		// A redirect is answered as it is (downstream_error): following it
		// would send the args and the configured headers (credentials) to
		// an address nobody configured.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// CheckURL accepts an absolute http or https URL with a host and without
// credentials (those belong in a header, where they are kept secret).
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", raw)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q must start with http:// or https://", raw)
	case u.Host == "":
		return fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return errors.New("must not contain credentials (user:password@); send them in a header, e.g. Authorization: \"Bearer ${TOKEN}\"")
	case u.Fragment != "":
		return fmt.Errorf("%q must not have a #fragment", raw)
	}
	return nil
}

// checkHeader refuses names idemctl sets itself and values that cannot be
// sent. The value is never quoted: it may hold a secret.
func checkHeader(h Header) error {
	if h.Name == "" || strings.ContainsFunc(h.Name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	}) {
		return errors.New("not a valid header name")
	}
	if slices.Contains(reserved, textproto.CanonicalMIMEHeaderKey(h.Name)) {
		return fmt.Errorf("idemctl sets this header itself (reserved: %s)", strings.Join(reserved, ", "))
	}
	if strings.ContainsAny(h.Value.Reveal(), "\r\n\x00") {
		return errors.New("the value (after ${VAR} expansion) contains CR, LF or NUL")
	}
	return nil
}

// String describes the tool without its headers' values.
func (t *Tool) String() string {
	return fmt.Sprintf("http tool %s (%s %s)", t.cfg.Name, t.cfg.Method, t.cfg.URL)
}

// GoString is String (%#v must not dump the headers' storage either).
func (t *Tool) GoString() string { return t.String() }

// Run sends one attempt of inv and maps the answer (docs/tools.md, "The
// http kind"). A non-nil error means no outcome: ctx ended first (the
// attempt is abandoned; the call runs again), or the args cannot be encoded.
func (t *Tool) Run(ctx context.Context, inv tool.Invocation) (out tool.Outcome, err error) {
	if err := ctx.Err(); err != nil {
		return tool.Outcome{}, err
	}
	body, err := RequestBody(inv.Args)
	if err != nil {
		return tool.Outcome{}, err
	}
	effectID := tool.EffectID(inv.CallID)

	actx, cancel := ctx, context.CancelFunc(func() {})
	if t.cfg.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, t.cfg.Timeout)
	}
	defer cancel()
	req, err := http.NewRequestWithContext(actx, t.cfg.Method, t.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return tool.Outcome{}, fmt.Errorf("httptool: %s: building the request: %w", t.cfg.Name, err)
	}
	// net/http resends a request that carries an Idempotency-Key, on a
	// new connection, when a reused one closes before the answer, if it
	// can rewind the body. That second request would be invisible here:
	// against a downstream that ignores keys, a second effect, and the
	// lost answer would never be recorded as outcome_unknown. Without
	// GetBody, the attempt sends its request once.
	req.GetBody = nil
	for _, h := range t.cfg.Headers {
		req.Header.Set(h.Name, h.Value.Reveal())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderIdempotencyKey, effectID)
	req.Header.Set(HeaderCallID, inv.CallID)
	req.Header.Set(HeaderAttempt, strconv.FormatInt(inv.Attempt, 10))
	actx, span := startSpan(actx, req)
	defer func() { telemetry.EndRequest(span, out.Err, err) }()
	// sent tells a failure before the downstream had the whole request
	// (known: nothing happened there) from one after it (unknown: it may
	// have acted). The hook may run on the transport's goroutine.
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	}))

	if !tool.LeaseHeld(ctx) {
		return tool.Outcome{}, ctx.Err() // frozen past the lease: not sent (tool.LeaseHeld)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return t.transportFailure(ctx, actx, inv.Log, "", sent.Load(), err)
	}
	defer resp.Body.Close()
	noteStatus(span, resp.StatusCode)
	data, err := io.ReadAll(io.LimitReader(resp.Body, t.cfg.MaxBody+1))
	if err != nil {
		return t.transportFailure(ctx, actx, inv.Log, "reading the answer: ", true, err)
	}
	return t.outcome(resp, data, inv.CallID, effectID, time.Now())
}

// transportFailure maps a request that got no complete answer. The stored
// message is one of a few fixed phrases: the network error itself names
// the downstream's address ("dial tcp 10.0.3.7:9000: connect: connection
// refused"), which callers of the tool have no business knowing, and may
// quote what the downstream sent. The error itself goes to the server log,
// with the configured secrets redacted.
//
// sent says the whole request had been written: a timeout or a lost
// connection after that is outcome_unknown (docs/lifecycle.md, "Unknown
// outcomes"), since the downstream may have acted on it; before it, or a
// refused connection, DNS or TLS failure, is known not to have reached it.
func (t *Tool) transportFailure(ctx, actx context.Context, log *slog.Logger, what string, sent bool, err error) (tool.Outcome, error) {
	if ctx.Err() != nil {
		return tool.Outcome{}, ctx.Err() // shutdown, not the downstream's fault
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		msg := fmt.Sprintf("%sno complete answer within the tool's timeout of %s", what, t.cfg.Timeout)
		if sent {
			return unknown(wire.UnknownTimeoutAfterSend, "the request was sent, then "+msg), nil
		}
		return failure(CodeDownstreamTimeout, true, 0, msg), nil
	}
	code, retryable, reason := classify(err)
	if sent && code == CodeDownstreamUnreachable && lostConnection(err) {
		code = CodeOutcomeUnknown
	}
	if log != nil {
		// The whole error, *url.Error's method and URL included: the
		// operator needs to know which downstream failed, and how.
		log.Warn("http tool: no usable answer from the downstream", "tool", t.cfg.Name, "code", code,
			"err", t.redact.string(err.Error()))
	}
	if code == CodeOutcomeUnknown {
		return unknown(wire.UnknownResetAfterSend, "the request was sent, then "+what+reason), nil
	}
	return failure(code, retryable, 0, what+reason), nil
}

// lostConnection reports whether err is the connection closing under the
// request (reset, broken pipe, EOF): after the whole request was written,
// that leaves the outcome unknown.
func lostConnection(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// unknown is an outcome_unknown failure of the given case. Retryable: with
// on_unknown: retry (the default) the next attempt presents the same
// Idempotency-Key, which is safe for a downstream that honours keys.
func unknown(kase, msg string) tool.Outcome {
	return tool.Outcome{Err: &tool.ToolError{Code: CodeOutcomeUnknown, Message: msg, Retryable: true, Unknown: kase}}
}

// classify maps a transport error to the error code and the fixed reason
// shown to callers.
func classify(err error) (code string, retryable bool, reason string) {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	// net/http has no sentinel for this one; its message is the only
	// sign (TestHeadersOverTheCap pins it). The same answer would come
	// again: not retryable.
	case strings.Contains(err.Error(), "server response headers exceeded"):
		return CodeDownstreamError, false,
			fmt.Sprintf("the downstream's response headers exceed %d bytes", MaxResponseHeaderBytes)
	case errors.As(err, &dnsErr):
		return CodeDownstreamUnreachable, true, "the downstream's host name could not be resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return CodeDownstreamUnreachable, true, "the downstream refused the connection"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return CodeDownstreamUnreachable, true, "no connection could be opened: the server is out of file descriptors"
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert):
		return CodeDownstreamUnreachable, true, "the TLS handshake with the downstream failed"
	case lostConnection(err):
		return CodeDownstreamUnreachable, true, "the connection to the downstream closed before a complete answer"
	}
	return CodeDownstreamUnreachable, true, "the downstream could not be reached"
}

// outcome maps a complete answer received at now.
func (t *Tool) outcome(resp *http.Response, data []byte, callID, effectID string, now time.Time) (tool.Outcome, error) {
	code := resp.StatusCode
	over := int64(len(data)) > t.cfg.MaxBody
	switch {
	case code >= 200 && code <= 299:
		if over {
			return failure(CodeDownstreamError, false, code,
				fmt.Sprintf("downstream answered %d with a body over %d bytes", code, t.cfg.MaxBody)), nil
		}
		return t.success(code, data, callID, effectID)
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests,
		code >= 500 && code <= 599:
		out := failure(CodeDownstreamError, true, code, fmt.Sprintf("downstream answered %d", code))
		if asked := RetryAfter(resp.Header.Get(wire.HeaderRetryAfter), now); asked > 0 {
			// Kept for the server-side retry, at most MaxRetryAfter; the
			// message says why the call waits (a pending call shows it).
			out.Err.RetryAfter = min(asked, t.cfg.MaxRetryAfter)
			out.Err.Message += " with Retry-After " + asked.String()
			if asked > t.cfg.MaxRetryAfter {
				out.Err.Message += ", capped at " + t.cfg.MaxRetryAfter.String()
			}
		}
		return out, nil
	case code >= 300 && code <= 399:
		return failure(CodeDownstreamError, false, code,
			fmt.Sprintf("downstream answered %d; redirects are not followed (configure the final URL)", code)), nil
	case code >= 400 && code <= 499:
		out := failure(CodeDownstreamRejected, false, code, fmt.Sprintf("downstream rejected the request with %d", code))
		if over {
			out.Err.Message += fmt.Sprintf(" (body over %d bytes not kept)", t.cfg.MaxBody)
		} else if len(data) > 0 {
			out.Err.Body = t.bodyJSON(data)
		}
		return out, nil
	}
	return failure(CodeDownstreamError, false, code, fmt.Sprintf("downstream answered with status %d", code)), nil
}

// success is the outcome of a 2xx answer (or of a lookup's found answer):
// the result {"status", "body", "effect_id"} and, for a tool with an
// effect, the effect row.
func (t *Tool) success(code int, data []byte, callID, effectID string) (tool.Outcome, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the body is stored as the downstream sent it
	if err := enc.Encode(result{Status: code, Body: t.bodyJSON(data), EffectID: effectID}); err != nil {
		return tool.Outcome{}, fmt.Errorf("httptool: encoding the result: %w", err)
	}
	out := tool.Outcome{Result: bytes.TrimRight(buf.Bytes(), "\n")}
	if t.cfg.Effect {
		out.Effect = &store.Effect{EffectID: effectID, CallID: callID, Tool: t.cfg.Name}
	}
	return out, nil
}

// result is a successful call's result. A struct, so the member order is
// fixed.
type result struct {
	Status   int             `json:"status"`
	Body     json.RawMessage `json:"body"`
	EffectID string          `json:"effect_id"`
}

func failure(code string, retryable bool, status int, msg string) tool.Outcome {
	return tool.Outcome{Err: &tool.ToolError{Code: code, Message: msg, Retryable: retryable, Status: status}}
}

// bodyJSON is the body as JSON: compacted if it is JSON, null if empty,
// otherwise a JSON string of it (invalid UTF-8 becomes U+FFFD). The
// configured secrets are redacted either way.
func (t *Tool) bodyJSON(data []byte) json.RawMessage {
	if len(bytes.TrimSpace(data)) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(data) {
		var buf bytes.Buffer
		if json.Compact(&buf, data) == nil {
			return t.redact.json(buf.Bytes())
		}
	}
	return jsonString(t.redact.string(string(data)))
}

// jsonString is s as a JSON string, HTML characters unescaped.
func jsonString(s string) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// RequestBody is the JSON body of a call's request: its args without the
// chaos hook arguments (they are for idemctl, not the downstream), in
// canonical form, so every attempt sends the same bytes.
func RequestBody(args map[string]any) ([]byte, error) {
	clean := make(map[string]any, len(args))
	for k, v := range args {
		if !tool.IsChaosArg(k) {
			clean[k] = v
		}
	}
	body, err := fingerprint.Canonical(clean)
	if err != nil {
		return nil, fmt.Errorf("httptool: encoding args: %w", err)
	}
	return body, nil
}

// RetryAfter parses a Retry-After header value (delay-seconds or an
// HTTP-date, RFC 9110 §10.2.3) relative to now. Missing, malformed and past
// values give 0.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(time.Duration(1<<63-1)/time.Second) {
			return time.Duration(1<<63 - 1)
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
