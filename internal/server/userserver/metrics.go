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
)

func init() {
	prometheus.MustRegister(tunnelsOpened, tunnelsOpen, tunnelDialFailures, requestsTotal)
}
