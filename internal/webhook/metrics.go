package webhook

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemctl/idemctl/internal/store"
)

// Label values of idemctl_webhook_attempts_total{outcome}.
const (
	outcomeDelivered = "delivered" // the receiver answered 2xx
	outcomeFailed    = "failed"    // an attempt failed; retried later
	outcomeGivenUp   = "given_up"  // an attempt failed and the delivery was given up
)

type metrics struct {
	outcomes *prometheus.CounterVec
	pending  *prometheus.Desc
	st       store.Store
}

func newMetrics(st store.Store) *metrics {
	m := &metrics{
		st: st,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemctl_webhook_attempts_total",
			Help: "Webhook delivery attempts this process made, by outcome: delivered, failed (retried later), given_up.",
		}, []string{"outcome"}),
		pending: prometheus.NewDesc("idemctl_webhook_pending",
			"Webhook deliveries not yet delivered or given up, read from the database at scrape time.", nil, nil),
	}
	for _, o := range []string{outcomeDelivered, outcomeFailed, outcomeGivenUp} {
		m.outcomes.WithLabelValues(o)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.outcomes.Describe(ch)
	ch <- m.pending
}

// Collect implements prometheus.Collector. A failed read reports NaN
// rather than a misleading 0.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.outcomes.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n := math.NaN()
	if p, err := m.st.PendingDeliveries(ctx); err == nil {
		n = float64(p)
	}
	ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, n)
}

// Collector is the Deliverer's metrics, for the server's registry.
func (d *Deliverer) Collector() prometheus.Collector { return d.m }
