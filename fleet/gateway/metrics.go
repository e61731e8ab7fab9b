package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus series: requests by route and
// status, and placements by host with their latency.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.HistogramVec
	placements *prometheus.CounterVec
	placeLat   prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentbox_gateway_request_seconds",
		Help: "Requests through the control plane, by route and status.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)},
		[]string{"route", "status"})
	m.placements = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentbox_gateway_placements_total",
		Help: "Placements by the host chosen (none: no host fit; refused: the reservation failed)."}, []string{"host"})
	m.placeLat = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentbox_gateway_placement_seconds",
		Help: "Time to choose a host and reserve room there (one transaction).", Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14)})
	m.reg.MustRegister(m.requests, m.placements, m.placeLat)
	return m
}

func (m *metrics) request(route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Observe(d.Seconds())
}

func (m *metrics) placed(host string, d time.Duration) {
	m.placements.WithLabelValues(host).Inc()
	m.placeLat.Observe(d.Seconds())
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }
