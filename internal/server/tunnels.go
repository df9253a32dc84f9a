package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// Tunnel reports (GET /tunnels, docs/data-plane.md). The manager used to open a tunnel of its own to every cluster
// for every probe: two TLS handshakes per cluster per round on the hub. Each replica now probes the clusters it holds
// through its own in-process tunnels, in plain HTTP to the agent's tunnel health port, which answers with its
// kube-apiserver's /healthz over a connection the agent keeps open; and it answers only what changed since the
// asker's last answer. A round costs no TLS on the hub and holds nothing per cluster between rounds.
const (
	// DefaultTunnelProbeTimeout bounds one probe when the asker names no timeout.
	DefaultTunnelProbeTimeout = 5 * time.Second
	// maxTunnelProbeTimeout bounds the timeout an asker may name: the whole answer waits for the slowest probe.
	maxTunnelProbeTimeout = time.Minute
	// DefaultTunnelProbeConcurrency is how many probes run at once.
	DefaultTunnelProbeConcurrency = 64
)

// tunnelReports is what this replica reports of each cluster's tunnel.
type tunnelReports struct {
	dial           tunnelclient.DialClusterFunc
	agents         *Agents
	instance       string
	concurrency    int
	latencyChanged func(reported, measured time.Duration) bool
	// records, when set, is the state of the replica's record sinks, which every answer carries.
	records func() []tunnelclient.RecordSink

	round sync.Mutex // one probe round at a time

	mu       sync.Mutex
	gen      uint64
	clusters map[string]*reportedCluster
}

// reportedCluster is one cluster's report.
type reportedCluster struct {
	tunnelclient.ClusterTunnel
	gen uint64 // of the report's last change
}

func newTunnelReports(dial tunnelclient.DialClusterFunc, agents *Agents, serverID string, concurrency int,
	latencyChanged func(reported, measured time.Duration) bool) *tunnelReports {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	if latencyChanged == nil {
		latencyChanged = tunnelclient.LatencyChanged
	}
	return &tunnelReports{dial: dial, agents: agents, instance: serverID + "-" + hex.EncodeToString(nonce[:]),
		concurrency: max(concurrency, 1), latencyChanged: latencyChanged, clusters: map[string]*reportedCluster{}}
}

// ServeHTTP answers GET /tunnels?timeout=<duration>&instance=<instance>&since=<generation>: it probes every
// cluster this replica holds, each within timeout, then lists the clusters whose report changed after generation
// since, or every cluster with an agent when instance is not this process's.
func (t *tunnelReports) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	timeout := DefaultTunnelProbeTimeout
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxTunnelProbeTimeout {
			http.Error(w, fmt.Sprintf("query parameter timeout: %q is not a duration in (0, %s]", v, maxTunnelProbeTimeout), http.StatusBadRequest)
			return
		}
		timeout = d
	}
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("query parameter since: %q is not a generation", v), http.StatusBadRequest)
			return
		}
		since = n
	}
	t.probeRound(r.Context(), timeout)
	if r.Context().Err() != nil {
		return // the asker is gone
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(t.view(q.Get("instance"), since))
}

// view is the answer to an asker whose last answer was instance's generation since.
func (t *tunnelReports) view(instance string, since uint64) tunnelclient.TunnelsView {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := tunnelclient.TunnelsView{Instance: t.instance, Generation: t.gen, Full: instance != t.instance || since > t.gen,
		Clusters: map[string]tunnelclient.ClusterTunnel{}}
	if t.records != nil {
		v.Records = t.records()
	}
	for cluster, c := range t.clusters {
		if (v.Full && len(c.Agents) > 0) || (!v.Full && c.gen > since) {
			v.Clusters[cluster] = c.ClusterTunnel
		}
	}
	return v
}

// probeRound brings the reports up to date: the agents held now, then a probe of every cluster with one.
func (t *tunnelReports) probeRound(ctx context.Context, timeout time.Duration) {
	t.round.Lock()
	defer t.round.Unlock()
	clusters := t.syncAgents()
	results := make([]*tunnelclient.TunnelProbe, len(clusters))
	workqueue.ParallelizeUntil(ctx, t.concurrency, len(clusters), func(i int) {
		results[i] = t.probe(ctx, clusters[i], timeout)
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, cluster := range clusters {
		c := t.clusters[cluster]
		if results[i] == nil || len(c.Agents) == 0 {
			continue // not probed (the asker left)
		}
		if c.Probe == nil || tunnelclient.ProbeChanged(*c.Probe, *results[i], t.latencyChanged) {
			c.Probe = results[i]
			t.gen++
			c.gen = t.gen
		}
	}
}

// syncAgents updates the reports to the agents held now, and returns the clusters that have one.
func (t *tunnelReports) syncAgents() []string {
	held := t.agents.Snapshot()
	t.mu.Lock()
	defer t.mu.Unlock()
	for cluster, c := range t.clusters {
		if _, ok := held[cluster]; !ok && len(c.Agents) > 0 {
			c.Agents, c.Probe = nil, nil
			t.gen++
			c.gen = t.gen
		}
	}
	clusters := make([]string, 0, len(held))
	for cluster, ids := range held {
		c := t.clusters[cluster]
		if c == nil {
			c = &reportedCluster{}
			t.clusters[cluster] = c
		}
		if !slices.Equal(c.Agents, ids) {
			c.Agents = ids
			t.gen++
			c.gen = t.gen
		}
		clusters = append(clusters, cluster)
	}
	return clusters
}

// probe sends GET /healthz to cluster's tunnel health port, and once more if that fails, so one lost exchange is not
// reported as an unhealthy cluster. An agent that has no such port (one from before it, while the agents roll) is
// probed as before it, with TLS to <cluster>:443. Nil when ctx ended first.
func (t *tunnelReports) probe(ctx context.Context, cluster string, timeout time.Duration) *tunnelclient.TunnelProbe {
	var p tunnelclient.TunnelProbe
	for attempt := 0; attempt < 2; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		probeCtx, cancel := context.WithTimeout(ctx, timeout)
		r, err := tunnelclient.ProbeHealthPort(probeCtx, t.dial, cluster)
		if errors.Is(err, tunnelclient.ErrNoHealthPort) {
			r, err = tunnelclient.Probe(probeCtx, t.dial, cluster)
		}
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			p = tunnelclient.TunnelProbe{Message: err.Error()}
			tunnelProbes.WithLabelValues("error").Inc()
		case !r.Healthy:
			p = tunnelclient.TunnelProbe{LatencyMicros: r.Latency.Microseconds(), Message: r.Message}
			tunnelProbes.WithLabelValues("unhealthy").Inc()
		default:
			tunnelProbes.WithLabelValues("healthy").Inc()
			tunnelProbeLatency.Observe(r.Latency.Seconds())
			return &tunnelclient.TunnelProbe{Healthy: true, LatencyMicros: max(r.Latency.Microseconds(), 1)}
		}
	}
	return &p
}

var (
	tunnelProbes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_tunnel_probes_total",
		Help: "GET /healthz probes through managed clusters' tunnels, by result (healthy, unhealthy, error).",
	}, []string{"result"})
	tunnelProbeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cluster_proxy_tunnel_probe_duration_seconds",
		Help:    "Round trip of healthy GET /healthz probes through managed clusters' tunnels to their kube-apiservers.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
)

func init() {
	prometheus.MustRegister(tunnelProbes, tunnelProbeLatency)
}
