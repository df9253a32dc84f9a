package tunnelhealth

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/dataplane/tunnelclient"
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
