// Package tunnelhealth watches every managed cluster's tunnel from the hub, for the manager. Every interval it asks
// each proxy-server replica which agents it holds (GET /agents) and probes GET /healthz through the tunnel of each
// connected cluster, a few at a time. It keeps one observation per cluster and replaces it only when it changes in a way the
// status shows (see Significant), and it tells the reconciler which clusters changed, so a steady state costs no API
// writes and no reconciles.
//
// It reads the proxy-client and CA Secrets through the manager's cache on every connection, so renewed certificates
// are followed. The ManagedProxyConfiguration (where the proxy-servers listen) is read when a round starts without a
// client: the first round and the one after a round that could not ask the proxy-servers, so changed ports or
// namespace are followed once the old address stops answering.
package tunnelhealth

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// Defaults of the Options left zero.
const (
	DefaultInterval     = 30 * time.Second
	DefaultProbeTimeout = 5 * time.Second
	DefaultConcurrency  = 16
)

// AllClusters, as the object of a change event, means that every cluster's state changed (the first round ended,
// or the proxy-servers stopped or started answering).
const AllClusters = ""

// latencyFloor is the change of latency that never counts, however small the latency.
const latencyFloor = 5 * time.Millisecond

// Options configure a Source.
type Options struct {
	// Reader reads the ManagedProxyConfiguration and the Secrets: the manager's cached client.
	Reader client.Reader
	// Configuration names the ManagedProxyConfiguration whose proxy-servers are asked; empty means cluster-proxy.
	Configuration string
	// Resolve overrides where in-cluster addresses are dialed (local environments).
	Resolve clusterproxy.Resolver
	// Interval between rounds.
	Interval time.Duration
	// ProbeTimeout bounds one probe, the tunnel's set-up included, and the GET /agents.
	ProbeTimeout time.Duration
	// Concurrency is how many probes run at once.
	Concurrency int
	// StaleAfter is how long the last observation stands while the proxy-servers cannot be asked, so one failed
	// round does not flip every cluster; default three intervals.
	StaleAfter time.Duration
	// LatencyChanged decides whether a healthy probe's latency moved enough to be reported; default LatencyChanged.
	// Tests inject it so that real-time jitter cannot decide what they assert.
	LatencyChanged func(reported, measured time.Duration) bool
	// Clock stamps the rounds and so decides StaleAfter; default the real clock.
	Clock clock.PassiveClock
	Log   logr.Logger
}

// State is what the source reports of one cluster's tunnel.
type State struct {
	// Time is when the reported observation was made. Later rounds that only confirm it do not replace it.
	Time time.Time
	// Unreachable is true when the proxy-servers could not be asked for longer than StaleAfter; the other fields
	// are then empty. The manager's log says why.
	Unreachable bool
	// ConnectedAgents is the number of agents of the cluster that every proxy-server replica holds: the count of the
	// replica holding the fewest, so zero while one replica has none.
	ConnectedAgents int
	// Replicas is the number of proxy-server replicas that answered; ReplicasWithAgents how many of them hold at
	// least one agent of the cluster. A request reaches the cluster only through a replica that holds one.
	Replicas, ReplicasWithAgents int
	// Probe is the GET /healthz through the tunnel; nil when no agent is connected (nothing to probe).
	Probe *Probe
}

// Probe is one GET /healthz through a cluster's tunnel.
type Probe struct {
	Healthy bool
	// Latency of the exchange, the tunnel's set-up included; zero when no answer came.
	Latency time.Duration
	// Message says why the probe failed.
	Message string
}

// Significant reports whether next differs from prev in a way the status shows: the proxy-servers' reachability,
// the number of connected agents, whether and how the tunnel answered, or, while healthy, a latency that more than
// doubled or fell below half (LatencyChanged). Successive failures keep the first one's message.
func Significant(prev, next State) bool { return significant(prev, next, LatencyChanged) }

func significant(prev, next State, latencyChanged func(reported, measured time.Duration) bool) bool {
	switch {
	case prev.Unreachable != next.Unreachable, prev.ConnectedAgents != next.ConnectedAgents, (prev.Probe == nil) != (next.Probe == nil),
		prev.Replicas != next.Replicas, prev.ReplicasWithAgents != next.ReplicasWithAgents:
		return true
	case prev.Probe == nil:
		return false
	case prev.Probe.Healthy != next.Probe.Healthy:
		return true
	case prev.Probe.Healthy:
		return latencyChanged(prev.Probe.Latency, next.Probe.Latency)
	default:
		return false
	}
}

// LatencyChanged reports whether a probe's latency moved far enough from the reported one to be reported: more
// than twice it, or less than half, with moves under 5ms ignored. Jitter stays unreported, a slower route does not.
func LatencyChanged(reported, measured time.Duration) bool {
	return measured > 2*reported+latencyFloor || 2*measured+latencyFloor < reported
}

// Source observes the tunnels; it is a manager Runnable that runs on the leader only.
type Source struct {
	opts    Options
	changes chan event.TypedGenericEvent[string]

	mu          sync.RWMutex
	observed    bool      // a round has ended
	firstRound  time.Time // when it did
	unreachable bool
	lastGood    time.Time
	lastErr     string
	clusters    map[string]State // clusters that had an agent connected since the start, as reported

	// proxies is kept from round to round (rounds do not overlap), so its parsed credentials are reused; a round
	// that cannot ask the proxy-servers drops it, and the next reads the configuration again.
	proxies *clusterproxy.Client
}

// New builds a source; Start runs it.
func New(opts Options) *Source {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 3 * opts.Interval
	}
	if opts.LatencyChanged == nil {
		opts.LatencyChanged = LatencyChanged
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Source{opts: opts, changes: make(chan event.TypedGenericEvent[string], 1024), clusters: map[string]State{}}
}

// Changes delivers the names of the clusters whose State changed, or AllClusters. It has one reader.
func (s *Source) Changes() <-chan event.TypedGenericEvent[string] { return s.changes }

// Tunnel is the reported state of cluster's tunnel; false until the first round has ended.
func (s *Source) Tunnel(cluster string) (State, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case !s.observed:
		return State{}, false
	case s.unreachable:
		return State{Time: s.lastGood, Unreachable: true}, true
	}
	if st, ok := s.clusters[cluster]; ok {
		return st, true
	}
	return State{Time: s.firstRound}, true
}

// Start runs a round every interval until ctx ends.
func (s *Source) Start(ctx context.Context) error {
	ticker := time.NewTicker(s.opts.Interval)
	defer ticker.Stop()
	for {
		s.Round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Round asks the proxy-servers once and probes every connected cluster, then reports what changed.
func (s *Source) Round(ctx context.Context) {
	now := s.opts.Clock.Now()
	replicas, proxies, err := s.connectedAgents(ctx)
	if err != nil {
		s.failed(ctx, now, err)
		return
	}
	agents := byCluster(replicas)
	results := s.probeAll(ctx, proxies, agents)
	if ctx.Err() != nil {
		return // shutting down: the results are cut short, not real
	}
	s.update(ctx, now, agents, results)
}

// held is what the proxy-server replicas hold of one cluster's agents.
type held struct {
	fewest   int // agents on the replica holding the fewest
	replicas int // replicas that answered
	holding  int // replicas holding at least one
}

// byCluster turns the replicas' answers into what they hold of each cluster that has an agent on any of them.
func byCluster(replicas map[string]map[string][]string) map[string]held {
	out := map[string]held{}
	for _, agents := range replicas {
		for cluster := range agents {
			out[cluster] = held{replicas: len(replicas)}
		}
	}
	for cluster, h := range out {
		h.fewest = -1
		for _, agents := range replicas {
			n := len(agents[cluster])
			if n > 0 {
				h.holding++
			}
			if h.fewest < 0 || n < h.fewest {
				h.fewest = n
			}
		}
		out[cluster] = h
	}
	return out
}

func (s *Source) connectedAgents(ctx context.Context) (map[string]map[string][]string, *clusterproxy.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ProbeTimeout)
	defer cancel()
	if s.proxies == nil {
		proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: s.opts.Reader, Configuration: s.opts.Configuration, Resolve: s.opts.Resolve})
		if err != nil {
			return nil, nil, err
		}
		s.proxies = proxies
	}
	agents, err := s.proxies.ReplicaAgents(ctx)
	if err != nil {
		s.proxies = nil
		return nil, nil, err
	}
	return agents, s.proxies, nil
}

// probeAll probes every cluster with a connected agent, Concurrency at a time.
func (s *Source) probeAll(ctx context.Context, proxies *clusterproxy.Client, agents map[string]held) map[string]Probe {
	clusters := slices.Collect(maps.Keys(agents))
	probed := make([]Probe, len(clusters))
	started := make([]bool, len(clusters))
	workqueue.ParallelizeUntil(ctx, max(s.opts.Concurrency, 1), len(clusters), func(i int) {
		started[i] = true
		probed[i] = s.probe(ctx, proxies, clusters[i])
	})
	results := make(map[string]Probe, len(clusters))
	for i, cluster := range clusters {
		if started[i] {
			results[cluster] = probed[i]
		}
	}
	return results
}

// probe sends GET /healthz through cluster's tunnel, and once more if that fails, so one lost exchange is not
// reported as an unhealthy cluster.
func (s *Source) probe(ctx context.Context, proxies *clusterproxy.Client, cluster string) Probe {
	var p Probe
	for attempt := 0; attempt < 2 && ctx.Err() == nil; attempt++ {
		probeCtx, cancel := context.WithTimeout(ctx, s.opts.ProbeTimeout)
		result, err := proxies.Probe(probeCtx, cluster)
		cancel()
		switch {
		case err != nil:
			p = Probe{Message: err.Error()}
			probes.WithLabelValues("error").Inc()
		case !result.Healthy:
			p = Probe{Latency: result.Latency, Message: result.Message}
			probes.WithLabelValues("unhealthy").Inc()
		default:
			probes.WithLabelValues("healthy").Inc()
			probeLatency.Observe(result.Latency.Seconds())
			return Probe{Healthy: true, Latency: result.Latency}
		}
	}
	return p
}

// failed handles a round in which the proxy-servers could not be asked: the last observation stands for
// StaleAfter, then every cluster is reported unreachable.
func (s *Source) failed(ctx context.Context, now time.Time, err error) {
	log := s.opts.Log
	s.mu.Lock()
	first := !s.observed
	if first {
		s.observed, s.firstRound = true, now
	}
	was := s.unreachable
	if first || now.Sub(s.lastGood) >= s.opts.StaleAfter {
		s.unreachable = true
	}
	is := s.unreachable
	logIt := err.Error() != s.lastErr
	s.lastErr = err.Error()
	s.mu.Unlock()
	proxyServerUp.Set(0)
	if logIt {
		log.Info("Cannot ask the proxy-servers which agents are connected", "error", err.Error())
	}
	if first || is != was {
		s.notify(ctx, AllClusters)
	}
}

// update records a round's observations and reports the clusters whose state changed significantly.
func (s *Source) update(ctx context.Context, now time.Time, agents map[string]held, results map[string]Probe) {
	s.mu.Lock()
	first := !s.observed
	if first {
		s.observed, s.firstRound = true, now
	}
	was := s.unreachable
	s.unreachable, s.lastGood, s.lastErr = false, now, ""
	var changed []string
	for cluster, h := range agents {
		p := results[cluster]
		next := State{Time: now, ConnectedAgents: h.fewest, Replicas: h.replicas, ReplicasWithAgents: h.holding, Probe: &p}
		if prev, ok := s.clusters[cluster]; !ok || significant(prev, next, s.opts.LatencyChanged) {
			s.clusters[cluster] = next
			changed = append(changed, cluster)
		}
	}
	for cluster, prev := range s.clusters {
		if _, ok := agents[cluster]; !ok && prev.ReplicasWithAgents > 0 {
			s.clusters[cluster] = State{Time: now}
			changed = append(changed, cluster)
		}
	}
	s.mu.Unlock()
	proxyServerUp.Set(1)
	if was {
		s.opts.Log.Info("The proxy-servers answer again")
	}
	if first || was {
		s.notify(ctx, AllClusters)
		return
	}
	for _, cluster := range changed {
		s.notify(ctx, cluster)
	}
}

func (s *Source) notify(ctx context.Context, cluster string) {
	select {
	case s.changes <- event.TypedGenericEvent[string]{Object: cluster}:
	case <-ctx.Done():
	}
}

var (
	probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_tunnel_probes_total",
		Help: "GET /healthz probes through managed clusters' tunnels, by result (healthy, unhealthy, error).",
	}, []string{"result"})
	probeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cluster_proxy_tunnel_probe_duration_seconds",
		Help:    "Latency of healthy GET /healthz probes through managed clusters' tunnels, the tunnel's set-up included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	proxyServerUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cluster_proxy_tunnel_health_proxy_server_up",
		Help: "1 when the last round could ask the proxy-servers which agents are connected, else 0.",
	})
)

func init() {
	metrics.Registry.MustRegister(probes, probeLatency, proxyServerUp)
}
