package tunnelhealth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

func TestStateOfCombinesWhatEveryReplicaReports(t *testing.T) {
	g := NewWithT(t)
	ms := time.Millisecond
	healthy := func(l time.Duration) *tunnelclient.TunnelProbe {
		return &tunnelclient.TunnelProbe{Healthy: true, LatencyMicros: l.Microseconds()}
	}
	s := New(Options{})
	s.replicas = map[string]*replicaReports{
		"proxy-a": {clusters: map[string]tunnelclient.ClusterTunnel{
			"both":        {Agents: []string{"b1", "b2"}, Probe: healthy(3 * ms)},
			"one-replica": {Agents: []string{"o1"}, Probe: healthy(2 * ms)},
			"fails-on-b":  {Agents: []string{"f1"}, Probe: healthy(2 * ms)},
			"unprobed":    {Agents: []string{"u1"}},
		}},
		"proxy-b": {clusters: map[string]tunnelclient.ClusterTunnel{
			"both":       {Agents: []string{"b1"}, Probe: healthy(9 * ms)},
			"fails-on-b": {Agents: []string{"f1"}, Probe: &tunnelclient.TunnelProbe{Message: "GET /healthz answered 500"}},
		}},
	}
	replicas := []string{"proxy-a", "proxy-b"}
	now := time.Now()

	g.Expect(s.stateOf("both", replicas, now)).To(Equal(State{Time: now, ConnectedAgents: 1, Replicas: 2, ReplicasWithAgents: 2,
		Probe: &Probe{Healthy: true, Latency: 9 * ms}}), "the replica holding the fewest agents, and the slowest latency")
	g.Expect(s.stateOf("one-replica", replicas, now)).To(Equal(State{Time: now, ConnectedAgents: 0, Replicas: 2, ReplicasWithAgents: 1,
		Probe: &Probe{Healthy: true, Latency: 2 * ms}}))
	g.Expect(s.stateOf("fails-on-b", replicas, now)).To(Equal(State{Time: now, ConnectedAgents: 1, Replicas: 2, ReplicasWithAgents: 2,
		Probe: &Probe{Message: "through proxy-server proxy-b: GET /healthz answered 500"}}), "one replica's failure fails the tunnel")
	g.Expect(s.stateOf("unprobed", replicas, now).Probe).To(Equal(&Probe{Message: msgNotProbed}))
	g.Expect(s.stateOf("nowhere", replicas, now)).To(Equal(State{Time: now}))
	g.Expect(s.stateOf("fails-on-b", []string{"proxy-b"}, now).Probe.Message).To(Equal("GET /healthz answered 500"),
		"one replica needs no name")
}

func TestSignificantCountsReplicasThatGainOrLoseAnAgent(t *testing.T) {
	g := NewWithT(t)
	prev := State{ConnectedAgents: 0, Replicas: 3, ReplicasWithAgents: 2, Probe: &Probe{Healthy: true}}
	next := prev
	next.ReplicasWithAgents = 3
	g.Expect(Significant(prev, next)).To(BeTrue())
	next = prev
	next.Replicas = 2
	g.Expect(Significant(prev, next)).To(BeTrue())
	g.Expect(Significant(prev, prev)).To(BeFalse())
}

func TestApplyTouchesOnlyWhatAnAnswerNamesUnlessTheReplicasChange(t *testing.T) {
	g := NewWithT(t)
	agent := func(id string) tunnelclient.ClusterTunnel {
		return tunnelclient.ClusterTunnel{Agents: []string{id}, Probe: &tunnelclient.TunnelProbe{Healthy: true, LatencyMicros: 1000}}
	}
	s := New(Options{})
	s.replicas = map[string]*replicaReports{
		"proxy-a": {cursor: tunnelclient.TunnelsCursor{Instance: "a-1", Generation: 5},
			clusters: map[string]tunnelclient.ClusterTunnel{"c1": agent("c1-agent"), "c2": agent("c2-agent")}},
	}

	// What changed since generation 5: c2 lost its agent.
	touched, all := s.apply(map[string]tunnelclient.TunnelsView{
		"proxy-a": {Instance: "a-1", Generation: 6, Clusters: map[string]tunnelclient.ClusterTunnel{"c2": {}}},
	})
	g.Expect(all).To(BeFalse())
	g.Expect(touched).To(Equal(map[string]bool{"c2": true}))
	g.Expect(s.replicas["proxy-a"].clusters).To(HaveKey("c1"))
	g.Expect(s.replicas["proxy-a"].clusters).NotTo(HaveKey("c2"))
	g.Expect(s.replicas["proxy-a"].cursor).To(Equal(tunnelclient.TunnelsCursor{Instance: "a-1", Generation: 6}),
		"the next round asks from here")

	// Nothing changed: nothing is touched.
	touched, all = s.apply(map[string]tunnelclient.TunnelsView{"proxy-a": {Instance: "a-1", Generation: 6}})
	g.Expect(all).To(BeFalse())
	g.Expect(touched).To(BeEmpty())

	// The replica restarted: its full answer replaces what it held, and every cluster's counts may have changed.
	touched, all = s.apply(map[string]tunnelclient.TunnelsView{
		"proxy-a": {Instance: "a-2", Generation: 1, Full: true, Clusters: map[string]tunnelclient.ClusterTunnel{"c3": agent("c3-agent")}},
	})
	g.Expect(all).To(BeTrue())
	g.Expect(touched).To(Equal(map[string]bool{"c1": true, "c3": true}))
	g.Expect(s.replicas["proxy-a"].clusters).To(HaveLen(1))

	// A second replica answers, then the first stops answering.
	_, all = s.apply(map[string]tunnelclient.TunnelsView{
		"proxy-a": {Instance: "a-2", Generation: 1},
		"proxy-b": {Instance: "b-1", Generation: 1, Full: true},
	})
	g.Expect(all).To(BeTrue(), "a new replica")
	_, all = s.apply(map[string]tunnelclient.TunnelsView{"proxy-b": {Instance: "b-1", Generation: 1}})
	g.Expect(all).To(BeTrue(), "a replica gone")
	g.Expect(s.replicas).NotTo(HaveKey("proxy-a"))
}

func TestCollectReportsWhetherTheProxyServersAnswerAndTheReplicasHoldingEachClustersAgents(t *testing.T) {
	g := NewWithT(t)
	agent := func(id string) tunnelclient.ClusterTunnel {
		return tunnelclient.ClusterTunnel{Agents: []string{id}, Probe: &tunnelclient.TunnelProbe{Healthy: true, LatencyMicros: 1000}}
	}
	s := New(Options{})
	g.Expect(testutil.CollectAndCount(s)).To(BeZero(), "nothing before a round ended (a manager that does not lead)")

	s.replicas = map[string]*replicaReports{
		"proxy-a": {clusters: map[string]tunnelclient.ClusterTunnel{"c1": agent("c1-a"), "c2": agent("c2-a")}},
		"proxy-b": {clusters: map[string]tunnelclient.ClusterTunnel{"c1": agent("c1-a")}},
	}
	s.update(context.Background(), time.Now(), map[string]bool{"c1": true, "c2": true}, true)
	g.Expect(testutil.CollectAndCompare(s, strings.NewReader(`
# HELP cluster_proxy_tunnel_health_proxy_server_up 1 when the last tunnel health round could ask the proxy-servers for their tunnel reports, else 0.
# TYPE cluster_proxy_tunnel_health_proxy_server_up gauge
cluster_proxy_tunnel_health_proxy_server_up 1
# HELP cluster_proxy_cluster_proxy_servers_with_agents Proxy-server replicas holding at least one agent of a managed cluster, as the last round found; a request reaches the cluster only through one of them.
# TYPE cluster_proxy_cluster_proxy_servers_with_agents gauge
cluster_proxy_cluster_proxy_servers_with_agents{cluster="c1"} 2
cluster_proxy_cluster_proxy_servers_with_agents{cluster="c2"} 1
# HELP cluster_proxy_tunnel_health_proxy_servers Proxy-server replicas that answered the last tunnel health round.
# TYPE cluster_proxy_tunnel_health_proxy_servers gauge
cluster_proxy_tunnel_health_proxy_servers 2
`))).To(Succeed(), "c2 lacks an agent on proxy-b: the alert on a replica missing agents compares the two")

	s.failed(context.Background(), time.Now().Add(time.Hour), errors.New("no proxy-server answers"))
	g.Expect(testutil.CollectAndCompare(s, strings.NewReader(`
# HELP cluster_proxy_tunnel_health_proxy_server_up 1 when the last tunnel health round could ask the proxy-servers for their tunnel reports, else 0.
# TYPE cluster_proxy_tunnel_health_proxy_server_up gauge
cluster_proxy_tunnel_health_proxy_server_up 0
`))).To(Succeed(), "no view of the clusters while the proxy-servers cannot be asked")
}
