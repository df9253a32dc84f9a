package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
)

// Dial results, the result label of cluster_proxy_agent_dials_total.
const (
	dialSuccess   = "success"
	dialRefused   = "refused"   // the destination is not one this agent serves
	dialError     = "error"     // the destination did not answer
	dialCancelled = "cancelled" // DIAL_CLS, or the tunnel ended while dialing
	dialDraining  = "draining"  // the agent is shutting down
)

// How a drain closed a connection, the how label of cluster_proxy_agent_drained_connections_total.
const (
	drainedPaused = "paused" // in a pause between requests
	drainedCut    = "cut"    // still busy at the drain timeout
)

type metrics struct {
	registry    *prometheus.Registry
	tunnels     prometheus.Gauge
	connections prometheus.Gauge
	dials       *prometheus.CounterVec
	connects    *prometheus.CounterVec
	bytesToHub  prometheus.Counter
	bytesToDest prometheus.Counter
	drained     *prometheus.CounterVec
}

func newMetrics() *metrics {
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_bytes_total",
		Help: "Payload bytes moved through the tunnels; direction is to_hub (read from destinations) or from_hub (written to them).",
	}, []string{"direction"})
	m := &metrics{
		registry: prometheus.NewRegistry(),
		tunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cluster_proxy_agent_tunnels",
			Help: "Tunnels (gRPC streams to distinct proxy-servers) currently up.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cluster_proxy_agent_open_connections",
			Help: "Connections to destinations currently open through the tunnels.",
		}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cluster_proxy_agent_dials_total",
			Help: "Dial requests from the hub by destination (kube-apiserver, service-proxy, other) and result.",
		}, []string{"destination", "result"}),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cluster_proxy_agent_server_connects_total",
			Help: "Attempts to open a tunnel to a proxy-server by result (success, error, duplicate).",
		}, []string{"result"}),
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cluster_proxy_agent_drained_connections_total",
			Help: "Connections closed while the agent shut down, by how: paused (between requests) or cut (busy at the drain timeout).",
		}, []string{"how"}),
		bytesToHub:  bytes.WithLabelValues("to_hub"),
		bytesToDest: bytes.WithLabelValues("from_hub"),
	}
	m.registry.MustRegister(m.tunnels, m.connections, m.dials, m.connects, bytes, m.drained, review.Collector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// HealthHandler serves /healthz (the process is alive), /readyz (at least one tunnel is up and the agent is not
// shutting down) and /metrics.
func (a *Agent) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			http.Error(w, "no tunnel to a proxy-server is up", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{}))
	return mux
}

// Registry is where the agent's metrics live, for a caller that adds its own.
func (a *Agent) Registry() *prometheus.Registry { return a.metrics.registry }

// MetricsDescriber describes every metric an agent's /metrics serves (docs/metrics.md lists them).
func MetricsDescriber() interface{ Describe(chan<- *prometheus.Desc) } { return newMetrics().registry }
