package clusteragent

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
)

// The tunnel health source (internal/hub/tunnelhealth) reads the proxy-client and proxy-server-ca Secrets of the default
// configuration through the manager's cache, which already lists and watches the operator's Secrets.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch
// It asks every proxy-server replica, found by the EndpointSlices of their Service (cached, only the operator's).
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=system,resources=endpointslices,verbs=get;list;watch

// TunnelSource reports what the proxy-servers see of each cluster's tunnel; internal/hub/tunnelhealth implements it in
// the manager. Observations are made outside the reconciler, which only reads the latest one: a reconcile never
// waits on the network.
type TunnelSource interface {
	// Tunnel is the reported state of cluster's tunnel; false until the source has observed anything.
	Tunnel(cluster string) (tunnelhealth.State, bool)
	// Changes names the clusters whose state changed (tunnelhealth.AllClusters: every cluster). The reconciler is
	// its only reader.
	Changes() <-chan event.TypedGenericEvent[string]
}

// tunnelObservation is what one pass knows of a cluster's tunnel.
type tunnelObservation struct {
	configured bool // a TunnelSource is configured
	observed   bool // it has reported
	tunnelhealth.State
}

func (r *Reconciler) observeTunnel(cluster string) tunnelObservation {
	if r.Tunnels == nil {
		return tunnelObservation{}
	}
	st, ok := r.Tunnels.Tunnel(cluster)
	return tunnelObservation{configured: true, observed: ok, State: st}
}

// Messages shared by the tunnel conditions.
const (
	msgSourceMissing = "tunnel health is off in the manager (--tunnel-health=false)"
	msgNotObserved   = "the manager has not asked the proxy-servers about this cluster's tunnel yet"
	msgUnreachable   = "the manager cannot ask the proxy-servers which agents are connected: its log says why; " +
		"check the proxy-server Deployment, its Service and the proxy-client Secret"
	msgNoAgent = "no agent of the cluster is connected to the proxy-servers: check the cluster-proxy-proxy-agent " +
		"Deployment on the managed cluster and its route to the hub (forward proxy, entrypoint)"
)

// unknownTunnel is the condition of ctype while the source cannot tell, or nil when obs tells.
func unknownTunnel(ctype string, obs tunnelObservation) *metav1.Condition {
	c := &metav1.Condition{Type: ctype, Status: metav1.ConditionUnknown}
	switch {
	case !obs.configured:
		c.Reason, c.Message = proxyv1alpha1.ReasonTunnelSourceMissing, msgSourceMissing
	case !obs.observed:
		c.Reason, c.Message = proxyv1alpha1.ReasonNotObservedYet, msgNotObserved
	case obs.Unreachable:
		c.Reason, c.Message = proxyv1alpha1.ReasonProxyServerUnreachable, msgUnreachable
	default:
		return nil
	}
	return c
}

// setAgentConnected reports whether an agent of the cluster holds a tunnel to the proxy-servers. Before the source's
// first round a reported condition stays as it is, so a restarted manager does not rewrite every status twice.
func setAgentConnected(st *proxyv1alpha1.ClusterProxyStatusStatus, obs tunnelObservation) {
	if keepUntilObserved(st, proxyv1alpha1.ConditionAgentConnected, obs) {
		return
	}
	if c := unknownTunnel(proxyv1alpha1.ConditionAgentConnected, obs); c != nil {
		st.ConnectedAgents = 0
		meta.SetStatusCondition(&st.Conditions, *c)
		return
	}
	st.ConnectedAgents = int32(obs.ConnectedAgents)
	c := metav1.Condition{Type: proxyv1alpha1.ConditionAgentConnected, Status: metav1.ConditionFalse,
		Reason: proxyv1alpha1.ReasonNoAgentConnected, Message: msgNoAgent}
	switch {
	case obs.ConnectedAgents > 0:
		c.Status, c.Reason = metav1.ConditionTrue, proxyv1alpha1.ReasonAgentConnected
		c.Message = fmt.Sprintf("%d agent(s) of the cluster connected to each of %d proxy-server(s)", obs.ConnectedAgents, max(obs.Replicas, 1))
	case obs.ReplicasWithAgents > 0:
		c.Reason = proxyv1alpha1.ReasonAgentNotOnEveryReplica
		c.Message = fmt.Sprintf("agents of the cluster are connected to %d of %d proxy-servers: requests that reach the others "+
			"fail until the agents connect to them too", obs.ReplicasWithAgents, obs.Replicas)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// setTunnelHealthy reports whether GET /healthz through the tunnel reached the managed kube-apiserver.
func setTunnelHealthy(st *proxyv1alpha1.ClusterProxyStatusStatus, obs tunnelObservation) {
	if keepUntilObserved(st, proxyv1alpha1.ConditionTunnelHealthy, obs) {
		return
	}
	if c := unknownTunnel(proxyv1alpha1.ConditionTunnelHealthy, obs); c != nil {
		meta.SetStatusCondition(&st.Conditions, *c)
		return
	}
	c := metav1.Condition{Type: proxyv1alpha1.ConditionTunnelHealthy, Status: metav1.ConditionFalse}
	switch p := obs.Probe; {
	case p == nil:
		c.Reason, c.Message = proxyv1alpha1.ReasonNoAgentConnected, "nothing to probe: "+msgNoAgent
	case p.Healthy:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, proxyv1alpha1.ReasonProbeSucceeded, "GET /healthz through the tunnel answered ok"
	default:
		c.Reason, c.Message = proxyv1alpha1.ReasonProbeFailed, "GET /healthz through the tunnel failed: "+p.Message
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// keepUntilObserved is true when the source has not reported yet and the status already holds a condition it
// wrote: the condition, and the probe, stay until the first round.
func keepUntilObserved(st *proxyv1alpha1.ClusterProxyStatusStatus, ctype string, obs tunnelObservation) bool {
	if !obs.configured || obs.observed {
		return false
	}
	c := meta.FindStatusCondition(st.Conditions, ctype)
	return c != nil && c.Reason != proxyv1alpha1.ReasonTunnelSourceMissing
}

// Probe health values, as the PROBED HEALTH column shows them.
const (
	probeTrue    = "True"
	probeFalse   = "False"
	probeUnknown = "Unknown"

	msgProbeNoAgent = "no agent connected" // the message of the probe status when there was nothing to probe
)

// setProbe reports the last probe. A probe that only confirms the reported one (not tunnelhealth.Significant: same
// result, latency within tunnelhealth.LatencyChanged, a failure again) leaves it untouched, time, latency and
// message included: writing every probe would make a steady state write every status every round. The source makes
// the same check, but the reported probe must also be compared here, after a restart.
func setProbe(st *proxyv1alpha1.ClusterProxyStatusStatus, obs tunnelObservation) {
	var want *proxyv1alpha1.ProbeStatus
	switch {
	case !obs.configured:
		st.Probe = nil
		return
	case !obs.observed:
		return
	case obs.Unreachable:
		want = &proxyv1alpha1.ProbeStatus{Health: probeUnknown, Message: "the proxy-servers cannot be asked"}
	case obs.Probe == nil:
		want = &proxyv1alpha1.ProbeStatus{LastProbeTime: probeTime(obs.Time), Health: probeFalse, Message: msgProbeNoAgent}
	case obs.Probe.Healthy:
		want = &proxyv1alpha1.ProbeStatus{LastProbeTime: probeTime(obs.Time), Health: probeTrue, Latency: formatLatency(obs.Probe.Latency)}
	default:
		want = &proxyv1alpha1.ProbeStatus{LastProbeTime: probeTime(obs.Time), Health: probeFalse, Message: obs.Probe.Message}
	}
	if !probeChanged(st.Probe, obs.State) {
		return
	}
	st.Probe = want
}

// probeChanged reports whether next is tunnelhealth.Significant next to the reported probe. The probe status does
// not show the number of agents, so that alone never counts.
func probeChanged(have *proxyv1alpha1.ProbeStatus, next tunnelhealth.State) bool {
	if have == nil {
		return true
	}
	prev := tunnelhealth.State{ConnectedAgents: next.ConnectedAgents, Replicas: next.Replicas, ReplicasWithAgents: next.ReplicasWithAgents}
	switch {
	case have.Health == probeUnknown:
		prev.Unreachable, prev.ConnectedAgents = true, 0
	case have.Health == probeTrue:
		latency, err := time.ParseDuration(have.Latency)
		if err != nil {
			return true
		}
		prev.Probe = &tunnelhealth.Probe{Healthy: true, Latency: latency}
	case have.Message == msgProbeNoAgent:
		prev.ConnectedAgents = 0
	default:
		prev.Probe = &tunnelhealth.Probe{Message: have.Message}
	}
	return tunnelhealth.Significant(prev, next)
}

func probeTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}

// formatLatency keeps three significant digits or so: 3.27ms, 41.2ms, 152ms.
func formatLatency(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < 100*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

// setAvailable is True when the agent is deployed, connected and its tunnel healthy; otherwise it takes the status
// and reason of the first of those that is not True.
func setAvailable(st *proxyv1alpha1.ClusterProxyStatusStatus) {
	c := metav1.Condition{Type: proxyv1alpha1.ConditionAvailable, Status: metav1.ConditionTrue,
		Reason: proxyv1alpha1.ReasonTunnelAvailable, Message: "the cluster is reachable through its tunnel"}
	for _, t := range []string{proxyv1alpha1.ConditionAgentDeployed, proxyv1alpha1.ConditionAgentConnected, proxyv1alpha1.ConditionTunnelHealthy} {
		if dep := meta.FindStatusCondition(st.Conditions, t); dep == nil || dep.Status != metav1.ConditionTrue {
			c.Status, c.Reason, c.Message = metav1.ConditionUnknown, proxyv1alpha1.ReasonNotObservedYet, t+" is not reported yet"
			if dep != nil {
				c.Status, c.Reason, c.Message = dep.Status, dep.Reason, t+": "+dep.Message
			}
			break
		}
	}
	st.Available = c.Status == metav1.ConditionTrue
	meta.SetStatusCondition(&st.Conditions, c)
}

// addOnAvailableCondition is the ManagedClusterAddOn's Available condition in OCM's Customized health-check mode:
// the ClusterProxyStatus's Available, with OCM's probe reasons.
func addOnAvailableCondition(st *proxyv1alpha1.ClusterProxyStatusStatus) metav1.Condition {
	c := metav1.Condition{Type: addonv1alpha1.ManagedClusterAddOnConditionAvailable, Status: metav1.ConditionUnknown,
		Reason: addonv1alpha1.AddonAvailableReasonNoProbeResult, Message: "the tunnel is not probed yet"}
	a := meta.FindStatusCondition(st.Conditions, proxyv1alpha1.ConditionAvailable)
	switch {
	case a == nil:
	case a.Status == metav1.ConditionTrue:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, addonv1alpha1.AddonAvailableReasonProbeAvailable,
			"the managed kube-apiserver answers through the tunnel"
	case a.Status == metav1.ConditionFalse:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, addonv1alpha1.AddonAvailableReasonProbeUnavailable, a.Message
	default:
		c.Message = a.Message
	}
	return c
}
