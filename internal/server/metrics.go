package server

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemctl/idemctl/internal/store"
)

// Label values of idemctl_calls_total{outcome}.
const (
	callsCreated    = "created"
	callsReplayed   = "replayed"
	callsRetryReset = "retry_reset"
	callsConflict   = "conflict"
	// callsDeduplicated: a new key answered with an existing call by
	// intent deduplication.
	callsDeduplicated = "deduplicated"
	// callsExpired: a key whose call retention purged, answered 410
	// from its tombstone.
	callsExpired = "expired"
	// callsCircuitOpen: a new key refused because its tool's breaker is
	// open and fails fast.
	callsCircuitOpen = "circuit_open"
)

// Label values of idemctl_limit_refusals_total{limit}.
const (
	limitBodies  = "bodies"  // MaxConcurrentBodies: 503 overloaded
	limitWaits   = "waits"   // MaxHeldWaits: answered without waiting
	limitPending = "pending" // MaxPending: a new key answered 503 overloaded

	limitPendingPrincipal = "pending_principal" // MaxPendingPerPrincipal: 503 overloaded
	limitWaitsPrincipal   = "waits_principal"   // MaxHeldWaitsPerPrincipal: answered without waiting
	limitMCPSessions      = "mcp_sessions"      // MaxMCPSessions(PerPrincipal): 503 overloaded
	limitBodyBytes        = "body_bytes"        // MaxBodyBytesInFlight: 503 overloaded
)

// Label values of idemctl_auth_failures_total{reason}.
const (
	authMissing = "missing" // no Authorization: Bearer header
	authUnknown = "unknown" // a token no line of the token file hashes to
	// authThrottled: refused 429 auth_throttled before its token was
	// looked at, its client having failed too often (authlimit).
	authThrottled = "throttled"
)

// metrics are one Server's Prometheus collectors, in a registry of its own:
// no global state, so a test process can run many servers.
type metrics struct {
	reg *prometheus.Registry

	requests       *prometheus.CounterVec   // route, code
	requestSeconds *prometheus.HistogramVec // route
	calls          *prometheus.CounterVec   // outcome
	replayHits     prometheus.Counter       // replays answered from the replay cache

	bodiesInFlight prometheus.Gauge
	waitsHeld      prometheus.Gauge
	limitRefusals  *prometheus.CounterVec // limit

	authFailures     *prometheus.CounterVec // reason
	purged           prometheus.Counter
	tombstonesPurged prometheus.Counter
	purgeSeconds     prometheus.Histogram
}

// newMetrics builds the collectors. The queue is read from st at scrape
// time; maxPending is Config.MaxPending; exec is the executor's metrics
// (executor.Executor.Collector), registered with the server's own, as are
// more (the webhook deliverer's, when it runs). extra,
// if not nil, also receives the idemctl collectors (not the Go and process
// ones, which an embedding program registers itself).
func newMetrics(st store.Store, maxPending int64, exec prometheus.Collector, extra prometheus.Registerer, more ...prometheus.Collector) (*metrics, error) {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemctl_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern (includes Prefer: wait holds).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_calls_total",
			Help: "POST /v1/tool-calls results: created, replayed (same key, same fingerprint), retry_reset, conflict (same key, other fingerprint), deduplicated, expired (a purged key's tombstone: 410), circuit_open (a new key refused: the tool's breaker is open and fails fast).",
		}, []string{"outcome"}),
		replayHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemctl_replay_cache_hits_total",
			Help: "Replays of succeeded calls answered from the replay cache, without the store (also counted in idemctl_calls_total{outcome=\"replayed\"}).",
		}),
		bodiesInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemctl_http_bodies_in_flight",
			Help: "POST bodies being read and parsed now (limit: MaxConcurrentBodies).",
		}),
		waitsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemctl_http_waits_held",
			Help: "Requests held under Prefer: wait now (limit: MaxHeldWaits).",
		}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_limit_refusals_total",
			Help: "Requests over a limit: bodies (answered 503 overloaded), waits (answered at once, not held), pending (a new key answered 503 overloaded: the queue is full).",
		}, []string{"limit"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_auth_failures_total",
			Help: "Requests refused for their credential: missing (no bearer token) or unknown (no such token), both 401; throttled (429, too many failures from the client's address).",
		}, []string{"reason"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemctl_purged_calls_total",
			Help: "Final calls deleted by the retention purge (their effects are kept).",
		}),
		tombstonesPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemctl_purged_tombstones_total",
			Help: "Tombstones of purged keys deleted after --tombstone-retention (their keys are new again).",
		}),
		purgeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idemctl_purge_batch_duration_seconds",
			Help:    "Duration of one retention purge batch: the longest a purge holds the write lock (SQLite) or its rows (PostgreSQL).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	maxPendingGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idemctl_queue_max_pending",
		Help: "The limit of pending calls beyond which a new key is refused (--max-pending; 0 = unlimited).",
	})
	maxPendingGauge.Set(float64(maxPending))
	own := []prometheus.Collector{
		m.requests, m.requestSeconds, m.calls, m.replayHits, exec,
		m.bodiesInFlight, m.waitsHeld, m.limitRefusals, newQueueCollector(st), maxPendingGauge,
		m.authFailures, m.purged, m.tombstonesPurged, m.purgeSeconds,
	}
	own = append(own, more...)
	for _, c := range own {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
		if extra != nil {
			if err := extra.Register(c); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create the label values a dashboard expects, so they read 0
	// instead of being absent before the first event.
	for _, o := range []string{callsCreated, callsReplayed, callsRetryReset, callsConflict, callsDeduplicated, callsExpired, callsCircuitOpen} {
		m.calls.WithLabelValues(o)
	}
	for _, r := range []string{authMissing, authUnknown, authThrottled} {
		m.authFailures.WithLabelValues(r)
	}
	for _, l := range []string{limitBodies, limitWaits, limitPending, limitPendingPrincipal, limitWaitsPrincipal, limitMCPSessions, limitBodyBytes} {
		m.limitRefusals.WithLabelValues(l)
	}
	return m, nil
}

// queueCollector reports the queue read from the database at scrape time
// (store.Queue, one query for both values): exact, database-wide, unlike
// the estimate the back-pressure uses between the scheduler's reads. A
// failed read reports NaN rather than a misleading 0.
type queueCollector struct {
	st          store.Store
	depth, aged *prometheus.Desc
}

func newQueueCollector(st store.Store) *queueCollector {
	return &queueCollector{
		st: st,
		depth: prometheus.NewDesc("idemctl_queue_depth",
			"Calls waiting to run (status pending), read from the database at scrape time.", nil, nil),
		aged: prometheus.NewDesc("idemctl_queue_oldest_pending_age_seconds",
			"Age of the oldest pending call (since its creation, by the database's clock; 0 when none), read at scrape time.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.aged
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	depth, age := math.NaN(), math.NaN()
	if q, err := c.st.Queue(ctx); err == nil {
		depth, age = float64(q.Pending), q.OldestPendingAge.Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, depth)
	ch <- prometheus.MustNewConstMetric(c.aged, prometheus.GaugeValue, age)
}
