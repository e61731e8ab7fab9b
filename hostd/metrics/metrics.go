// Package metrics exports hostd's operator metrics in the Prometheus format:
// sandboxes by state, operation latencies (create, restore, resume, fork,
// exec), exec counts, warm pool sizes, leftover network namespaces that
// could not be removed, and each VMM's memory and CPU from its cgroup. hostd
// serves them at GET /metrics behind the API key.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// Source is what the collectors read from the sandbox manager.
type Source interface {
	List(ctx context.Context) ([]sandbox.Info, error)
	VMStats() []sandbox.VMStats
	PoolSizes() map[string]int
}

// Metrics holds hostd's registry. It implements sandbox.Observer.
type Metrics struct {
	reg     *prometheus.Registry
	latency *prometheus.HistogramVec
	events  *prometheus.CounterVec
	netns   prometheus.Counter
}

var _ sandbox.Observer = (*Metrics)(nil)

// New returns the metrics with the latency histograms registered.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentbox_operation_duration_seconds",
		Help:    "Latency of sandbox operations (create, restore, resume, fork, exec); the count of exec is the exec count.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"op"})
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_recorder_events_total",
		Help: "Events written to the flight recorder, by type.",
	}, []string{"type"})
	m.netns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentbox_netns_unremoved_total",
		Help: "Leftover sandbox network namespaces that the start-up sweep could not remove (busy) and left in place.",
	})
	m.reg.MustRegister(m.latency, m.events, m.netns)
	return m
}

// NetnsUnremoved counts a leftover network namespace that could not be
// removed.
func (m *Metrics) NetnsUnremoved() { m.netns.Inc() }

// Recorded counts n events of type typ written to the flight recorder.
func (m *Metrics) Recorded(typ string, n int) {
	m.events.WithLabelValues(typ).Add(float64(n))
}

// Since records that op started at t0 and has ended.
func (m *Metrics) Since(op string, t0 time.Time) {
	m.latency.WithLabelValues(op).Observe(time.Since(t0).Seconds())
}

// Watch registers the collectors that read src at every scrape.
func (m *Metrics) Watch(src Source) {
	m.reg.MustRegister(&collector{src: src})
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

var (
	descState = prometheus.NewDesc("agentbox_sandboxes", "Sandboxes by state.", []string{"state"}, nil)
	descPool  = prometheus.NewDesc("agentbox_pool_ready", "Warm sandboxes ready in a template's pool.", []string{"template"}, nil)
	descCPU   = prometheus.NewDesc("agentbox_vmm_cpu_seconds_total", "CPU time of a running sandbox's VMM process (cgroup).", []string{"sandbox_id"}, nil)
	descMem   = prometheus.NewDesc("agentbox_vmm_memory_bytes", "Host memory charged to a running sandbox's VMM process (cgroup).", []string{"sandbox_id"}, nil)
)

type collector struct{ src Source }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descPool, descCPU, descMem} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[sandbox.State]int{}
	for _, s := range []sandbox.State{sandbox.StateCreating, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateFailed} {
		counts[s] = 0
	}
	if infos, err := c.src.List(ctx); err == nil {
		for _, i := range infos {
			counts[i.State]++
		}
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, float64(n), string(s))
	}
	for t, n := range c.src.PoolSizes() {
		ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(n), t)
	}
	for _, v := range c.src.VMStats() {
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, v.CPUSeconds, v.ID)
		ch <- prometheus.MustNewConstMetric(descMem, prometheus.GaugeValue, float64(v.MemoryBytes), v.ID)
	}
}
