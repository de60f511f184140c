// Package mcptool runs the mcp kind of tool (docs/tools.md, "The mcp
// kind"): an upstream MCP server, reached over streamable HTTP or as a
// stdio command idemctl starts, whose tools idemctl imports. One attempt
// of a call is one tools/call to the upstream carrying the call's effect
// id as its idempotency key, in params._meta and, over HTTP, in the
// Idempotency-Key header of the POST, so an upstream that honours keys
// performs the effect once however often idemctl runs the call.
package mcptool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// The keys of params._meta idemctl sends with every tools/call.
const (
	MetaIdempotencyKey = "io.idemctl/idempotency-key"
	MetaCallID         = "io.idemctl/call-id"
	MetaAttempt        = "io.idemctl/attempt"
)

// Error codes of mcp tool failures (docs/tools.md, "The mcp kind").
const (
	CodeToolError   = wire.CodeUpstreamToolError
	CodeError       = wire.CodeUpstreamError
	CodeUnreachable = wire.CodeUpstreamUnreachable
	CodeTimeout     = wire.CodeUpstreamTimeout
)

// Backoff of reconnections: a stdio server that keeps exiting, or an HTTP
// upstream that keeps refusing, is tried again at most this often.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// EnvVar is one variable of a stdio upstream's environment.
type EnvVar struct {
	Name  string
	Value httptool.Secret
}

// Config describes one upstream MCP server: URL or Command, not both.
type Config struct {
	// Name is the entry's name, for logs.
	Name string
	// URL is the streamable HTTP endpoint.
	URL string
	// Command is the stdio server's argv; idemctl starts it and keeps it
	// running.
	Command []string
	// Env is added to the stdio server's environment (idemctl's own is
	// not passed on beyond PATH and HOME: it may hold idemctl's secrets).
	Env []EnvVar
	// Headers are sent on every HTTP request.
	Headers []httptool.Header
	// Timeout bounds one attempt (and one listing); 0: no bound beyond
	// the caller's context.
	Timeout time.Duration
	// Redact are the secrets the configuration was expanded from: an
	// upstream's echo of one is replaced by "[redacted]" in results,
	// errors and logs.
	Redact []httptool.Secret
	// Log receives the stdio server's stderr and reconnections; nil:
	// discarded.
	Log *slog.Logger
}

// Upstream is a connection to one upstream MCP server, made on first use
// and made again after it breaks. Safe for concurrent use.
type Upstream struct {
	cfg    Config
	redact httptool.Redactor
	client *mcp.Client

	mu       sync.Mutex
	session  *mcp.ClientSession
	failedAt time.Time     // the last failed connect
	backoff  time.Duration // how long after failedAt the next connect may go
	lastErr  error
	closed   bool
}

// New checks cfg and returns the upstream, not yet connected.
func New(cfg Config) (*Upstream, error) {
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		return nil, errors.New("exactly one of url and command is required")
	}
	if cfg.URL != "" {
		if err := httptool.CheckURL(cfg.URL); err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		if len(cfg.Env) > 0 {
			return nil, errors.New("env: only for a stdio server (command)")
		}
	} else if len(cfg.Headers) > 0 {
		return nil, errors.New("headers: only for an HTTP server (url)")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	u := &Upstream{cfg: cfg, redact: httptool.NewRedactor(cfg.Redact)}
	u.client = mcp.NewClient(&mcp.Implementation{Name: "idemctl"}, nil)
	return u, nil
}

// SetLog sets the logger (the server's, known only once it starts).
func (u *Upstream) SetLog(l *slog.Logger) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if l != nil {
		u.cfg.Log = l
	}
}

// String names the upstream without its headers or environment.
func (u *Upstream) String() string {
	if u.cfg.URL != "" {
		return "mcp upstream " + u.cfg.Name + " (" + u.cfg.URL + ")"
	}
	return "mcp upstream " + u.cfg.Name + " (" + u.cfg.Command[0] + ")"
}

// GoString is String.
func (u *Upstream) GoString() string { return u.String() }

type keyCtx struct{}

// headerTransport adds the configured headers to every request and the
// call's idempotency key to the POST that carries its tools/call (the key
// travels in the request's context).
type headerTransport struct {
	base    http.RoundTripper
	headers []httptool.Header
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for _, h := range t.headers {
		req.Header.Set(h.Name, h.Value.Reveal())
	}
	if k, ok := req.Context().Value(keyCtx{}).(string); ok && req.Method == http.MethodPost {
		req.Header.Set(wire.HeaderIdempotencyKey, k)
		// With the key, net/http would resend the tools/call by itself
		// when a reused connection closes before the answer: a second
		// effect at an upstream that ignores keys, which Run neither sees
		// nor counts as sent (see httptool.Tool.Run).
		req.GetBody = nil
	}
	return t.base.RoundTrip(req)
}

// errBackoff: the last connect failed too recently to try again.
var errBackoff = errors.New("the upstream could not be reached; waiting before connecting again")

// connect returns the live session, connecting if there is none.
//
// force skips the backoff: a refresh (at an interval, on SIGHUP) is
// rate-limited already and an operator's SIGHUP must try now.
func (u *Upstream) connect(ctx context.Context, force bool) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errors.New("the upstream is closed")
	}
	if u.session != nil {
		return u.session, nil
	}
	if !force && !u.failedAt.IsZero() && time.Since(u.failedAt) < u.backoff {
		return nil, fmt.Errorf("%w: %v", errBackoff, u.lastErr)
	}
	var tr mcp.Transport
	if u.cfg.URL != "" {
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxResponseHeaderBytes = httptool.MaxResponseHeaderBytes
		tr = &mcp.StreamableClientTransport{Endpoint: u.cfg.URL, DisableStandaloneSSE: true, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: headerTransport{base: base, headers: u.cfg.Headers},
				// Redirects would carry the headers (credentials) elsewhere.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	} else {
		// The process outlives this call: its context is not ctx.
		cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		for _, e := range u.cfg.Env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value.Reveal())
		}
		// The pipe ends (EOF) when the process exits, and so does the
		// goroutine that logs it.
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		go u.logStderr(stderr, u.cfg.Log)
		tr = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	s, err := u.client.Connect(ctx, tr, nil)
	if err != nil {
		u.failedAt = time.Now()
		u.backoff = min(max(2*u.backoff, minBackoff), maxBackoff)
		u.lastErr = errors.New(u.redact.String(err.Error()))
		u.cfg.Log.Warn("mcp upstream: cannot connect", "upstream", u.cfg.Name, "err", u.lastErr, "retry_in", u.backoff.String())
		return nil, err
	}
	u.failedAt, u.backoff, u.lastErr = time.Time{}, 0, nil
	u.session = s
	go func() {
		// A stdio server that exits (or an HTTP session that ends) is
		// dropped, so the next use starts it again (with backoff).
		err := s.Wait()
		if u.drop(s) {
			u.cfg.Log.Warn("mcp upstream: connection ended", "upstream", u.cfg.Name, "err", u.redactErr(err))
		}
	}()
	return s, nil
}

func (u *Upstream) redactErr(err error) string {
	if err == nil {
		return ""
	}
	return u.redact.String(err.Error())
}

// logStderr copies a stdio server's stderr to log, line by line (a line
// over 64 KiB ends the logging, not the server: the rest is discarded).
func (u *Upstream) logStderr(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		log.Info("mcp upstream stderr", "upstream", u.cfg.Name, "line", u.redact.String(sc.Text()))
	}
	_, _ = io.Copy(io.Discard, r)
}

// drop forgets s if it is the live session and closes it; it reports
// whether it was.
func (u *Upstream) drop(s *mcp.ClientSession) bool {
	u.mu.Lock()
	live := u.session == s
	if live {
		u.session = nil
	}
	u.mu.Unlock()
	if live {
		_ = s.Close()
	}
	return live
}

// Close ends the session (and stops a stdio server).
func (u *Upstream) Close() error {
	u.mu.Lock()
	s := u.session
	u.session, u.closed = nil, true
	u.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// Codes the SDK gives errors of its own side, not answers of the
// upstream: the client is closing, the connection ended, the transport
// refused to carry the request (the HTTP POST failed).
const (
	sdkClientClosing = -32003
	sdkServerClosing = -32004
	sdkRejected      = -32005
)

// upstreamError returns the JSON-RPC error the upstream answered, if err
// is one; anything else means no answer came.
func upstreamError(err error) (*jsonrpc.Error, bool) {
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
		return nil, false
	}
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		return nil, false
	}
	switch werr.Code {
	case sdkClientClosing, sdkServerClosing, sdkRejected:
		return nil, false
	}
	return werr, true
}

// broken reports whether err means the session is gone: the next request
// must use a new one.
func broken(err error) bool {
	_, answered := upstreamError(err)
	return err != nil && !answered
}

// List returns the upstream's tools, every page of them.
func (u *Upstream) List(ctx context.Context) ([]*mcp.Tool, error) {
	if u.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, u.cfg.Timeout)
		defer cancel()
	}
	for try := 0; ; try++ {
		s, err := u.connect(ctx, true)
		if err != nil {
			return nil, errors.New(u.redact.String(err.Error()))
		}
		var tools []*mcp.Tool
		for t, err := range s.Tools(ctx, nil) {
			if err != nil {
				if broken(err) && ctx.Err() == nil && try == 0 {
					u.drop(s) // an expired session: once more on a new one
					tools = nil
					break
				}
				return nil, errors.New(u.redact.String(err.Error()))
			}
			tools = append(tools, t)
		}
		if tools != nil || try > 0 {
			return tools, nil
		}
		if u.sessionIs(s) {
			return tools, nil // really no tools
		}
	}
}

func (u *Upstream) sessionIs(s *mcp.ClientSession) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.session == s
}

// Runner runs one imported tool of the upstream.
type Runner struct {
	Up *Upstream
	// Tool is the upstream's name of the tool; Name idemctl's, written
	// into effect rows.
	Tool, Name string
	// Effect: a success records an effect row.
	Effect bool
	// Hold: the tool's on_unknown is hold, so a tools/call that may have
	// reached the upstream is never sent again within the attempt (only
	// one the upstream refused for an unknown session is).
	Hold bool
}

// Run makes one tools/call (docs/tools.md, "The mcp kind"). A non-nil
// error means no outcome: ctx ended first.
func (r Runner) Run(ctx context.Context, inv tool.Invocation) (out tool.Outcome, err error) {
	if err := ctx.Err(); err != nil {
		return tool.Outcome{}, err
	}
	u := r.Up
	effectID := tool.EffectID(inv.CallID)
	args := make(map[string]any, len(inv.Args))
	for k, v := range inv.Args {
		if !tool.IsChaosArg(k) {
			args[k] = v
		}
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if u.cfg.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, u.cfg.Timeout)
	}
	defer cancel()
	actx = context.WithValue(actx, keyCtx{}, effectID)
	params := &mcp.CallToolParams{Name: r.Tool, Arguments: args,
		Meta: mcp.Meta{MetaIdempotencyKey: effectID, MetaCallID: inv.CallID, MetaAttempt: inv.Attempt}}
	actx, span := startSpan(actx, r.Tool, params.Meta)
	defer func() { telemetry.EndRequest(span, out.Err, err) }()

	var res *mcp.CallToolResult
	// sent: a tools/call was handed to a session and not refused unread.
	// Without its answer the outcome is unknown (docs/lifecycle.md,
	// "Unknown outcomes"): the SDK does not say whether the request was
	// written, so a call handed over counts as sent, the safe side for an
	// effect. Only an upstream's "no such session" (404) says it was not
	// acted on.
	sent := false
	for try := 0; try < 2; try++ {
		var s *mcp.ClientSession
		s, err = u.connect(actx, false)
		if err != nil {
			break
		}
		if !tool.LeaseHeld(ctx) {
			return tool.Outcome{}, ctx.Err() // frozen past the lease: not sent (tool.LeaseHeld)
		}
		res, err = s.CallTool(actx, params)
		if err != nil && !errors.Is(err, mcp.ErrSessionMissing) {
			sent = true
		}
		if err == nil || !broken(err) || actx.Err() != nil || (r.Hold && sent) {
			break
		}
		// The session is gone (an HTTP upstream expired it, a stdio
		// server exited): once more on a new one, under the same key.
		u.drop(s)
	}
	if err != nil {
		return r.failure(ctx, actx, inv.Log, sent, err)
	}
	body, err := json.Marshal(res)
	if err != nil {
		return tool.Outcome{}, fmt.Errorf("mcptool: encoding the result: %w", err)
	}
	body = u.redact.JSON(body)
	if res.IsError {
		return tool.Outcome{Err: &tool.ToolError{Code: CodeToolError, Retryable: false, Body: body,
			Message: "the upstream tool answered with isError: true"}}, nil
	}
	out = tool.Outcome{Result: body}
	if r.Effect {
		out.Effect = &store.Effect{EffectID: effectID, CallID: inv.CallID, Tool: r.Name}
	}
	return out, nil
}

// failure maps a tools/call that got no result. sent: a tools/call was
// handed to a session; then a timeout or a broken connection leaves the
// outcome unknown (code outcome_unknown, with issue 21's code in the
// message), a JSON-RPC error does not (it is an answer).
func (r Runner) failure(ctx, actx context.Context, log *slog.Logger, sent bool, err error) (tool.Outcome, error) {
	u := r.Up
	if ctx.Err() != nil {
		return tool.Outcome{}, ctx.Err() // shutdown, lost lease: not the upstream's fault
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		msg := fmt.Sprintf("no answer within the tool's timeout of %s", u.cfg.Timeout)
		if sent {
			return unknown(wire.UnknownTimeoutAfterSend, "the tools/call was sent, then "+msg+" ("+CodeTimeout+")"), nil
		}
		return fail(CodeTimeout, true, msg), nil
	}
	if werr, ok := upstreamError(err); ok {
		return fail(CodeError, retryableRPC(werr.Code),
			fmt.Sprintf("the upstream answered with JSON-RPC error %d: %s", werr.Code, u.redact.String(werr.Message))), nil
	}
	if log != nil {
		log.Warn("mcp tool: no answer from the upstream", "tool", r.Name, "err", u.redactErr(err))
	}
	// A fixed phrase: the error itself may name the upstream's address.
	if sent {
		return unknown(wire.UnknownResetAfterSend,
			"the tools/call was sent, then the connection broke before an answer ("+CodeUnreachable+")"), nil
	}
	return fail(CodeUnreachable, true, "the upstream could not be reached or the connection broke before an answer"), nil
}

// unknown is an outcome_unknown failure of the given case: retryable, as
// an http tool's (the tool's on_unknown decides what happens next).
func unknown(kase, msg string) tool.Outcome {
	return tool.Outcome{Err: &tool.ToolError{Code: wire.CodeOutcomeUnknown, Message: msg, Retryable: true, Unknown: kase}}
}

// retryableRPC: the JSON-RPC errors a retry may get past. The request's
// own faults (parse error, invalid request, unknown method, invalid
// params) come again; an internal error or an implementation's server
// error (-32000 to -32099) may pass.
func retryableRPC(code int64) bool {
	switch code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
		return false
	}
	return code == jsonrpc.CodeInternalError || (code >= -32099 && code <= -32000)
}

func fail(code string, retryable bool, msg string) tool.Outcome {
	return tool.Outcome{Err: &tool.ToolError{Code: code, Message: msg, Retryable: retryable}}
}
