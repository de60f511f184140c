// Package server is idemctl's HTTP service (docs/api.md, docs/lifecycle.md): the
// handlers that record a tool call under its idempotency key and answer with
// the one call that key names, refusing new keys while the queue is full.
// It owns an executor (package executor), which runs the recorded calls
// concurrently under leases its heartbeats keep alive, recovers them after
// crashes, and commits each outcome only while it still holds the lease.
//
// The correctness lives in the store's transactions and constraints
// (calls.idem_key UNIQUE, conditional claims, fenced completions,
// effects.call_id UNIQUE); this package decides what to ask the store and
// how to say the answer over HTTP, and keeps nothing in memory that a crash
// could make wrong.
//
// Typical use:
//
//	srv, err := server.New(server.Config{Addr: "127.0.0.1:8081"}, st)
//	...
//	ln, err := net.Listen("tcp", "127.0.0.1:8081")
//	err = srv.Run(ctx, ln) // until ctx is cancelled, then a graceful stop
//
// or, without a listener of its own (tests, an in-process bench):
//
//	err = srv.Start(ctx)             // the executor
//	ts := httptest.NewServer(srv.Handler())
//	defer srv.Shutdown(context.Background())
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/authlimit"
	"github.com/idemctl/idemctl/internal/connlimit"
	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/netutil"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/trustproxy"
	"github.com/idemctl/idemctl/internal/webhook"
)

// Defaults of Config's zero values (the executor's are in package
// executor).
const (
	DefaultAddr = "127.0.0.1:8081"
	// DefaultMaxPending is how many pending calls a server lets queue
	// before it refuses new keys (Config.MaxPending).
	DefaultMaxPending = 100_000
	// NoPendingLimit as Config.MaxPending turns the queue limit off.
	NoPendingLimit = -1
	DefaultMaxWait = 30 * time.Second
	// DefaultMaxConcurrentBodies bounds how many bodies are read at once
	// (their bytes are bounded by DefaultMaxBodyBytesInFlight).
	DefaultMaxConcurrentBodies = 64
	// DefaultMaxBodyBytesInFlight bounds the bytes of bodies being
	// handled at once (Config.MaxBodyBytesInFlight): 8 MiB, 8 bodies
	// of the largest size, each held several times over
	// (BENCHMARKS.md §17).
	DefaultMaxBodyBytesInFlight = 8 << 20
	// DefaultMaxHeldWaits bounds "Prefer: wait" requests held at once
	// (each costs a goroutine pair and some 50 KB).
	DefaultMaxHeldWaits = 512
	// DefaultMaxIdlePerClient is Config.MaxIdlePerClient's default.
	DefaultMaxIdlePerClient = 256
	// fileReserve is how many open files the connection limit leaves to
	// the process besides Workers (database, logs, listeners).
	fileReserve = 256
	// DefaultRetention is idemctl serve's --retention: how long a final
	// call is kept after its last update (docs/operations.md, "Retention").
	// Config's zero Retention keeps calls forever.
	DefaultRetention = 24 * time.Hour
	// DefaultTombstoneRetention is idemctl serve's --tombstone-retention:
	// how long a purged call's key answers 410 Gone before it is new
	// again (docs/operations.md, "Retention"). Thirty days: far longer
	// than any client's retry loop, and a tombstone is a few hundred
	// bytes. Config's zero keeps no tombstones.
	DefaultTombstoneRetention = 30 * 24 * time.Hour
	// PurgeBatch is how many calls one purge transaction deletes at most:
	// small, so the write lock is held for milliseconds at a time.
	PurgeBatch = 500
	// maxPurgeInterval caps the purge task's period (retention/4 otherwise).
	maxPurgeInterval = time.Minute
)

// Config configures a Server. Zero values take the defaults above (and
// the executor's, for the fields of the embedded executor.Config).
type Config struct {
	// Config is the executor's part: workers, lease, recover interval,
	// shutdown grace, chaos, the exit hook, the result bound, the
	// instance host and the tool policies.
	executor.Config

	// Addr is the address the server is meant to listen on. New checks it
	// for Chaos; Run serves on whatever listener it is given.
	Addr string
	// MaxPending is how many calls may be pending (in the whole database)
	// before a request for a new key is refused with 503 overloaded and
	// Retry-After, storing nothing; existing keys and reads are always
	// served. Zero means DefaultMaxPending, NoPendingLimit (any negative
	// value) no limit. The count is this server's estimate, refreshed by
	// the executor's scheduler (see executor.Executor.Pending for how
	// exact it is).
	MaxPending int
	// MaxWait caps "Prefer: wait=N"; larger N are clamped.
	MaxWait time.Duration
	// MaxConcurrentBodies is how many POST bodies may be read and parsed
	// at once. A POST beyond it is refused with 503 overloaded and
	// Retry-After before its body is read; nothing is recorded, so a
	// retry with the same key is safe.
	MaxConcurrentBodies int
	// MaxBodyBytesInFlight is how many bytes of POST bodies may be in
	// flight at once, from the read until the answer is written (each
	// accepted body is held several times over meanwhile: parsed,
	// canonical, stored, echoed). A POST that would pass it is refused
	// with 503 overloaded before its body is read, by its declared length
	// (MaxBodyBytes for a chunked one). Zero means
	// DefaultMaxBodyBytesInFlight; it must be at least MaxBodyBytes.
	MaxBodyBytesInFlight int64
	// MaxHeldWaits is how many requests may be held under "Prefer: wait"
	// at once. Beyond it the request is answered at once with the call's
	// current state, without Preference-Applied (poll, or wait later).
	MaxHeldWaits int
	// MaxPendingPerPrincipal is how many calls one principal may have
	// pending before its new keys are refused with 503 overloaded, as
	// for MaxPending (fairness.go). It applies with Auth only. Zero means
	// DefaultMaxPendingPerPrincipal, capped at MaxPending; negative, no
	// per-principal limit.
	MaxPendingPerPrincipal int
	// MaxHeldWaitsPerPrincipal is how many of MaxHeldWaits one principal
	// may hold at once (API and MCP waits together); beyond it the
	// principal's requests are answered at once, as beyond MaxHeldWaits.
	// It applies with Auth only. Zero means
	// DefaultMaxHeldWaitsPerPrincipal, capped at MaxHeldWaits; negative,
	// no per-principal limit.
	MaxHeldWaitsPerPrincipal int
	// MaxConns bounds the connections Run keeps open (connlimit): at the
	// limit a new connection replaces the one idle the longest, or is
	// closed at once if none is idle. Zero derives it from the open files
	// limit (raised to its hard limit): what is left after Workers + 256
	// descriptors for the executor's tools and the database, at most
	// 10,000. Negative: no limit.
	MaxConns int
	// MaxIdlePerClient bounds the idle keep-alive connections of one
	// client IP address; beyond it, its connection idle the longest is
	// closed. Zero means DefaultMaxIdlePerClient, negative no limit.
	MaxIdlePerClient int
	// MaxMCPSessions caps the live MCP sessions at /mcp, and
	// MaxMCPSessionsPerPrincipal one principal's (mcpsessions.go): beyond,
	// a request opening a session gets 503 overloaded. Zero means
	// DefaultMaxMCPSessions and DefaultMaxMCPSessionsPerPrincipal,
	// negative no limit.
	MaxMCPSessions             int
	MaxMCPSessionsPerPrincipal int
	// Auth, if set, requires a bearer token from its token file on every
	// request but /healthz and /readyz, and scopes calls to the token's
	// principal (docs/api.md, "Authentication"). Nil: no authentication;
	// every call belongs to store.DefaultPrincipal.
	Auth *Auth
	// InsecureNoAuth allows a server without Auth on an address that is
	// not loopback. Without it, New and Run refuse such an address:
	// anyone who can reach the port could read and replay every call.
	InsecureNoAuth bool
	// Retention is how long a final call is kept after its last update
	// before the background purge deletes it with its audit rows (its
	// effect row stays). Zero keeps calls forever.
	Retention time.Duration
	// TombstoneRetention is how long the retention purge keeps a
	// tombstone of each purged call's keys; while it is kept, a request
	// with the key answers 410 idempotency_key_expired and runs nothing.
	// Zero keeps none: a purged key is new again.
	TombstoneRetention time.Duration
	// MCPWait is how long an MCP tools/call waits for its call to be
	// final before answering "still running" (docs/mcp.md, "The wait");
	// zero means mcpdoor.DefaultWait. Capped by MaxWait.
	MCPWait time.Duration
	// AllowedHosts are the Host names a server on a loopback Addr answers
	// besides the loopback ones (localhost, 127.0.0.0/8, [::1]); any other
	// Host is refused with 403 host_not_allowed on every route, against
	// DNS rebinding (internal/hostcheck). Ignored on other addresses.
	AllowedHosts []string
	// TrustedProxies are the networks (CIDRs or addresses) of reverse
	// proxies whose X-Forwarded-Proto and X-Forwarded-For are believed:
	// for the console cookie's Secure flag and for the client address the
	// failed-authentication throttle counts by (internal/trustproxy).
	// Empty: none; a request is what its connection says.
	TrustedProxies []string
	// NoUI turns the web console (/ui, docs/console.md) off: its paths
	// are then 404 like any unknown path. serve's --ui decides it.
	NoUI bool
	// NoClaimAtCreate turns claim at creation off (docs/lifecycle.md,
	// "Claim at creation"): every new call is created pending and
	// claimed by the scheduler. serve's --claim-at-create=false.
	NoClaimAtCreate bool
	// Version is reported by GET /v1; empty means the module version
	// from the build information.
	Version string
	// Webhooks configures completion webhooks (docs/api.md, "Completion
	// webhooks"): the allow-list of notify_url targets with their secrets
	// and each principal's default (Webhooks.Allow), and the delivery
	// loop's timeouts and backoff. A nil or empty Allow turns them off:
	// a notify_url is refused and no delivery is sent. Owner and Logger
	// are the server's.
	Webhooks webhook.Config
	// Tools is the tool registry: which tools calls may name, how their
	// args are checked at accept time, what GET /v1/tools lists. nil means
	// the four built-in tools (toolreg.Builtins).
	Tools *toolreg.Registry
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// TracerProvider, if set, traces every request, MCP tools/call and
	// attempt (docs/operations.md, "Traces"; internal/telemetry sets one
	// up). Nil: tracing off, and no tracing work is done.
	TracerProvider trace.TracerProvider
	// Registry, if set, also receives the idemctl_* collectors. The
	// server always keeps a private registry for GET /metrics, so many
	// servers can live in one process.
	Registry prometheus.Registerer
}

// Server is the HTTP service plus its executor. Create it with New.
type Server struct {
	cfg     Config
	st      store.Store
	log     *slog.Logger
	m       *metrics
	tracer  trace.Tracer // nil: tracing off
	exec    *executor.Executor
	waiters *waiters
	// replays answers replays of succeeded calls from memory (nil: off,
	// the retention is too short for it; replaycache.go).
	replays *replayCache
	// hooks sends the webhook outbox (nil when webhooks are off);
	// hooksDone is closed when its loop has ended.
	hooks     *webhook.Deliverer
	hooksDone chan struct{}
	// newCallID makes the id of a new call (newCallID; tests replace it).
	newCallID func() (string, error)
	// bodySlots and waitSlots are semaphores: a send takes a slot
	// (MaxConcurrentBodies, MaxHeldWaits), a receive gives it back.
	bodySlots chan struct{}
	waitSlots chan struct{}
	// bodyBytes is the byte budget of bodies in flight
	// (MaxBodyBytesInFlight).
	bodyBytes *byteBudget
	// pendingOf and waitsOf are the per-principal limits (fairness.go).
	pendingOf *principalPending
	waitsOf   *heldWaits
	handler   http.Handler
	mcp       http.Handler // the MCP door at wire.PathMCP
	// maxPending is Config.MaxPending, 0 for no limit; refused counts the
	// new keys refused for it since the start (/stats).
	maxPending int64
	refused    atomic.Int64
	// proxies and authLimit: which forwarding headers count, and the
	// failed-authentication throttle (clients.go).
	proxies   *trustproxy.Proxies
	authLimit *authlimit.Limiter
	// mcpSessions counts the MCP door's sessions (mcpsessions.go).
	mcpSessions *mcpSessions

	started   atomic.Bool
	closing   chan struct{} // closed when a stop begins: waits return, readyz fails
	health    *writeHealth  // whether the database takes writes (readyz)
	closeOnce sync.Once
	purgeDone chan struct{} // closed when the purge task has ended (nil if none)
}

// New validates cfg, fills its defaults and builds a Server on st. It does
// not start anything: call Run, or Start and serve Handler yourself.
func New(cfg Config, st store.Store) (*Server, error) {
	if st == nil {
		return nil, errors.New("server: nil store")
	}
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	log := cfg.Logger
	health := &writeHealth{log: log, retest: writeRetest}
	st = store.Observe(st, store.Hooks{Done: health.note}) // every write's outcome, for /readyz (writehealth.go)

	s := &Server{
		cfg:        cfg,
		st:         st,
		newCallID:  newCallID,
		log:        log,
		waiters:    newWaiters(),
		replays:    newReplayCache(cfg.Retention),
		bodySlots:  make(chan struct{}, cfg.MaxConcurrentBodies),
		waitSlots:  make(chan struct{}, cfg.MaxHeldWaits),
		maxPending: int64(max(cfg.MaxPending, 0)),
		closing:    make(chan struct{}),
		health:     health,
		bodyBytes:  &byteBudget{max: cfg.MaxBodyBytesInFlight},
	}
	var err error
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer(telemetry.Scope)
	}
	s.exec, err = executor.New(cfg.Config, executor.Deps{Store: st, Tools: cfg.Tools, Logger: log, OnFinal: s.onFinal,
		Tracer: s.tracer})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	var extra []prometheus.Collector
	if cfg.Webhooks.Allow.Enabled() {
		hc := cfg.Webhooks
		hc.Owner, hc.Logger = s.exec.Owner(), log
		s.hooks = webhook.New(st, hc)
		extra = append(extra, s.hooks.Collector())
	}
	s.m, err = newMetrics(st, s.maxPending, s.exec.Collector(), cfg.Registry, extra...)
	if err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	if err := s.setupClients(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.pendingOf = &principalPending{limit: int64(cfg.MaxPendingPerPrincipal), every: cfg.RecoverInterval,
		st: st, queueLen: s.exec.Pending}
	s.waitsOf = &heldWaits{limit: cfg.MaxHeldWaitsPerPrincipal}
	// A refresh of the upstream MCP servers' tools may refuse a body the
	// cache would answer.
	cfg.Tools.OnRefresh(s.replays.clear)
	if s.mcp, err = s.mcpHandler(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.handler, err = s.hostGuard(s.routes()); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return s, nil
}

// fill applies the defaults to the zero values.
func (c *Config) fill() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	c.Config = c.Config.WithDefaults()
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MCPWait == 0 {
		c.MCPWait = mcpdoor.DefaultWait
	}
	if c.MaxConcurrentBodies == 0 {
		c.MaxConcurrentBodies = DefaultMaxConcurrentBodies
	}
	if c.MaxHeldWaits == 0 {
		c.MaxHeldWaits = DefaultMaxHeldWaits
	}
	if c.MaxBodyBytesInFlight == 0 {
		c.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	c.fillPerPrincipal()
	c.fillConns()
	c.MaxMCPSessions = limitOrNone(c.MaxMCPSessions, DefaultMaxMCPSessions)
	c.MaxMCPSessionsPerPrincipal = limitOrNone(c.MaxMCPSessionsPerPrincipal, DefaultMaxMCPSessionsPerPrincipal)
	if c.Tools == nil {
		c.Tools = toolreg.Builtins()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate reports every value of c that New would refuse, all at once:
// the executor's (executor.Config.Validate) and the server's own. It checks
// c as it is: New fills the defaults for zero values first and then calls
// it, while a caller that validates ahead of New (serve, before it binds a
// port or opens a database) passes complete values, so a zero
// MaxConcurrentBodies or MaxHeldWaits is refused here. Its messages name
// serve's flags, which set these fields one to one: serve is where a
// person reads them.
func (c *Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("--addr must not be empty"))
	} else {
		errs = append(errs, c.checkAddr(c.Addr)...)
	}
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MCPWait < 0 {
		errs = append(errs, fmt.Errorf("--mcp-wait must not be negative (0 means the default, %s), got %s", mcpdoor.DefaultWait, c.MCPWait))
	}
	if c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("the longest wait must not be negative, got %s", c.MaxWait))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("--retention must not be negative (0 keeps calls forever), got %s", c.Retention))
	}
	if c.TombstoneRetention < 0 {
		errs = append(errs, fmt.Errorf("--tombstone-retention must not be negative (0 keeps no tombstones), got %s", c.TombstoneRetention))
	}
	if c.MaxConcurrentBodies < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-bodies must be at least 1, got %d", c.MaxConcurrentBodies))
	}
	if c.MaxHeldWaits < 1 {
		errs = append(errs, fmt.Errorf("--max-held-waits must be at least 1, got %d", c.MaxHeldWaits))
	}
	if c.Tools != nil { // nil: the built-ins, open to every principal
		if err := CheckToolAccess(c.Tools, c.Auth != nil); err != nil {
			errs = append(errs, fmt.Errorf("--tools: %w", err))
		}
	}
	if c.MaxBodyBytesInFlight < MaxBodyBytes {
		errs = append(errs, fmt.Errorf("--max-body-bytes-in-flight must be at least %d (one body of the largest size), got %d",
			MaxBodyBytes, c.MaxBodyBytesInFlight))
	}
	return errors.Join(errs...)
}

// checkAddr applies the rules on where this server may listen to addr:
// Validate to Addr, Run again to the listener it is given, which may be
// bound elsewhere.
func (c *Config) checkAddr(addr string) []error {
	var errs []error
	if c.Chaos {
		if err := netutil.CheckLoopback(addr); err != nil {
			errs = append(errs, fmt.Errorf("--chaos makes the process exit on request, so it is only allowed on a loopback address: %w", err))
		}
	}
	if c.Auth == nil && !c.InsecureNoAuth {
		if err := netutil.CheckLoopback(addr); err != nil {
			errs = append(errs, fmt.Errorf("without --auth-tokens anyone who can reach the port can read and replay every call, so only a loopback address is allowed; give --auth-tokens FILE, or --insecure-no-auth: %w", err))
		}
	}
	return errs
}

// Owner is the lease owner this server's executor claims calls under
// (executor.Executor.Owner): "host:pid:starttime/instance", where instance
// numbers the servers of this process.
func (s *Server) Owner() string { return s.exec.Owner() }

// Handler returns the HTTP handler: the API routes with JSON errors,
// metrics and panic recovery. Usable with httptest or any http.Server.
func (s *Server) Handler() http.Handler { return s.handler }

// Start starts the executor: scheduler and workers. It returns at once. The
// scheduler stops claiming when ctx is done; call Shutdown to let running
// tools finish and stop the workers. A Server starts once.
func (s *Server) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("server: already started")
	}
	s.log.Info("executor starting", logkey.Owner, s.exec.Owner(), "workers", s.cfg.Workers,
		logkey.DurationAttr(logkey.Lease, s.cfg.Lease), "max_pending", s.maxPending, "chaos", s.cfg.Chaos)
	if err := s.exec.Start(ctx); err != nil {
		return err
	}
	if s.cfg.Retention > 0 {
		s.purgeDone = make(chan struct{})
		go s.purgeLoop(ctx)
	}
	if s.hooks != nil {
		s.hooksDone = make(chan struct{})
		hctx, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-s.closing:
			case <-hctx.Done():
			}
			stop()
		}()
		go func() {
			defer close(s.hooksDone)
			defer stop()
			s.log.Info("webhook deliveries starting", "endpoints", s.cfg.Webhooks.Allow.Endpoints())
			s.hooks.Run(hctx)
		}()
	}
	return nil
}

// onFinal is told of every call this server made final (a completion, a
// cancel): held waits answer, and the webhook loop looks at the outbox.
func (s *Server) onFinal(callID string) {
	s.waiters.notify(callID)
	if s.hooks != nil {
		s.hooks.Wake()
	}
}

// Shutdown stops claiming, releases handlers held by "Prefer: wait", and
// waits for running tools up to ShutdownGrace or until ctx is done; tools
// still running then are cancelled and their calls released. It does not
// close the store. Safe to call on a server that never started.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	if !s.started.Load() {
		return nil
	}
	err := s.exec.Shutdown(ctx)
	if s.hooksDone != nil {
		// A delivery in flight ends within its timeout; one cut short is
		// sent again later (its lease lapses), with the same id.
		select {
		case <-s.hooksDone:
		case <-ctx.Done():
		}
	}
	if s.purgeDone != nil {
		// A purge batch is short and the loop checks closing between
		// batches; waiting keeps it from using a store about to close.
		select {
		case <-s.purgeDone:
		case <-ctx.Done():
		}
	}
	return err
}

// beginClose marks the server as stopping.
func (s *Server) beginClose() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// Wake makes the scheduler claim at once (after a call became runnable
// through some other path than this server's POST).
func (s *Server) Wake() { s.exec.Wake() }

// Run starts the executor and serves HTTP on ln until ctx is cancelled, then
// stops: no new connections, held waits answered, running tools given
// ShutdownGrace to finish. It returns nil after a clean stop.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	if err := errors.Join(s.cfg.checkAddr(ln.Addr().String())...); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	hs := s.httpServer()
	lim := connlimit.New(ln, max(s.cfg.MaxConns, 0), max(s.cfg.MaxIdlePerClient, 0))
	hs.ConnState = lim.ConnState
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lim) }()
	s.log.Info("serving", logkey.Addr, ln.Addr().String(), "max_connections", max(s.cfg.MaxConns, 0),
		"max_idle_per_client", max(s.cfg.MaxIdlePerClient, 0))

	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	s.log.Info("shutting down", logkey.DurationAttr(logkey.Grace, s.cfg.ShutdownGrace))
	s.beginClose() // first, so held "Prefer: wait" requests answer and the HTTP drain is quick
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownGrace)
	defer cancel()
	var (
		wg      sync.WaitGroup
		httpErr error
	)
	wg.Go(func() {
		if httpErr = hs.Shutdown(stopCtx); httpErr != nil {
			_ = hs.Close() // grace over: cut the remaining connections
		}
	})
	execErr := s.Shutdown(stopCtx)
	wg.Wait()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	err := errors.Join(serveErr, httpErr, execErr)
	if err == nil {
		s.log.Info("stopped cleanly")
	}
	return err
}

// httpServer is the http.Server Run uses. Timeouts bound slow clients;
// WriteTimeout must outlast the longest "Prefer: wait".
func (s *Server) httpServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.MaxWait + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// fillConns applies the connection limits' defaults (Config.MaxConns,
// Config.MaxIdlePerClient). After it, 0 means no limit.
func (c *Config) fillConns() {
	switch {
	case c.MaxConns < 0:
		c.MaxConns = 0
	case c.MaxConns == 0:
		files, err := connlimit.RaiseFileLimit()
		if err != nil {
			files = 1024 // the usual soft limit: the derived default stays small
		}
		c.MaxConns = connlimit.DefaultMaxConns(files, c.Workers+fileReserve)
	}
	switch {
	case c.MaxIdlePerClient < 0:
		c.MaxIdlePerClient = 0
	case c.MaxIdlePerClient == 0:
		c.MaxIdlePerClient = DefaultMaxIdlePerClient
	}
}

// limitOrNone fills a limit whose zero means def and negative none; after
// it, 0 means none.
func limitOrNone(n, def int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return def
	}
	return n
}
