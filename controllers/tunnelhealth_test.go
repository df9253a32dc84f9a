package controllers_test

import (
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// fakeTunnels plays internal/hub/tunnelhealth: the specs say what the proxy-servers see of each cluster, and which
// clusters changed. Clusters it was not told about are not observed yet.
type fakeTunnels struct {
	mu      sync.Mutex
	states  map[string]tunnelhealth.State
	changes chan event.TypedGenericEvent[string]
}

func newFakeTunnels() *fakeTunnels {
	return &fakeTunnels{states: map[string]tunnelhealth.State{}, changes: make(chan event.TypedGenericEvent[string], 64)}
}

func (f *fakeTunnels) Tunnel(cluster string) (tunnelhealth.State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.states[cluster]
	return st, ok
}

func (f *fakeTunnels) Changes() <-chan event.TypedGenericEvent[string] { return f.changes }

// record changes what the source reports of cluster without telling the reconciler.
func (f *fakeTunnels) record(cluster string, st tunnelhealth.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[cluster] = st
}

// report changes what the source reports of cluster and names it as changed, as tunnelhealth does.
func (f *fakeTunnels) report(cluster string, st tunnelhealth.State) {
	f.record(cluster, st)
	f.changes <- event.TypedGenericEvent[string]{Object: cluster}
}

func healthyTunnel(agents int, latency time.Duration) tunnelhealth.State {
	return tunnelhealth.State{Time: time.Now(), ConnectedAgents: agents, Probe: &tunnelhealth.Probe{Healthy: true, Latency: latency}}
}

// expectTunnelConditions waits until the status shows the three tunnel conditions with these statuses and reasons,
// and the add-on's Available condition agrees.
func expectTunnelConditions(cluster string, connected, healthy, available metav1.ConditionStatus, connectedReason, healthyReason, addOnReason string) {
	EventuallyWithOffset(1, func(g Gomega) {
		c := statusCondition(g, cluster, proxyv1alpha1.ConditionAgentConnected)
		g.Expect(c.Status).To(Equal(connected), c.Message)
		g.Expect(c.Reason).To(Equal(connectedReason))
		h := statusCondition(g, cluster, proxyv1alpha1.ConditionTunnelHealthy)
		g.Expect(h.Status).To(Equal(healthy), h.Message)
		g.Expect(h.Reason).To(Equal(healthyReason))
		a := statusCondition(g, cluster, proxyv1alpha1.ConditionAvailable)
		g.Expect(a.Status).To(Equal(available), a.Message)
		mca := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
		g.Expect(mca.Status.HealthCheck.Mode).To(Equal(addonv1alpha1.HealthCheckModeCustomized))
		ma := addOnCondition(g, cluster, addonv1alpha1.ManagedClusterAddOnConditionAvailable)
		g.Expect(ma.Status).To(Equal(available), ma.Message)
		g.Expect(ma.Reason).To(Equal(addOnReason))
	}, timeout, interval).Should(Succeed())
}

// tunnelHealthSpecs run inside the "Cluster agents" container, whose default configuration they need.
func tunnelHealthSpecs() {
	It("reports tunnel health from the proxy-servers' view, and sets the add-on's Available in OCM's Customized mode", func() {
		cluster := "t-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		reportWorkApplied(cluster)

		By("before the source has looked, the tunnel is Unknown and so is the add-on's Available")
		expectTunnelConditions(cluster, metav1.ConditionUnknown, metav1.ConditionUnknown, metav1.ConditionUnknown,
			"NotObservedYet", "NotObservedYet", "NoProbeResult")

		By("two agents connected, /healthz answered in 3.2ms")
		tunnels.report(cluster, healthyTunnel(2, 3200*time.Microsecond))
		expectTunnelConditions(cluster, metav1.ConditionTrue, metav1.ConditionTrue, metav1.ConditionTrue,
			"AgentConnected", "ProbeSucceeded", "ProbeAvailable")
		cps := get(Default, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
		Expect(cps.Status.ConnectedAgents).To(Equal(int32(2)))
		Expect(cps.Status.Available).To(BeTrue())
		Expect(cps.Status.Probe).NotTo(BeNil())
		Expect(cps.Status.Probe.Health).To(Equal("True"))
		Expect(cps.Status.Probe.Latency).To(Equal("3.2ms"))
		Expect(cps.Status.Probe.LastProbeTime).NotTo(BeNil())

		By("the default configuration has counted the cluster (a few seconds after it connected), so that write is done")
		expectCountsSettled(proxyv1alpha1.DefaultConfigurationName)

		By("steady state: probes that confirm the tunnel, with jitter in their latency, write nothing")
		mca := get(Default, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
		before := requests.Writes()
		for _, l := range []time.Duration{4 * time.Millisecond, 2500 * time.Microsecond, 6 * time.Millisecond} {
			tunnels.report(cluster, healthyTunnel(2, l))
		}
		Consistently(func(g Gomega) {
			g.Expect(requests.Writes()).To(Equal(before), "API writes at steady state")
			g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").ResourceVersion).To(Equal(cps.ResourceVersion))
			g.Expect(get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy").ResourceVersion).To(Equal(mca.ResourceVersion))
		}, 2*time.Second, interval).Should(Succeed())

		By("a latency that is ten times higher is written, once, and the conditions stay as they were")
		before = requests.Writes()
		tunnels.report(cluster, healthyTunnel(2, 41*time.Millisecond))
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.Probe.Latency).To(Equal("41ms"))
		}, timeout, interval).Should(Succeed())
		Consistently(func() int64 { return requests.Writes() - before }, time.Second, interval).Should(Equal(int64(1)),
			"one API write: the ClusterProxyStatus status")
		Expect(get(Default, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy").ResourceVersion).To(Equal(mca.ResourceVersion),
			"the add-on's conditions did not change")

		By("the kube-apiserver stops answering through the tunnel")
		tunnels.report(cluster, tunnelhealth.State{Time: time.Now(), ConnectedAgents: 2, Probe: &tunnelhealth.Probe{Message: "context deadline exceeded"}})
		expectTunnelConditions(cluster, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse,
			"AgentConnected", "ProbeFailed", "ProbeUnavailable")
		Expect(statusCondition(Default, cluster, proxyv1alpha1.ConditionTunnelHealthy).Message).To(ContainSubstring("context deadline exceeded"))
		Expect(get(Default, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.Probe.Health).To(Equal("False"))

		By("the agents disconnect")
		tunnels.report(cluster, tunnelhealth.State{Time: time.Now()})
		expectTunnelConditions(cluster, metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionFalse,
			"NoAgentConnected", "NoAgentConnected", "ProbeUnavailable")
		cps = get(Default, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
		Expect(cps.Status.ConnectedAgents).To(BeZero())
		Expect(cps.Status.Available).To(BeFalse())
		Expect(addOnCondition(Default, cluster, "Available").Message).To(ContainSubstring("cluster-proxy-proxy-agent"), "the message says what to check")

		By("the proxy-servers cannot be asked")
		tunnels.report(cluster, tunnelhealth.State{Unreachable: true})
		expectTunnelConditions(cluster, metav1.ConditionUnknown, metav1.ConditionUnknown, metav1.ConditionUnknown,
			"ProxyServerUnreachable", "ProxyServerUnreachable", "NoProbeResult")
		Expect(get(Default, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.Probe.Health).To(Equal("Unknown"))

		By("the tunnel is back")
		tunnels.report(cluster, healthyTunnel(1, 2*time.Millisecond))
		expectTunnelConditions(cluster, metav1.ConditionTrue, metav1.ConditionTrue, metav1.ConditionTrue,
			"AgentConnected", "ProbeSucceeded", "ProbeAvailable")
	})

	It("looks at a cluster's tunnel again only when the source names it, not on a timer", func() {
		cluster := "t-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		reportWorkApplied(cluster)
		tunnels.report(cluster, healthyTunnel(1, 3*time.Millisecond))
		expectTunnelConditions(cluster, metav1.ConditionTrue, metav1.ConditionTrue, metav1.ConditionTrue,
			"AgentConnected", "ProbeSucceeded", "ProbeAvailable")
		// The passes that wrote those conditions may still be followed by one that reads the tunnel again (an add-on
		// status write, a cache that has not caught up yet); once the manager writes nothing more, none is due.
		expectQuiet()

		tunnels.record(cluster, tunnelhealth.State{Time: time.Now()})
		Consistently(func(g Gomega) {
			g.Expect(statusCondition(g, cluster, proxyv1alpha1.ConditionAgentConnected).Status).To(Equal(metav1.ConditionTrue))
		}, 2*time.Second, interval).Should(Succeed(), "without a change event the cluster is not reconciled")

		tunnels.changes <- event.TypedGenericEvent[string]{Object: tunnelhealth.AllClusters}
		expectTunnelConditions(cluster, metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionFalse,
			"NoAgentConnected", "NoAgentConnected", "ProbeUnavailable")
	})
}

var _ = Describe("Tunnel health reads", func() {
	It("come from informers the cache started with the manager: listing the proxy-servers' EndpointSlices sends no request", func() {
		By("waiting until the manager has started every informer and read nothing for a second")
		Eventually(testenv.Settled(requests.Reads), timeout, time.Second).Should(BeTrue())
		before := requests.Reads()
		Expect(mgrClient.List(ctx(), &discoveryv1.EndpointSliceList{})).To(Succeed())
		Expect(requests.Reads()).To(Equal(before), "a List from an informer started on first use is a request at any time, steady state too")
	})
})
