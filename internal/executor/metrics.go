package executor

import "github.com/prometheus/client_golang/prometheus"

// Label values of idemctl_executions_total{outcome}, besides the final
// status a committed completion reports (succeeded, failed).
const (
	execFenced    = "fenced"    // the commit was refused: the lease had moved on
	execAbandoned = "abandoned" // shutdown cancelled the tool; the call was released
	execCrashed   = "crashed"   // a chaos hook ended the process (in tests: the exit hook)
	execError     = "error"     // the commit failed (database); the lease brings the call back
	// execRetry: a retryable failure with attempts left; the call is
	// pending again until its not-before time (docs/lifecycle.md,
	// "Server-side retries").
	execRetry = "retry_scheduled"
)

// Label values of idemctl_lease_extensions_total{outcome}.
const (
	beatExtended = "extended" // the lease was extended
	beatLost     = "lost"     // refused: the call was taken over; the tool was cancelled
	beatError    = "error"    // the store failed; the next beat tries again
)

// Label values of idemctl_lease_recoveries_total{reason}.
const (
	recoverExpired   = "expired"
	recoverDeadOwner = "dead_owner"
)

// metrics are one executor's Prometheus collectors. They belong to no
// registry of their own: the server registers them (Executor.Collector)
// on its registry next to its HTTP metrics, so /metrics shows both.
type metrics struct {
	executions   *prometheus.CounterVec // tool, outcome
	attempts     prometheus.Histogram
	recoveries   *prometheus.CounterVec // reason
	fenced       prometheus.Counter
	busyWorkers  prometheus.Gauge
	execSeconds  *prometheus.HistogramVec // tool
	heartbeats   *prometheus.CounterVec   // outcome
	claimQueries prometheus.Counter
	// claimedAtCreation counts the calls a create claimed on a
	// reservation (reserve.go); they are in attempts too.
	claimedAtCreation prometheus.Counter

	deadOwnerRecovery prometheus.Gauge // 1 on, 0 off (lease expiry only)

	throttled    *prometheus.CounterVec // tool
	breakerState *prometheus.GaugeVec   // tool
}

func newMetrics() *metrics {
	m := &metrics{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_executions_total",
			Help: "Tool attempts by tool and outcome (succeeded, failed, retry_scheduled, fenced, abandoned, crashed, error).",
		}, []string{"tool", "outcome"}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idemctl_execution_attempt",
			Help:    "Attempt number of each claimed execution; mass above 1 means leases expire or processes crash.",
			Buckets: []float64{1, 2, 3, 5, 10},
		}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_lease_recoveries_total",
			Help: "Running calls returned to pending: lease expired, or owner process gone (dead_owner).",
		}, []string{"reason"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemctl_fenced_commits_total",
			Help: "Completions refused because the worker no longer held the lease it claimed.",
		}),
		busyWorkers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemctl_workers_busy",
			Help: "Tool executions running now (limit: --workers).",
		}),
		claimQueries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemctl_claim_queries_total",
			Help: "Claims asked of the database (each claims up to the free capacity in one transaction); against idemctl_execution_attempt_count, the batching of claims.",
		}),
		claimedAtCreation: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemctl_claimed_at_creation_total",
			Help: "Calls claimed by the create that recorded them, on a worker this server had free (docs/lifecycle.md, \"Claim at creation\"); the rest of idemctl_execution_attempt_count was claimed by the scheduler.",
		}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_lease_extensions_total",
			Help: "Heartbeats of running tools: extended (lease moved on), lost (refused: the call was taken over, the tool cancelled), error (store failure, retried at the next beat).",
		}, []string{"outcome"}),
		execSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemctl_execution_duration_seconds",
			Help:    "Time from claim to committed completion, by tool.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30},
		}, []string{"tool"}),
		deadOwnerRecovery: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemctl_dead_owner_recovery",
			Help: "1 if calls of crashed processes on this host are released at once (dead-owner recovery), 0 if only lease expiry recovers them (identity incomplete, or /proc may hide processes).",
		}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_tool_throttled_total",
			Help: "Admissions of a rate-limited tool that left ready calls pending for want of tokens (docs/tools.md, \"Rate limits\").",
		}, []string{"tool"}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idemctl_tool_breaker_state",
			Help: "A breaker-guarded tool's circuit breaker as this instance last saw it: 0 closed, 1 half_open (a probe is out), 2 open.",
		}, []string{"tool"}),
	}
	// Pre-create the label values a dashboard expects, so they read 0
	// instead of being absent before the first event.
	for _, r := range []string{recoverExpired, recoverDeadOwner} {
		m.recoveries.WithLabelValues(r)
	}
	for _, o := range []string{beatExtended, beatLost, beatError} {
		m.heartbeats.WithLabelValues(o)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.executions, m.attempts, m.recoveries, m.fenced, m.busyWorkers,
		m.execSeconds, m.heartbeats, m.claimQueries, m.claimedAtCreation, m.deadOwnerRecovery, m.throttled, m.breakerState}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Collector is the executor's metrics as one collector, for the server to
// register on its registry (the names and labels are those of
// docs/operations.md, "Metrics").
func (e *Executor) Collector() prometheus.Collector { return e.m }
