package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsAgents is the set the connected-clusters gauge reads: the most recently built server's.
var metricsAgents atomic.Pointer[Agents]

// Registered in the default registry, which /metrics serves.
var (
	identityRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_identity_refusals_total",
		Help: "Agent streams refused because their identifiers do not match their client certificate, by reason.",
	}, []string{"reason"})

	duplicateRefusals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_duplicate_streams_refused_total",
		Help: "Agent streams refused because the agent holds a tunnel to this proxy-server already (it landed here again through the entrypoint).",
	})

	agentStreams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cluster_proxy_server_agent_streams",
		Help: "Agent streams the proxy-server holds.",
	})

	established = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cluster_proxy_server_established_connections",
		Help: "Connections through the proxy-server's agents that the agents answered and that are not closed yet.",
	})

	connectedClusters = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cluster_proxy_connected_clusters",
		Help: "Clusters with at least one connected agent.",
	}, func() float64 {
		if a := metricsAgents.Load(); a != nil {
			return float64(a.ClusterCount())
		}
		return 0
	})
)

func init() {
	for _, r := range refusalReasons {
		identityRefusals.WithLabelValues(r)
	}
	prometheus.MustRegister(identityRefusals, duplicateRefusals, agentStreams, established, connectedClusters)
}
