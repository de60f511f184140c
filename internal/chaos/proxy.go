// Package chaos injects network faults: an HTTP proxy that can
// drop a reply after the server acted, delay it, or deliver a request twice.
// The fault scenarios built on it (and on server crashes) live in
// internal/chaos/fault.
//
// The proxy stands for everything between a client and the server that can
// lose or repeat a message. Its point is the "three truths" of a timeout:
// the client cannot tell a request that never arrived from a reply that got
// lost, so it must retry, and the retry must carry the same key.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/ctxutil"
	"github.com/idemctl/idemctl/internal/netutil"
	"github.com/idemctl/idemctl/internal/wire"
)

// Mode is what the proxy does to a selected request.
type Mode string

// The four modes.
const (
	// ModePass forwards the request and streams the reply back.
	ModePass Mode = "pass"
	// ModeDropResponse forwards the request, reads and discards the whole
	// reply (so the server has acted), and never answers the client.
	ModeDropResponse Mode = "drop-response"
	// ModeDelayResponse forwards the request, then holds the reply for
	// Delay before passing it on.
	ModeDelayResponse Mode = "delay-response"
	// ModeDuplicateRequest delivers the request to the server twice, at the
	// same time, and returns the first copy's reply.
	ModeDuplicateRequest Mode = "duplicate-request"
)

// Modes lists the valid modes, in the order help texts show them.
var Modes = []Mode{ModePass, ModeDropResponse, ModeDelayResponse, ModeDuplicateRequest}

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown proxy mode %q (want one of %s)", s, strings.Join(names, ", "))
}

// Defaults of Options.
const (
	// DefaultDelay is how long delay-response holds a reply.
	DefaultDelay = 2 * time.Second
	// DefaultDropHold is how long drop-response keeps a client waiting
	// before hanging up; clients normally time out well before.
	DefaultDropHold = 30 * time.Second
	// DefaultMaxBody bounds the request body duplicate-request buffers
	// (the server's own limit, docs/api.md, "Limits"); anything larger
	// gets 413.
	DefaultMaxBody = 1 << 20
)

// Options configure a Proxy.
type Options struct {
	// Target is the server's base URL (scheme and host; a path prefix is
	// kept).
	Target *url.URL
	// Mode is applied to the requests Select picks; the rest pass.
	Mode Mode
	// Select picks the requests Mode applies to; the zero value picks all.
	Select Selector
	// Delay is the hold of delay-response; zero means DefaultDelay.
	Delay time.Duration
	// DropHold bounds how long drop-response keeps the client's connection
	// open without a reply; zero means DefaultDropHold.
	DropHold time.Duration
	// MaxBody bounds the body duplicate-request buffers; zero means
	// DefaultMaxBody.
	MaxBody int64
	// Transport reaches the server; nil means a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Log gets one line per request with the decision; nil discards.
	Log *slog.Logger
	// Rand returns a number in [0, 1) for the probability selector; nil
	// means math/rand/v2. Tests inject a fixed sequence.
	Rand func() float64
	// AllowRemote lets Serve listen on an address that is not loopback.
	// Off by default: the proxy is a test tool, and in front of a --chaos
	// server it would let anyone who can reach it send the chaos hooks
	// (_crash_after_commit, ...) that the server itself only accepts on
	// loopback.
	AllowRemote bool
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Target == nil || o.Target.Scheme == "" || o.Target.Host == "" {
		return errors.New("proxy: target must be an absolute URL like http://127.0.0.1:8081")
	}
	if o.Target.Scheme != "http" && o.Target.Scheme != "https" {
		return fmt.Errorf("proxy: target scheme %q is not http or https", o.Target.Scheme)
	}
	if _, err := ParseMode(string(o.Mode)); err != nil {
		return err
	}
	if o.Delay < 0 || o.DropHold < 0 || o.MaxBody < 0 {
		return errors.New("proxy: delay, drop hold and max body must not be negative")
	}
	return o.Select.Validate()
}

// Log attribute keys, one set for every decision line.
const (
	logKeyN      = "n"
	logKeyMethod = "method"
	logKeyPath   = "path"
	logKeyKey    = "key"
	logKeyAction = "action"
	logKeyStatus = "upstream"
	logKeyErr    = "err"
)

// Proxy is a fault-injecting reverse proxy; it is an http.Handler.
type Proxy struct {
	opts  Options
	log   *slog.Logger
	rp    *httputil.ReverseProxy
	base  http.RoundTripper
	count atomic.Int64 // requests seen, numbered from 1
	hits  atomic.Int64 // requests the mode was applied to
}

// New returns a Proxy for o, after Validate.
func New(o Options) (*Proxy, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Delay == 0 {
		o.Delay = DefaultDelay
	}
	if o.DropHold == 0 {
		o.DropHold = DefaultDropHold
	}
	if o.MaxBody == 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	p := &Proxy{opts: o, log: o.Log, base: o.Transport}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.base == nil {
		p.base = http.DefaultTransport.(*http.Transport).Clone()
	}
	target := o.Target
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		// Every mode is a RoundTripper around the real one; the decision
		// travels in the request's context.
		Transport:    roundTripFunc(p.roundTrip),
		ErrorHandler: p.errorHandler,
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// Counts returns how many requests the proxy has seen and how many of them
// the mode was applied to.
func (p *Proxy) Counts() (requests, hits int64) { return p.count.Load(), p.hits.Load() }

// decision is what ServeHTTP chose for one request.
type decision struct {
	n      int64
	action Mode
	body   []byte // the buffered body, duplicate-request only
}

type decisionKey struct{}

// ServeHTTP numbers the request, decides, logs the decision, and forwards.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := &decision{n: p.count.Add(1), action: ModePass}
	if p.opts.Mode != ModePass && p.opts.Select.Hit(d.n, p.opts.Rand) {
		d.action = p.opts.Mode
		p.hits.Add(1)
	}
	p.log.Info("proxy",
		logKeyN, d.n, logKeyMethod, r.Method, logKeyPath, r.URL.Path,
		logKeyKey, r.Header.Get(wire.HeaderIdempotencyKey), logKeyAction, string(d.action))

	if d.action == ModeDuplicateRequest && r.Body != nil && r.Body != http.NoBody {
		// Two deliveries need the body twice: buffer it, but never without
		// bound — one byte over the limit is enough to refuse.
		body, err := io.ReadAll(io.LimitReader(r.Body, p.opts.MaxBody+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.CodeBadRequest, "proxy: reading request body: "+err.Error())
			return
		}
		if int64(len(body)) > p.opts.MaxBody {
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodePayloadTooLarge,
				fmt.Sprintf("proxy: body over %d bytes cannot be duplicated", p.opts.MaxBody))
			return
		}
		d.body = body
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// errDropped tells the error handler to hang up instead of answering.
var errDropped = errors.New("chaos: reply dropped")

// roundTrip applies the decision to one upstream exchange.
func (p *Proxy) roundTrip(req *http.Request) (*http.Response, error) {
	d, _ := req.Context().Value(decisionKey{}).(*decision)
	if d == nil {
		d = &decision{action: ModePass}
	}
	switch d.action {
	case ModeDropResponse:
		resp, err := p.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		// Read the whole reply so the server has finished answering — the
		// request was applied — and only then lose it.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.log.Info("proxy dropped reply", logKeyN, d.n, logKeyStatus, resp.StatusCode)
		return nil, errDropped

	case ModeDelayResponse:
		resp, err := p.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		if err := ctxutil.Sleep(req.Context(), p.opts.Delay); err != nil {
			resp.Body.Close()
			return nil, err
		}
		return resp, nil

	case ModeDuplicateRequest:
		return p.duplicate(req, d)
	}
	return p.base.RoundTrip(req)
}

// duplicate sends two copies of req at once and returns the first copy's
// reply (or the second's if the first got none). It waits for both so the
// second delivery has reached the server before the client hears back.
func (p *Proxy) duplicate(req *http.Request, d *decision) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close() // the copies read from d.body
	}
	type result struct {
		resp *http.Response
		err  error
	}
	var results [2]result
	var wg sync.WaitGroup
	for i := range results {
		clone := req.Clone(req.Context())
		if d.body != nil {
			clone.Body = io.NopCloser(bytes.NewReader(d.body))
			clone.ContentLength = int64(len(d.body))
		}
		wg.Go(func() {
			resp, err := p.base.RoundTrip(clone)
			results[i] = result{resp, err}
		})
	}
	wg.Wait()
	first, second := results[0], results[1]
	if first.err != nil {
		first, second = second, first
	}
	if second.resp != nil {
		p.log.Info("proxy duplicate delivered", logKeyN, d.n, logKeyStatus, second.resp.StatusCode)
		_, _ = io.Copy(io.Discard, second.resp.Body)
		second.resp.Body.Close()
	}
	return first.resp, first.err
}

// errorHandler answers when the upstream exchange gave no reply to pass on.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	d, _ := r.Context().Value(decisionKey{}).(*decision)
	if errors.Is(err, errDropped) {
		p.hangUp(w, r)
		return
	}
	if r.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	var n int64
	if d != nil {
		n = d.n
	}
	p.log.Warn("proxy upstream error", logKeyN, n, logKeyErr, err.Error())
	// 503, not 502: the server is unreachable or broke off, which is "try
	// later" for a client — and the idempotency key makes the retry safe.
	w.Header().Set(wire.HeaderRetryAfter, "1")
	writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "proxy: upstream: "+err.Error())
}

// hangUp is the drop: the client gets no status line at all. It keeps the
// connection open until the client gives up (its own timeout, so it reports
// "timed out") or DropHold passes, then closes the TCP
// connection without a byte.
func (p *Proxy) hangUp(w http.ResponseWriter, r *http.Request) {
	t := time.NewTimer(p.opts.DropHold)
	defer t.Stop()
	select {
	case <-r.Context().Done():
	case <-t.C:
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// No hijacking (HTTP/2): abort the handler, which resets the
		// stream without a reply.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(wire.Error{Error: wire.ErrorDetail{Code: code, Message: msg}}) // cannot fail: two strings
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// Serve runs the proxy on ln until ctx ends, then shuts down, giving
// in-flight requests a moment to finish. It returns nil after a clean stop.
// Unless Options.AllowRemote, ln must be a loopback address
// (netutil.CheckLoopback); otherwise Serve returns an error at once.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	if !p.opts.AllowRemote {
		if err := netutil.CheckLoopback(ln.Addr().String()); err != nil {
			return fmt.Errorf("proxy: refusing to listen beyond loopback without AllowRemote: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Held (dropped) replies do not finish by themselves: cut them.
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
