package server

import (
	"crypto/tls"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// metricsAgents is the set the connected-clusters gauge reads: the most recently built server's.
var metricsAgents atomic.Pointer[Agents]

// metricsProfile is the TLS profile the info metric reports: the most recently built server's.
var metricsProfile atomic.Pointer[tlsreload.Profile]

// tlsProfileInfo reports the TLS profile the listeners apply now, as labels of a constant 1: what a script reads to
// see a changed profile in force, which the pod's arguments do not show.
type tlsProfileInfo struct{ desc *prometheus.Desc }

func (c tlsProfileInfo) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c tlsProfileInfo) Collect(ch chan<- prometheus.Metric) {
	p := metricsProfile.Load()
	if p == nil {
		return
	}
	version, suites := p.Current()
	name := "VersionTLS12"
	if version == tls.VersionTLS13 {
		name = "VersionTLS13"
	}
	names := make([]string, len(suites))
	for i, id := range suites {
		names[i] = tls.CipherSuiteName(id)
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, name, strings.Join(names, ","))
}

// Registered in the default registry, which /metrics serves.
var (
	identityRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_identity_refusals_total",
		Help: "Agent streams refused because their identifiers do not match their client certificate, by reason.",
	}, []string{"reason"})

	frontendRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_server_frontend_refusals_total",
		Help: "Dials of the gRPC and HTTP-CONNECT frontends refused because the client certificate may not reach the cluster, by reason.",
	}, []string{"reason"})

	duplicateRefusals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_duplicate_streams_refused_total",
		Help: "Agent streams refused because the agent holds a tunnel to this proxy-server already (it landed here again through the entrypoint).",
	})

	movedDials = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_server_moved_dials_total",
		Help: "Dials an agent left unanswered for a second that went to an agent of the same cluster that connected since.",
	})

	stallWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_server_frontend_stall_waits_total",
		Help: "Times an agent's loop waited for a frontend connection's reader whose queue was full (backpressure).",
	})

	readersCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_server_frontend_readers_cut_total",
		Help: "Frontend connections closed because their reader stopped taking data and fell twice the frontend queue behind.",
	})

	pausedConnections = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_server_frontend_pauses_total",
		Help: "Times an agent was told to stop reading a connection's destination because the connection's reader fell a frontend queue behind.",
	})

	limitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_server_limit_refusals_total",
		Help: "Streams and dials refused because a client certificate or an agent stream holds as many as allowed, by limit.",
	}, []string{"limit"})

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
	for _, r := range frontendRefusalReasons {
		frontendRefusals.WithLabelValues(r)
	}
	for _, l := range limitNames {
		limitRefusals.WithLabelValues(l)
	}
	for _, r := range refusalReasons {
		identityRefusals.WithLabelValues(r)
	}
	profile := tlsProfileInfo{desc: prometheus.NewDesc("cluster_proxy_tls_profile_info",
		"The TLS profile the proxy-server's listeners apply to new handshakes now (min_version; cipher_suites, comma-separated, "+
			"empty for Go's defaults). Always 1.", []string{"min_version", "cipher_suites"}, nil)}
	prometheus.MustRegister(identityRefusals, frontendRefusals, duplicateRefusals, movedDials, stallWaits, readersCut, pausedConnections, limitRefusals, agentStreams, established, connectedClusters, profile,
		review.Collector())
}
