package tunnelhealth

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestByClusterCountsWhatEveryReplicaHolds(t *testing.T) {
	g := NewWithT(t)
	replicas := map[string]map[string][]string{
		"proxy-a": {"both": {"b1", "b2"}, "one-replica": {"o1"}},
		"proxy-b": {"both": {"b1"}},
		"proxy-c": {"both": {"b1", "b2"}},
	}
	g.Expect(byCluster(replicas)).To(Equal(map[string]held{
		"both":        {fewest: 1, replicas: 3, holding: 3},
		"one-replica": {fewest: 0, replicas: 3, holding: 1},
	}), "a cluster on any replica is listed, with the count of the replica holding the fewest")
	g.Expect(byCluster(map[string]map[string][]string{"svc": {}})).To(BeEmpty())
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
