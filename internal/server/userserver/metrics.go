package userserver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The proxy-server serves the default registry (ANP registers its own metrics there too).
var (
	tunnelsOpened = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_user_server_tunnels_opened_total",
		Help: "Tunnels the user-server opened to a cluster's service-proxy. Pooled tunnels are reused, so this grows " +
			"far slower than the request count.",
	}, []string{"cluster"})
	tunnelsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cluster_proxy_user_server_tunnels_open",
		Help: "Tunnels to a cluster's service-proxy open now, in use or idle in the pool.",
	}, []string{"cluster"})
	tunnelDialFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_user_server_tunnel_dial_failures_total",
		Help: "Tunnels to a cluster's service-proxy that could not be opened.",
	}, []string{"cluster"})
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_user_server_requests_total",
		Help: "Requests the user-server answered, by HTTP status code (101 for upgraded connections, 499 when the " +
			"client went away before an answer).",
	}, []string{"code"})
	clusterRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_cluster_requests_total",
		Help: "Requests to a managed cluster, by the way in (user-server or aggregated), authorization verb and HTTP " +
			"status code (101 for upgraded connections, 499 when the client went away before an answer).",
	}, []string{"cluster", "via", "verb", "code"})
	clusterRequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cluster_proxy_cluster_request_duration_seconds",
		Help: "Time until a managed cluster's answer began (the headers of a watch, log or upgrade), by the way in " +
			"and verb.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"cluster", "via", "verb"})
)

func init() {
	prometheus.MustRegister(tunnelsOpened, tunnelsOpen, tunnelDialFailures, requestsTotal, clusterRequests, clusterRequestSeconds)
}
