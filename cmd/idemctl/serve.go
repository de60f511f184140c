package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/hostcheck"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/netutil"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/trustproxy"
	"github.com/idemctl/idemctl/internal/webhook"
)

// serveOptions are the flags of idemctl serve.
type serveOptions struct {
	Addr          string
	DB            string
	Workers       int
	Lease         time.Duration
	MaxPending    int
	Chaos         bool
	LogFormat     string
	LogLevel      string
	ShutdownGrace time.Duration
	DBWait        time.Duration
	InstanceHost  string
	MaxBodies     int
	// MaxBodyBytes is --max-body-bytes-in-flight.
	MaxBodyBytes int64
	// Pprof is the loopback address of the profiling server (--pprof);
	// "" means off.
	Pprof        string
	MaxHeldWaits int
	// MaxPendingPerPrincipal and MaxHeldWaitsPerPrincipal are the
	// per-principal limits (0: none); they apply with --auth-tokens.
	MaxPendingPerPrincipal   int
	MaxHeldWaitsPerPrincipal int
	// MaxConns is --max-connections (0: derived from the open files
	// limit); MaxIdlePerClient is --max-idle-per-client (0: no limit).
	MaxConns         int
	MaxIdlePerClient int
	// MaxMCPSessions and MaxMCPSessionsPerPrincipal cap the sessions at
	// /mcp (0: no cap).
	MaxMCPSessions             int
	MaxMCPSessionsPerPrincipal int
	// AuthTokens is the token file (--auth-tokens); "" means no auth.
	AuthTokens         string
	InsecureNoAuth     bool
	Retention          time.Duration
	TombstoneRetention time.Duration
	MaxResultBytes     int
	// MCPWait is how long an MCP tools/call at /mcp waits (--mcp-wait).
	MCPWait time.Duration
	// MCPRefresh is how often the mcp upstreams' tool lists are read
	// again (--mcp-refresh).
	MCPRefresh time.Duration
	// Tools is the tools file (--tools); "" means the built-ins only.
	Tools string
	// ClaimAtCreate is --claim-at-create: a new call is claimed by its
	// create when a worker is free (docs/lifecycle.md).
	ClaimAtCreate bool
	// UI is --ui; uiSet says whether it was given (the default depends
	// on --addr and --auth-tokens: uiEnabled).
	UI    bool
	uiSet bool
	// AllowedHosts are --allowed-hosts: Host names a loopback server
	// answers besides the loopback ones.
	AllowedHosts []string
	// TrustedProxies are --trusted-proxies: CIDRs whose forwarding
	// headers the server believes.
	TrustedProxies []string
	// WebhookAllow are --webhook-allow entries ("PATTERN ${VAR}"),
	// WebhookDefault --webhook-default ones ("PRINCIPAL=URL");
	// WebhookRetryFor and WebhookTimeout the delivery's bounds.
	WebhookAllow    []string
	WebhookDefault  []string
	WebhookRetryFor time.Duration
	WebhookTimeout  time.Duration
	// OTel is --otel: trace even when no OTEL_* variable asks for it.
	OTel bool

	webhooks   *webhook.Allow      // WebhookAllow and WebhookDefault, parsed by Validate
	hosts      *hostcheck.Checker  // AllowedHosts, parsed by Validate
	level      slog.Level          // parsed by Validate
	tools      *toolreg.Registry   // loaded by Validate (nil: the built-ins)
	failpoints *failpoint.Registry // IDEMCTL_FAILPOINTS, parsed by Validate (nil: none)
	cfg        server.Config       // built and checked by Validate; runServe adds the logger
}

// Validate checks the flags. What the server itself refuses (the
// workers, the lease, the loopback rules of --chaos and of a server
// without --auth-tokens, …) is checked by server.Config.Validate on the
// configuration the flags make, here, so that a refused configuration
// never binds a port or creates a database; the rest are serve's own
// flags.
func (o *serveOptions) Validate() error {
	var errs []error
	if o.DB == "" {
		errs = append(errs, errors.New("--db must not be empty"))
	}
	if o.MaxPending < 0 {
		errs = append(errs, fmt.Errorf("--max-pending must not be negative (0 = unlimited), got %d", o.MaxPending))
	}
	if o.Pprof != "" {
		if err := netutil.CheckLoopback(o.Pprof); err != nil {
			errs = append(errs, fmt.Errorf("--pprof serves the process's profiles, so it is only allowed on a loopback address: %w", err))
		}
	}
	if o.MaxPendingPerPrincipal < 0 || o.MaxHeldWaitsPerPrincipal < 0 {
		errs = append(errs, fmt.Errorf("--max-pending-per-principal and --max-held-waits-per-principal must not be negative (0 = no per-principal limit), got %d and %d",
			o.MaxPendingPerPrincipal, o.MaxHeldWaitsPerPrincipal))
	}
	if o.MaxMCPSessions < 0 || o.MaxMCPSessionsPerPrincipal < 0 {
		errs = append(errs, fmt.Errorf("--max-mcp-sessions and --max-mcp-sessions-per-principal must not be negative (0 = no cap), got %d and %d",
			o.MaxMCPSessions, o.MaxMCPSessionsPerPrincipal))
	}
	if o.MaxConns < 0 || o.MaxIdlePerClient < 0 {
		errs = append(errs, fmt.Errorf("--max-connections and --max-idle-per-client must not be negative, got %d and %d",
			o.MaxConns, o.MaxIdlePerClient))
	}
	if o.MCPRefresh < 0 {
		errs = append(errs, fmt.Errorf("--mcp-refresh must not be negative, got %s", o.MCPRefresh))
	}
	if o.DBWait < 0 {
		errs = append(errs, fmt.Errorf("--db-wait must not be negative, got %s", o.DBWait))
	}
	hosts, err := hostcheck.New(o.AllowedHosts)
	if err != nil {
		errs = append(errs, fmt.Errorf("--allowed-hosts: %w", err))
	}
	o.hosts = hosts
	if _, err := trustproxy.Parse(o.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("--trusted-proxies: %w", err))
	}
	o.webhooks, err = o.loadWebhooks()
	if err != nil {
		errs = append(errs, err)
	}

	// A misspelt or unsupported OTEL_* value stops the start (exit 2):
	// an operator who asked for traces must not silently get none.
	if _, err := telemetry.Decide(os.Getenv, o.OTel); err != nil {
		errs = append(errs, fmt.Errorf("tracing: %w", err))
	}
	fps, err := loadFailpoints(o.Chaos)
	if err != nil {
		errs = append(errs, err)
	}
	o.failpoints = fps
	level, logErrs := checkLogFlags(o.LogFormat, o.LogLevel)
	o.level = level
	errs = append(errs, logErrs...)
	// The tools file is read here, before the port is bound or the
	// database opened: a bad file is a usage error (exit 2) naming the tool
	// and the field, and nothing was started.
	if o.Tools != "" {
		reg, err := toolreg.Load(o.Tools, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tools: %w", err))
		}
		o.tools = reg
	}
	o.cfg = o.serverConfig()
	// The server's refusals first: --addr and --workers read before --db.
	errs = append([]error{o.cfg.Validate()}, errs...)
	return errors.Join(errs...)
}

// loadWebhooks parses --webhook-allow and --webhook-default, reading each
// endpoint's secret from the environment; errors never show a secret.
func (o *serveOptions) loadWebhooks() (*webhook.Allow, error) {
	var errs []error
	if o.WebhookRetryFor < 0 || o.WebhookTimeout < 0 {
		errs = append(errs, fmt.Errorf("--webhook-retry-for and --webhook-timeout must not be negative (0: the default), got %s and %s", o.WebhookRetryFor, o.WebhookTimeout))
	}
	var eps []webhook.Endpoint
	for _, entry := range o.WebhookAllow {
		e, err := webhook.ParseEndpoint(entry, webhook.EnvSecrets)
		if err != nil {
			errs = append(errs, fmt.Errorf("--webhook-allow: %w", err))
			continue
		}
		eps = append(eps, e)
	}
	allow, err := webhook.NewAllow(eps, o.WebhookDefault)
	if err != nil {
		errs = append(errs, fmt.Errorf("--webhook-default: %w", err))
	}
	return allow, errors.Join(errs...)
}

// serverConfig is the server configuration the flags describe. The token
// file is named but not read yet (server.NewAuth): runServe reads it.
func (o *serveOptions) serverConfig() server.Config {
	cfg := server.Config{
		Config: executor.Config{
			Workers:        o.Workers,
			Lease:          o.Lease,
			Chaos:          o.Chaos,
			ShutdownGrace:  o.ShutdownGrace,
			InstanceHost:   o.InstanceHost,
			MaxResultBytes: o.MaxResultBytes,
		},
		Addr:               o.Addr,
		MaxPending:         maxPending(o.MaxPending),
		Tools:              o.tools,
		InsecureNoAuth:     o.InsecureNoAuth,
		Retention:          o.Retention,
		TombstoneRetention: o.TombstoneRetention,
		MCPWait:            o.MCPWait,
		NoUI:               !o.uiEnabled(),
		NoClaimAtCreate:    !o.ClaimAtCreate,
		AllowedHosts:       o.AllowedHosts,
		TrustedProxies:     o.TrustedProxies,
		Webhooks:           webhook.Config{Allow: o.webhooks, RetryFor: o.WebhookRetryFor, Timeout: o.WebhookTimeout},

		MaxConcurrentBodies:  o.MaxBodies,
		MaxHeldWaits:         o.MaxHeldWaits,
		MaxBodyBytesInFlight: o.MaxBodyBytes,

		MaxConns:                   o.MaxConns,
		MaxMCPSessions:             perPrincipal(o.MaxMCPSessions),
		MaxMCPSessionsPerPrincipal: perPrincipal(o.MaxMCPSessionsPerPrincipal),
		MaxIdlePerClient:           perPrincipal(o.MaxIdlePerClient),
		MaxPendingPerPrincipal:     perPrincipal(o.MaxPendingPerPrincipal),
		MaxHeldWaitsPerPrincipal:   perPrincipal(o.MaxHeldWaitsPerPrincipal),
	}
	if o.AuthTokens != "" {
		cfg.Auth = server.NewAuth(o.AuthTokens)
	}
	return cfg
}

func newServeCmd(streams *IOStreams) *cobra.Command {
	opts := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP service: record tool calls under idempotency keys and execute them once",
		Long: `Run the idemctl HTTP service (POST /v1/tool-calls, GET /v1/tool-calls/{id},
GET /v1/tool-calls/by-key/{key}, GET /v1/tools, /stats, /healthz, /readyz,
/metrics), and the MCP front door at /mcp (streamable HTTP; docs/mcp.md).

--tools FILE (YAML or JSON) declares http tools and tunes the built-ins;
a bad file stops the start with an error naming the tool and the field
(docs/tools.md, "The tool registry").

Up to --workers tool calls run at once. Each holds a lease of --lease that its
heartbeat extends every lease/3 while the tool runs, so a tool may run longer
than the lease; a call whose server crashed is recovered when its lease
expires, or at once when its owner was a process on this host that no longer
exists. With --max-pending calls pending, a request for a new key is refused
with 503 overloaded (existing keys and reads are always served).
SIGINT/SIGTERM stop accepting, let running tools finish within
--shutdown-grace, and exit.

--db takes a SQLite path (or sqlite://path), a postgres:// URL or a libpq
key=value DSN ("host=db dbname=idem user=idem"); several servers may share
one PostgreSQL database (docs/operations.md, "Running several instances").
Passwords in --db are never printed. See docs/cli.md, "serve".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.uiSet = cmd.Flags().Changed("ui")
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runServe(cmd.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Addr, "addr", server.DefaultAddr, "listen address (host:port; port 0 picks a free one)")
	f.StringVar(&opts.DB, "db", "idem.db", "database: SQLite path, sqlite://path, postgres:// URL or key=value DSN")
	f.IntVar(&opts.Workers, "workers", executor.DefaultWorkers, "tool executions run at once (a goroutine each; sized for I/O-bound tools)")
	f.DurationVar(&opts.Lease, "lease", executor.DefaultLease, "how long a call stays claimed after its worker's last heartbeat (every lease/3); at least 1s")
	f.BoolVar(&opts.ClaimAtCreate, "claim-at-create", true, "claim a new call in the transaction that creates it when a worker is free here and no call is pending (one row write and one audit row fewer); false: every call is claimed by the scheduler")
	f.IntVar(&opts.MaxPending, "max-pending", server.DefaultMaxPending, "pending calls beyond which a new key gets 503 overloaded; 0 = unlimited")
	f.BoolVar(&opts.Chaos, "chaos", false, "enable the test-only args _crash_after_commit, _crash_before_commit and _pause_before_commit, and IDEMCTL_FAILPOINTS (loopback addresses only)")
	addLogFlags(f, &opts.LogFormat, &opts.LogLevel)
	f.DurationVar(&opts.DBWait, "db-wait", defaultDBWait, "at start, how long to keep trying while the database is unavailable (0: try once)")
	f.DurationVar(&opts.ShutdownGrace, "shutdown-grace", executor.DefaultShutdownGrace, "on SIGINT/SIGTERM, how long running tools may take to finish")
	f.StringVar(&opts.Pprof, "pprof", "", "serve Go's profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060; off when empty")
	f.IntVar(&opts.MaxBodies, "max-concurrent-bodies", server.DefaultMaxConcurrentBodies, "request bodies read at once; beyond, 503 overloaded (bounds memory: up to 1 MiB each)")
	f.Int64Var(&opts.MaxBodyBytes, "max-body-bytes-in-flight", server.DefaultMaxBodyBytesInFlight, "bytes of POST bodies handled at once, from the read to the answer (by Content-Length); beyond, 503 overloaded; bounds the memory of large bodies")
	f.IntVar(&opts.MaxHeldWaits, "max-held-waits", server.DefaultMaxHeldWaits, "Prefer: wait answers held at once; beyond, answered at once with the current state")
	f.IntVar(&opts.MaxPendingPerPrincipal, "max-pending-per-principal", server.DefaultMaxPendingPerPrincipal, "pending calls of one principal beyond which its new keys get 503 overloaded (with --auth-tokens; at most --max-pending); 0 = no per-principal limit")
	f.IntVar(&opts.MaxHeldWaitsPerPrincipal, "max-held-waits-per-principal", server.DefaultMaxHeldWaitsPerPrincipal, "Prefer: wait answers (and MCP waits) one principal may hold at once (with --auth-tokens; at most --max-held-waits); 0 = no per-principal limit")
	f.IntVar(&opts.MaxConns, "max-connections", 0, "connections kept open at once; at the limit a new one replaces the one idle the longest (0: the open files limit, raised to its hard limit, less --workers + 256, at most 10000)")
	f.IntVar(&opts.MaxIdlePerClient, "max-idle-per-client", server.DefaultMaxIdlePerClient, "idle keep-alive connections kept per client IP address; beyond, its oldest idle one is closed; 0 = no limit")
	f.IntVar(&opts.MaxMCPSessions, "max-mcp-sessions", server.DefaultMaxMCPSessions, "live MCP sessions at /mcp; beyond, opening one gets 503 overloaded; 0 = no cap")
	f.IntVar(&opts.MaxMCPSessionsPerPrincipal, "max-mcp-sessions-per-principal", server.DefaultMaxMCPSessionsPerPrincipal, "live MCP sessions of one principal; beyond, opening one gets 503 overloaded; 0 = no cap")
	f.StringVar(&opts.AuthTokens, "auth-tokens", "", "token file: one PRINCIPAL:SHA256HEX per line (idemctl token new prints them); requests then need Authorization: Bearer TOKEN and see only their principal's calls; re-read on SIGHUP")
	f.BoolVar(&opts.InsecureNoAuth, "insecure-no-auth", false, "allow a non-loopback --addr without --auth-tokens (anyone who reaches the port can read and replay every call)")
	f.DurationVar(&opts.Retention, "retention", server.DefaultRetention, "how long a final call is kept after its last update; then it is purged (its effect row stays) and its key answers 410 for --tombstone-retention; 0 keeps calls forever")
	f.DurationVar(&opts.TombstoneRetention, "tombstone-retention", server.DefaultTombstoneRetention, "how long a purged call's key answers 410 idempotency_key_expired (from a small tombstone) before it is new again; 0 keeps no tombstones: a purged key is new at once")
	f.IntVar(&opts.MaxResultBytes, "max-result-bytes", executor.DefaultMaxResultBytes, "largest tool result stored; a larger one fails the call with result_too_large (not retryable, no effect)")
	f.StringVar(&opts.Tools, "tools", "", "tools file (YAML or JSON): http tools and the built-ins' policy; ${VAR} in header values comes from the environment (docs/tools.md, \"The tool registry\")")
	f.DurationVar(&opts.MCPRefresh, "mcp-refresh", defaultMCPRefresh, "how often the tool lists of the tools file's mcp upstreams are read again (also on SIGHUP)")
	f.DurationVar(&opts.MCPWait, "mcp-wait", mcpdoor.DefaultWait, "how long an MCP tools/call at /mcp waits for its call to be final before answering \"still running\" (capped at 30s, the longest Prefer: wait)")
	f.BoolVar(&opts.UI, "ui", true, "serve the web console at /ui (default: on with --auth-tokens or on a loopback --addr, off otherwise; --ui=false turns it off)")
	f.StringSliceVar(&opts.AllowedHosts, "allowed-hosts", nil, "on a loopback --addr (and --pprof), Host names answered besides localhost, 127.0.0.0/8 and [::1] (comma-separated; \".example.com\" allows the names under it); any other Host gets 403 host_not_allowed, against DNS rebinding")
	f.StringSliceVar(&opts.TrustedProxies, "trusted-proxies", nil, "reverse proxies (CIDRs or addresses, comma-separated) whose X-Forwarded-Proto and X-Forwarded-For are believed: the console cookie is Secure behind a TLS proxy, and failed sign-ins are throttled per real client; default none")
	f.StringSliceVar(&opts.WebhookAllow, "webhook-allow", nil, "completion webhooks: \"PATTERN ${VAR}\" allows notify_urls under PATTERN (an http(s) URL; the host may begin with *., the path is a prefix), signed with the secret in the environment variable VAR; repeat for more; none (the default) turns webhooks off")
	f.StringSliceVar(&opts.WebhookDefault, "webhook-default", nil, "PRINCIPAL=URL: the notify_url of that principal's calls that name none (* for every principal without its own); the URL must match --webhook-allow")
	f.DurationVar(&opts.WebhookRetryFor, "webhook-retry-for", webhook.DefaultRetryFor, "how long a webhook delivery is retried (exponential backoff from 5s, at most 1h apart) before it is given up")
	f.DurationVar(&opts.WebhookTimeout, "webhook-timeout", webhook.DefaultTimeout, "how long one webhook request may take, its answer included")
	f.BoolVar(&opts.OTel, "otel", false, "export OpenTelemetry traces over OTLP/HTTP (to OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318); also on without it when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER is set; OTEL_SDK_DISABLED=true turns it off")
	f.StringVar(&opts.InstanceHost, "instance-host", "", "host identity in lease owners, for dead-owner recovery (default: hostname + hash of boot id and pid namespace); never give two machines or containers the same value")
	return cmd
}

// tracingFlush bounds how long a stopping serve waits for its last spans
// to reach the collector.
const tracingFlush = 5 * time.Second

// runServe listens, opens the store, builds the server and serves until ctx
// is cancelled (SIGINT/SIGTERM, see root.go).
//
// The listener comes first: a port already in use (say, a second serve
// started by mistake) must fail before the database is opened, or it would
// leave a new, migrated database file behind, or migrate a shared one, for
// a server that never ran. If opening the store fails, the port is freed.
func runServe(ctx context.Context, o *serveOptions, streams *IOStreams) error {
	logger := newLogger(streams.ErrOut, o.LogFormat, o.level)
	if p, set := setServeGC(os.Getenv); set {
		logger.Debug("garbage collection target set", "gogc", p)
	}

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", o.Addr, err)
	}
	// Run's http.Server closes ln when it stops; this covers every return
	// before that (a second Close is harmless).
	defer ln.Close()

	if o.Pprof != "" {
		pctx, stopPprof := context.WithCancel(ctx)
		wait, err := startPprof(pctx, o.Pprof, o.hosts, streams.ErrOut)
		if err != nil {
			stopPprof()
			return err
		}
		defer wait()
		defer stopPprof()
	}

	cfg := o.cfg
	cfg.Logger = logger
	tracing, err := telemetry.Setup(ctx, telemetry.Options{Enable: o.OTel, Console: streams.Out, Log: logger})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		// The spans still buffered go out before the exit, within a bound
		// so an unreachable collector cannot hold the stop.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlush)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			logger.Warn("tracing: spans not flushed at exit", logkey.Err, err)
		}
	}()
	if tracing.Provider != nil {
		cfg.TracerProvider = tracing.Provider
		logger.Info("tracing on", "exporter", tracing.Exporter)
	}
	auth := cfg.Auth
	if auth != nil {
		if err := auth.Reload(); err != nil {
			return err
		}
		stopReload := reloadOnSIGHUP(auth, logger)
		defer stopReload()
	}

	stopUpstreams, err := startUpstreams(ctx, o.tools, logger, o.MCPRefresh)
	if err != nil {
		return err
	}
	defer stopUpstreams()

	st, err := openWithWait(ctx, func(ctx context.Context) (store.Store, error) {
		return backend.Open(ctx, o.DB, failpointOptions(o.failpoints, logger))
	}, o.DBWait, 250*time.Millisecond, logger, o.DB)
	if err != nil {
		return fmt.Errorf("opening database %s: %w", backend.Redact(o.DB), err)
	}
	defer st.Close()
	st = armFailpoints(o.failpoints, st, logger)

	srv, err := server.New(cfg, st)
	if err != nil {
		return err
	}
	if o.tools != nil {
		logger.Info("tools file loaded", "file", o.Tools, "tools", strings.Join(o.tools.Names(), ","))
	}
	// Scripts and tests read the real address (with --addr host:0) from
	// this line.
	authNote := "auth off"
	if auth != nil {
		authNote = fmt.Sprintf("auth: %d tokens", auth.Len())
	}
	uiNote := "console off"
	if o.uiEnabled() {
		uiNote = "console /ui"
	}
	fmt.Fprintf(streams.ErrOut, "idemctl serving on http://%s (db: %s, workers %d, lease %s, %s, retention %s, %s)\n",
		ln.Addr(), backend.Redact(o.DB), o.Workers, o.Lease, authNote, retentionText(o.Retention), uiNote)
	return srv.Run(ctx, ln)
}

// maxPending maps --max-pending (0 = unlimited) to server.Config, where
// zero means the default.
func maxPending(n int) int {
	if n == 0 {
		return server.NoPendingLimit
	}
	return n
}

// perPrincipal maps a limit flag where 0 means none (the per-principal
// limits, --max-idle-per-client, the MCP session caps) to server.Config, where zero means the
// default and negative none.
func perPrincipal(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// uiEnabled is whether serve serves the web console: as --ui says when
// given; by default only where every page is behind a token or reachable
// from this host alone (a loopback --addr), not on a non-loopback address
// opened with --insecure-no-auth.
func (o *serveOptions) uiEnabled() bool {
	if o.uiSet {
		return o.UI
	}
	return o.AuthTokens != "" || netutil.CheckLoopback(o.Addr) == nil
}
