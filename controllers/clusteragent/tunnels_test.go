package clusteragent

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
)

var probeAt = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func observed(st tunnelhealth.State) tunnelObservation {
	return tunnelObservation{configured: true, observed: true, State: st}
}

func healthy(agents int, latency time.Duration) tunnelObservation {
	return observed(tunnelhealth.State{Time: probeAt, ConnectedAgents: agents, Probe: &tunnelhealth.Probe{Healthy: true, Latency: latency}})
}

// withCondition is a status that already holds one condition, as reported before.
func withCondition(ctype string, status metav1.ConditionStatus, reason string) *proxyv1alpha1.ClusterProxyStatusStatus {
	st := &proxyv1alpha1.ClusterProxyStatusStatus{}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ctype, Status: status, Reason: reason, Message: "as reported before"})
	return st
}

// expectCondition checks the condition of ctype in st.
func expectCondition(t *testing.T, st *proxyv1alpha1.ClusterProxyStatusStatus, ctype string, status metav1.ConditionStatus, reason, inMessage string) {
	t.Helper()
	g := NewWithT(t)
	c := meta.FindStatusCondition(st.Conditions, ctype)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(status))
	g.Expect(c.Reason).To(Equal(reason))
	g.Expect(c.Message).To(ContainSubstring(inMessage))
}

func TestSetAgentConnected(t *testing.T) {
	restarted := withCondition(proxyv1alpha1.ConditionAgentConnected, metav1.ConditionTrue, proxyv1alpha1.ReasonAgentConnected)
	restarted.ConnectedAgents = 2
	for _, tc := range []struct {
		name      string
		st        *proxyv1alpha1.ClusterProxyStatusStatus
		obs       tunnelObservation
		status    metav1.ConditionStatus
		reason    string
		connected int32
		inMessage string
	}{
		{"tunnel health off", &proxyv1alpha1.ClusterProxyStatusStatus{}, tunnelObservation{},
			metav1.ConditionUnknown, proxyv1alpha1.ReasonTunnelSourceMissing, 0, "--tunnel-health"},
		{"not observed yet, nothing reported", &proxyv1alpha1.ClusterProxyStatusStatus{}, tunnelObservation{configured: true},
			metav1.ConditionUnknown, proxyv1alpha1.ReasonNotObservedYet, 0, "not asked"},
		{"not observed yet after a restart: the reported condition and count stay", restarted, tunnelObservation{configured: true},
			metav1.ConditionTrue, proxyv1alpha1.ReasonAgentConnected, 2, "as reported before"},
		{"tunnel health turned on: the off condition does not stay",
			withCondition(proxyv1alpha1.ConditionAgentConnected, metav1.ConditionUnknown, proxyv1alpha1.ReasonTunnelSourceMissing), tunnelObservation{configured: true},
			metav1.ConditionUnknown, proxyv1alpha1.ReasonNotObservedYet, 0, "not asked"},
		{"proxy-servers unreachable", &proxyv1alpha1.ClusterProxyStatusStatus{ConnectedAgents: 2}, observed(tunnelhealth.State{Unreachable: true}),
			metav1.ConditionUnknown, proxyv1alpha1.ReasonProxyServerUnreachable, 0, "proxy-client Secret"},
		{"no agent", &proxyv1alpha1.ClusterProxyStatusStatus{ConnectedAgents: 1}, observed(tunnelhealth.State{Time: probeAt}),
			metav1.ConditionFalse, proxyv1alpha1.ReasonNoAgentConnected, 0, "cluster-proxy-proxy-agent"},
		{"two agents", &proxyv1alpha1.ClusterProxyStatusStatus{}, healthy(2, time.Millisecond),
			metav1.ConditionTrue, proxyv1alpha1.ReasonAgentConnected, 2, "2 agent(s)"},
		{"two agents on each of three replicas", &proxyv1alpha1.ClusterProxyStatusStatus{},
			observed(tunnelhealth.State{ConnectedAgents: 2, Replicas: 3, ReplicasWithAgents: 3, Probe: &tunnelhealth.Probe{Healthy: true}}),
			metav1.ConditionTrue, proxyv1alpha1.ReasonAgentConnected, 2, "each of 3 proxy-server(s)"},
		{"agents on two of three replicas", &proxyv1alpha1.ClusterProxyStatusStatus{},
			observed(tunnelhealth.State{ConnectedAgents: 0, Replicas: 3, ReplicasWithAgents: 2, Probe: &tunnelhealth.Probe{Healthy: true}}),
			metav1.ConditionFalse, proxyv1alpha1.ReasonAgentNotOnEveryReplica, 0, "2 of 3 proxy-servers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setAgentConnected(tc.st, tc.obs)
			expectCondition(t, tc.st, proxyv1alpha1.ConditionAgentConnected, tc.status, tc.reason, tc.inMessage)
			NewWithT(t).Expect(tc.st.ConnectedAgents).To(Equal(tc.connected))
		})
	}
}

func TestSetTunnelHealthy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		st        *proxyv1alpha1.ClusterProxyStatusStatus
		obs       tunnelObservation
		status    metav1.ConditionStatus
		reason    string
		inMessage string
	}{
		{"tunnel health off", &proxyv1alpha1.ClusterProxyStatusStatus{}, tunnelObservation{}, metav1.ConditionUnknown, proxyv1alpha1.ReasonTunnelSourceMissing, "--tunnel-health"},
		{"not observed yet", &proxyv1alpha1.ClusterProxyStatusStatus{}, tunnelObservation{configured: true}, metav1.ConditionUnknown, proxyv1alpha1.ReasonNotObservedYet, "not asked"},
		{"not observed yet after a restart: the reported condition stays",
			withCondition(proxyv1alpha1.ConditionTunnelHealthy, metav1.ConditionFalse, proxyv1alpha1.ReasonProbeFailed), tunnelObservation{configured: true},
			metav1.ConditionFalse, proxyv1alpha1.ReasonProbeFailed, "as reported before"},
		{"proxy-servers unreachable", &proxyv1alpha1.ClusterProxyStatusStatus{}, observed(tunnelhealth.State{Unreachable: true}),
			metav1.ConditionUnknown, proxyv1alpha1.ReasonProxyServerUnreachable, "proxy-client Secret"},
		{"no agent, nothing to probe", &proxyv1alpha1.ClusterProxyStatusStatus{}, observed(tunnelhealth.State{}),
			metav1.ConditionFalse, proxyv1alpha1.ReasonNoAgentConnected, "nothing to probe"},
		{"probe failed", &proxyv1alpha1.ClusterProxyStatusStatus{},
			observed(tunnelhealth.State{ConnectedAgents: 1, Probe: &tunnelhealth.Probe{Message: "GET /healthz answered 500"}}),
			metav1.ConditionFalse, proxyv1alpha1.ReasonProbeFailed, "answered 500"},
		{"probe answered ok", &proxyv1alpha1.ClusterProxyStatusStatus{}, healthy(1, time.Millisecond), metav1.ConditionTrue, proxyv1alpha1.ReasonProbeSucceeded, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setTunnelHealthy(tc.st, tc.obs)
			expectCondition(t, tc.st, proxyv1alpha1.ConditionTunnelHealthy, tc.status, tc.reason, tc.inMessage)
		})
	}
}

func TestSetProbe(t *testing.T) {
	earlier := &metav1.Time{Time: probeAt.Add(-time.Hour)}
	reported := &proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeTrue, Latency: "3.2ms"}
	for _, tc := range []struct {
		name string
		have *proxyv1alpha1.ProbeStatus
		obs  tunnelObservation
		want *proxyv1alpha1.ProbeStatus
	}{
		{"tunnel health off clears the probe", reported, tunnelObservation{}, nil},
		{"not observed yet keeps the reported probe", reported, tunnelObservation{configured: true}, reported},
		{"first healthy probe", nil, healthy(1, 3217*time.Microsecond),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeTrue, Latency: "3.22ms"}},
		{"a healthy probe with jitter keeps the reported one, time included", reported, healthy(1, 6*time.Millisecond), reported},
		{"a healthy probe ten times slower is reported", reported, healthy(1, 40*time.Millisecond),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeTrue, Latency: "40ms"}},
		{"a failed probe is reported", reported,
			observed(tunnelhealth.State{Time: probeAt, ConnectedAgents: 1, Probe: &tunnelhealth.Probe{Message: "timeout"}}),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeFalse, Message: "timeout"}},
		{"the same failure later keeps the reported one",
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "timeout"},
			observed(tunnelhealth.State{Time: probeAt, ConnectedAgents: 1, Probe: &tunnelhealth.Probe{Message: "timeout"}}),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "timeout"}},
		{"a failure with another message keeps the first one's, as the source does",
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "timeout"},
			observed(tunnelhealth.State{Time: probeAt, ConnectedAgents: 1, Probe: &tunnelhealth.Probe{Message: "connection refused"}}),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "timeout"}},
		{"a healthy probe after a failure is reported",
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "timeout"}, healthy(1, 3*time.Millisecond),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeTrue, Latency: "3ms"}},
		{"no agent connected again keeps the reported one",
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "no agent connected"}, observed(tunnelhealth.State{Time: probeAt}),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "no agent connected"}},
		{"an agent connects after none was", &proxyv1alpha1.ProbeStatus{LastProbeTime: earlier, Health: probeFalse, Message: "no agent connected"},
			observed(tunnelhealth.State{Time: probeAt, ConnectedAgents: 1, Probe: &tunnelhealth.Probe{Message: "timeout"}}),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeFalse, Message: "timeout"}},
		{"unreachable again keeps the reported one", &proxyv1alpha1.ProbeStatus{Health: probeUnknown, Message: "the proxy-servers cannot be asked"},
			observed(tunnelhealth.State{Unreachable: true}), &proxyv1alpha1.ProbeStatus{Health: probeUnknown, Message: "the proxy-servers cannot be asked"}},
		{"no agent connected", reported, observed(tunnelhealth.State{Time: probeAt}),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeFalse, Message: "no agent connected"}},
		{"proxy-servers unreachable", reported, observed(tunnelhealth.State{Unreachable: true}),
			&proxyv1alpha1.ProbeStatus{Health: probeUnknown, Message: "the proxy-servers cannot be asked"}},
		{"a stored latency that does not parse is replaced", &proxyv1alpha1.ProbeStatus{Health: probeTrue, Latency: "fast"}, healthy(1, 3*time.Millisecond),
			&proxyv1alpha1.ProbeStatus{LastProbeTime: &metav1.Time{Time: probeAt}, Health: probeTrue, Latency: "3ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &proxyv1alpha1.ClusterProxyStatusStatus{Probe: tc.have.DeepCopy()}
			setProbe(st, tc.obs)
			NewWithT(t).Expect(st.Probe).To(Equal(tc.want))
		})
	}
}

func TestSetAvailable(t *testing.T) {
	status := func(deployed, connected, healthy metav1.ConditionStatus) *proxyv1alpha1.ClusterProxyStatusStatus {
		st := &proxyv1alpha1.ClusterProxyStatusStatus{}
		for ctype, s := range map[string]metav1.ConditionStatus{
			proxyv1alpha1.ConditionAgentDeployed: deployed, proxyv1alpha1.ConditionAgentConnected: connected, proxyv1alpha1.ConditionTunnelHealthy: healthy,
		} {
			if s != "" {
				meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ctype, Status: s, Reason: ctype + "Reason", Message: "what " + ctype + " says"})
			}
		}
		return st
	}
	for _, tc := range []struct {
		name      string
		st        *proxyv1alpha1.ClusterProxyStatusStatus
		status    metav1.ConditionStatus
		reason    string
		inMessage string
	}{
		{"all true", status("True", "True", "True"), metav1.ConditionTrue, proxyv1alpha1.ReasonTunnelAvailable, "reachable"},
		{"not deployed comes first", status("False", "Unknown", "False"), metav1.ConditionFalse, "AgentDeployedReason", "AgentDeployed: what AgentDeployed says"},
		{"not connected", status("True", "False", "False"), metav1.ConditionFalse, "AgentConnectedReason", "AgentConnected: "},
		{"connection unknown", status("True", "Unknown", "Unknown"), metav1.ConditionUnknown, "AgentConnectedReason", "AgentConnected: "},
		{"unhealthy", status("True", "True", "False"), metav1.ConditionFalse, "TunnelHealthyReason", "TunnelHealthy: "},
		{"a condition missing", status("True", "True", ""), metav1.ConditionUnknown, proxyv1alpha1.ReasonNotObservedYet, "TunnelHealthy is not reported yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			setAvailable(tc.st)
			c := meta.FindStatusCondition(tc.st.Conditions, proxyv1alpha1.ConditionAvailable)
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(ContainSubstring(tc.inMessage))
			g.Expect(tc.st.Available).To(Equal(tc.status == metav1.ConditionTrue))
		})
	}
}

func TestAddOnAvailableCondition(t *testing.T) {
	for _, tc := range []struct {
		name      string
		available *metav1.Condition
		status    metav1.ConditionStatus
		reason    string
		message   string
	}{
		{"no status yet", nil, metav1.ConditionUnknown, "NoProbeResult", "the tunnel is not probed yet"},
		{"available", &metav1.Condition{Status: "True", Reason: proxyv1alpha1.ReasonTunnelAvailable, Message: "reachable"},
			metav1.ConditionTrue, "ProbeAvailable", "the managed kube-apiserver answers through the tunnel"},
		{"unavailable", &metav1.Condition{Status: "False", Reason: proxyv1alpha1.ReasonNoAgentConnected, Message: "AgentConnected: no agent"},
			metav1.ConditionFalse, "ProbeUnavailable", "AgentConnected: no agent"},
		{"unknown", &metav1.Condition{Status: "Unknown", Reason: proxyv1alpha1.ReasonProxyServerUnreachable, Message: "AgentConnected: cannot ask"},
			metav1.ConditionUnknown, "NoProbeResult", "AgentConnected: cannot ask"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := &proxyv1alpha1.ClusterProxyStatusStatus{}
			if tc.available != nil {
				a := *tc.available
				a.Type = proxyv1alpha1.ConditionAvailable
				meta.SetStatusCondition(&st.Conditions, a)
			}
			c := addOnAvailableCondition(st)
			g.Expect(c.Type).To(Equal("Available"))
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.message))
		})
	}
}

func TestFormatLatency(t *testing.T) {
	g := NewWithT(t)
	g.Expect(formatLatency(3217 * time.Microsecond)).To(Equal("3.22ms"))
	g.Expect(formatLatency(41234 * time.Microsecond)).To(Equal("41.2ms"))
	g.Expect(formatLatency(152400 * time.Microsecond)).To(Equal("152ms"))
	g.Expect(formatLatency(1500 * time.Millisecond)).To(Equal("1.5s"))
}
