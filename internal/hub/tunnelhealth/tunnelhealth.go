// Package tunnelhealth watches every managed cluster's tunnel from the hub, for the manager. Every interval it asks
// each proxy-server replica for its tunnel reports (GET /tunnels): the replica probes GET /healthz through its own
// tunnel of every cluster it holds, over connections it keeps open, and answers only the clusters whose report
// changed since the generation the source last got from it. A round therefore costs one request per replica here,
// and work that grows with what changed; no tunnel or TLS handshake per cluster. The source keeps one observation per
// cluster, combined over the replicas, replaces it only when it changes in a way the status shows (see Significant),
// and tells the reconciler which clusters changed, so a steady state costs no API writes and no reconciles.
//
// It reads the proxy-client and CA Secrets through the manager's cache on every round, so renewed certificates
// are followed. The ManagedProxyConfiguration (where the proxy-servers listen) is read when a round starts without a
// client: the first round and the one after a round that could not ask the proxy-servers, so changed ports or
// namespace are followed once the old address stops answering.
package tunnelhealth

import (
	"context"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// Defaults of the Options left zero.
const (
	DefaultInterval     = 30 * time.Second
	DefaultProbeTimeout = 5 * time.Second
)

// AllClusters, as the object of a change event, means that every cluster's state changed (the first round ended,
// or the proxy-servers stopped or started answering).
const AllClusters = ""

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
	// ProbeTimeout bounds one probe of a replica; a round's asks end within max(Interval, 3*ProbeTimeout).
	ProbeTimeout time.Duration
	// StaleAfter is how long the last observation stands while the proxy-servers cannot be asked, so one failed
	// round does not flip every cluster; default three intervals.
	StaleAfter time.Duration
	// LatencyChanged decides whether a healthy probe's latency moved enough to be reported; default
	// tunnelclient.LatencyChanged, the rule the replicas report by.
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
	// Probe is the GET /healthz through the tunnel, combined over the replicas holding an agent (see Round); nil
	// when no agent is connected (nothing to probe).
	Probe *Probe
}

// Probe is one GET /healthz through a cluster's tunnel.
type Probe struct {
	Healthy bool
	// Latency is the request's round trip through the tunnel on an open connection (the slowest replica's); zero
	// when no answer came.
	Latency time.Duration
	// Message says why the probe failed.
	Message string
}

// Significant reports whether next differs from prev in a way the status shows: the proxy-servers' reachability,
// the number of connected agents, whether and how the tunnel answered, or, while healthy, a latency that more than
// doubled or fell below half (tunnelclient.LatencyChanged). Successive failures keep the first one's message.
func Significant(prev, next State) bool { return significant(prev, next, tunnelclient.LatencyChanged) }

func significant(prev, next State, latencyChanged func(reported, measured time.Duration) bool) bool {
	switch {
	case prev.Unreachable != next.Unreachable, prev.ConnectedAgents != next.ConnectedAgents, (prev.Probe == nil) != (next.Probe == nil),
		prev.Replicas != next.Replicas, prev.ReplicasWithAgents != next.ReplicasWithAgents:
		return true
	case prev.Probe == nil:
		return false
	default:
		return tunnelclient.ProbeChanged(prev.Probe.wire(), next.Probe.wire(), latencyChanged)
	}
}

// wire is the probe as the replicas report it, for the rule they report by.
func (p *Probe) wire() tunnelclient.TunnelProbe {
	return tunnelclient.TunnelProbe{Healthy: p.Healthy, LatencyMicros: p.Latency.Microseconds(), Message: p.Message}
}

// Source observes the tunnels; it is a manager Runnable that runs on the leader only.
type Source struct {
	opts    Options
	changes chan event.TypedGenericEvent[string]
	// recordChanges is told when the replicas' record sinks changed; one pending notice is enough.
	recordChanges chan event.TypedGenericEvent[string]

	mu          sync.RWMutex
	observed    bool      // a round has ended
	firstRound  time.Time // when it did
	unreachable bool
	lastGood    time.Time
	lastErr     string
	clusters    map[string]State                     // clusters that had an agent connected since the start, as reported
	answered    int                                  // replicas that answered the last good round
	lastFailed  bool                                 // the last round could not ask the proxy-servers
	records     map[string][]tunnelclient.RecordSink // by replica, as the last good round found them

	// Only rounds, which do not overlap, touch these.
	// proxies is kept from round to round, so its parsed credentials are reused; a round that cannot ask the
	// proxy-servers drops it, and the next reads the configuration again.
	proxies *clusterproxy.Client
	// replicas is the last answer of each replica that answered the last round, with its changes applied.
	replicas map[string]*replicaReports
}

// replicaReports is one replica's reports as the source has them.
type replicaReports struct {
	cursor   tunnelclient.TunnelsCursor
	clusters map[string]tunnelclient.ClusterTunnel // clusters it holds an agent of
}

// New builds a source; Start runs it.
func New(opts Options) *Source {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 3 * opts.Interval
	}
	if opts.LatencyChanged == nil {
		opts.LatencyChanged = tunnelclient.LatencyChanged
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Source{opts: opts, changes: make(chan event.TypedGenericEvent[string], 1024), clusters: map[string]State{},
		recordChanges: make(chan event.TypedGenericEvent[string], 1), replicas: map[string]*replicaReports{}}
}

// RecordChanges is told, with the configuration's name, when the record sinks Records reports changed. It has one
// reader.
func (s *Source) RecordChanges() <-chan event.TypedGenericEvent[string] { return s.recordChanges }

// Records are the record sinks each replica reported in the last good round, by replica; false until a round has
// asked the proxy-servers.
func (s *Source) Records() (map[string][]tunnelclient.RecordSink, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.records, s.records != nil
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

// Round asks every proxy-server replica for what changed in its tunnel reports, then reports the clusters whose
// combined state changed. A cluster's state counts the agents of the replica holding the fewest, and its probe is the
// first failure a replica holding an agent reports (replicas by name), else healthy with the slowest latency: a
// request may go through any replica.
func (s *Source) Round(ctx context.Context) {
	now := s.opts.Clock.Now()
	answers, err := s.ask(ctx)
	if err != nil {
		s.failed(ctx, now, err)
		return
	}
	if ctx.Err() != nil {
		return // shutting down: the answers are cut short, not real
	}
	touched, all := s.apply(answers)
	s.update(ctx, now, touched, all)
	s.updateRecords(answers)
}

// updateRecords keeps the record sinks of the answers and tells RecordChanges when they differ from the last.
func (s *Source) updateRecords(answers map[string]tunnelclient.TunnelsView) {
	records := make(map[string][]tunnelclient.RecordSink, len(answers))
	for replica, v := range answers {
		records[replica] = v.Records
	}
	s.mu.Lock()
	changed := !reflect.DeepEqual(records, s.records)
	s.records = records
	s.mu.Unlock()
	if !changed {
		return
	}
	name := s.opts.Configuration
	if name == "" {
		name = proxyv1alpha1.DefaultConfigurationName
	}
	select {
	case s.recordChanges <- event.TypedGenericEvent[string]{Object: name}:
	default: // one is pending: its reader reads Records, which is current
	}
}

// ask sends GET /tunnels to every replica with the cursor of its last answer.
func (s *Source) ask(ctx context.Context) (map[string]tunnelclient.TunnelsView, error) {
	// A replica answers once its probes have: one slow cluster's two attempts, or a few batches of them.
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.Interval, 3*s.opts.ProbeTimeout))
	defer cancel()
	if s.proxies == nil {
		proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: s.opts.Reader, Configuration: s.opts.Configuration, Resolve: s.opts.Resolve})
		if err != nil {
			return nil, err
		}
		s.proxies = proxies
	}
	answers := map[string]tunnelclient.TunnelsView{}
	var mu sync.Mutex
	err := s.proxies.ForEachReplica(ctx, func(ctx context.Context, replica string, client *http.Client, baseURL string) error {
		var cursor tunnelclient.TunnelsCursor
		if r := s.replicas[replica]; r != nil {
			cursor = r.cursor
		}
		v, err := tunnelclient.Tunnels(ctx, client, baseURL, cursor, s.opts.ProbeTimeout)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		answers[replica] = v
		return nil
	})
	if err != nil {
		s.proxies = nil
		return nil, err
	}
	return answers, nil
}

// apply folds the answers into the replicas' reports. It returns the clusters whose report changed on some replica,
// and all when the replicas themselves changed (one answered for the first time, stopped answering, or restarted):
// every cluster's counts may then have changed.
func (s *Source) apply(answers map[string]tunnelclient.TunnelsView) (touched map[string]bool, all bool) {
	touched = map[string]bool{}
	for name := range s.replicas {
		if _, ok := answers[name]; !ok {
			delete(s.replicas, name)
			all = true
		}
	}
	for name, v := range answers {
		r := s.replicas[name]
		if r == nil || r.cursor.Instance != v.Instance {
			all = true
		}
		if r == nil {
			r = &replicaReports{}
			s.replicas[name] = r
		}
		if v.Full {
			for cluster := range r.clusters {
				touched[cluster] = true
			}
			r.clusters = map[string]tunnelclient.ClusterTunnel{}
		}
		for cluster, t := range v.Clusters {
			touched[cluster] = true
			if len(t.Agents) == 0 {
				delete(r.clusters, cluster)
			} else {
				r.clusters[cluster] = t
			}
		}
		r.cursor = tunnelclient.TunnelsCursor{Instance: v.Instance, Generation: v.Generation}
	}
	return touched, all
}

// stateOf combines what the replicas, in order, report of cluster.
func (s *Source) stateOf(cluster string, replicas []string, now time.Time) State {
	st := State{Time: now, Replicas: len(replicas)}
	var unhealthy *Probe
	healthy, probed := time.Duration(0), 0
	for i, name := range replicas {
		t := s.replicas[name].clusters[cluster]
		if i == 0 || len(t.Agents) < st.ConnectedAgents {
			st.ConnectedAgents = len(t.Agents)
		}
		if len(t.Agents) == 0 {
			continue
		}
		st.ReplicasWithAgents++
		switch p := t.Probe; {
		case p == nil:
		case !p.Healthy && unhealthy == nil:
			unhealthy = &Probe{Latency: p.Latency(), Message: p.Message}
			if len(replicas) > 1 {
				unhealthy.Message = "through proxy-server " + name + ": " + p.Message
			}
		case p.Healthy:
			healthy, probed = max(healthy, p.Latency()), probed+1
		}
	}
	switch {
	case st.ReplicasWithAgents == 0:
		return State{Time: now}
	case unhealthy != nil:
		st.Probe = unhealthy
	case probed > 0:
		st.Probe = &Probe{Healthy: true, Latency: healthy}
	default:
		st.Probe = &Probe{Message: msgNotProbed}
	}
	return st
}

// msgNotProbed is the probe message of a cluster whose replicas have not probed it yet.
const msgNotProbed = "the proxy-servers have not probed the tunnel yet"

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
	s.lastFailed = true
	logIt := err.Error() != s.lastErr
	s.lastErr = err.Error()
	s.mu.Unlock()
	if logIt {
		log.Info("Cannot ask the proxy-servers which agents are connected", "error", err.Error())
	}
	if first || is != was {
		s.notify(ctx, AllClusters)
	}
}

// update records the state of the touched clusters, or of every cluster, and reports those that changed
// significantly.
func (s *Source) update(ctx context.Context, now time.Time, touched map[string]bool, all bool) {
	replicas := slices.Sorted(maps.Keys(s.replicas))
	s.mu.Lock()
	first := !s.observed
	if first {
		s.observed, s.firstRound = true, now
	}
	was := s.unreachable
	s.unreachable, s.lastGood, s.lastErr, s.answered, s.lastFailed = false, now, "", len(replicas), false
	if all || first || was {
		for cluster := range s.clusters {
			touched[cluster] = true
		}
		for _, r := range s.replicas {
			for cluster := range r.clusters {
				touched[cluster] = true
			}
		}
	}
	var changed []string
	for cluster := range touched {
		next := s.stateOf(cluster, replicas, now)
		prev, ok := s.clusters[cluster]
		switch {
		case next.ReplicasWithAgents == 0 && (!ok || prev.ReplicasWithAgents == 0):
			// never connected, or still gone: nothing to report
		case !ok || significant(prev, next, s.opts.LatencyChanged):
			s.clusters[cluster] = next
			changed = append(changed, cluster)
		}
	}
	s.mu.Unlock()
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
	proxyServerUpDesc = prometheus.NewDesc("cluster_proxy_tunnel_health_proxy_server_up",
		"1 when the last tunnel health round could ask the proxy-servers for their tunnel reports, else 0.", nil, nil)
	proxyServersDesc = prometheus.NewDesc("cluster_proxy_tunnel_health_proxy_servers",
		"Proxy-server replicas that answered the last tunnel health round.", nil, nil)
	replicasWithAgentsDesc = prometheus.NewDesc("cluster_proxy_cluster_proxy_servers_with_agents",
		"Proxy-server replicas holding at least one agent of a managed cluster, as the last round found; a request "+
			"reaches the cluster only through one of them.", []string{"cluster"}, nil)
)

// Describe sends the descriptors of Collect.
func (s *Source) Describe(ch chan<- *prometheus.Desc) {
	ch <- proxyServerUpDesc
	ch <- proxyServersDesc
	ch <- replicasWithAgentsDesc
}

// Collect reports whether the last round could ask the proxy-servers and, while they answer, the last round's view
// of every cluster that had an agent connected since the manager started leading. It reports nothing before a round
// ended, so a manager that does not lead (no rounds), or runs without tunnel health, adds no series.
func (s *Source) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.observed {
		return
	}
	up := 1.0
	if s.lastFailed {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(proxyServerUpDesc, prometheus.GaugeValue, up)
	if s.unreachable {
		return
	}
	ch <- prometheus.MustNewConstMetric(proxyServersDesc, prometheus.GaugeValue, float64(s.answered))
	for cluster, st := range s.clusters {
		ch <- prometheus.MustNewConstMetric(replicasWithAgentsDesc, prometheus.GaugeValue, float64(st.ReplicasWithAgents), cluster)
	}
}
