package controllers_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// mpcConfig is the add-on's spec.configs entry that renders its agent from the configuration name.
func mpcConfig(name string) addonv1alpha1.AddOnConfig {
	return addonv1alpha1.AddOnConfig{
		ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: proxyv1alpha1.GroupVersion.Group, Resource: "managedproxyconfigurations"},
		ConfigReferent:      addonv1alpha1.ConfigReferent{Name: name},
	}
}

// expectClusterCounts waits until the configuration reports these counts.
func expectClusterCounts(mpc *proxyv1alpha1.ManagedProxyConfiguration, installed, connected int32) {
	EventuallyWithOffset(1, func(g Gomega) {
		st := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status
		g.Expect(st.ClustersInstalled).To(Equal(installed), "clustersInstalled of %s", mpc.Name)
		g.Expect(st.ClustersConnected).To(Equal(connected), "clustersConnected of %s", mpc.Name)
	}, timeout, interval).Should(Succeed())
}

// expectCountsSettled waits until the counts of configuration mpcName agree with the hub's add-ons and cluster
// statuses, so a recount still to come (a few seconds after a change) has nothing to write.
func expectCountsSettled(mpcName string) {
	EventuallyWithOffset(1, func(g Gomega) {
		addOns := &addonv1alpha1.ManagedClusterAddOnList{}
		g.Expect(k8s.List(ctx(), addOns)).To(Succeed())
		uses := map[string]bool{}
		for _, a := range addOns.Items {
			name := proxyv1alpha1.DefaultConfigurationName
			for _, c := range a.Spec.Configs {
				if c.Group == proxyv1alpha1.GroupVersion.Group && c.Resource == "managedproxyconfigurations" {
					if c.Name != "" {
						name = c.Name
					}
					break
				}
			}
			uses[a.Namespace] = a.Name == proxyv1alpha1.AddonName && name == mpcName
		}
		statuses := &proxyv1alpha1.ClusterProxyStatusList{}
		g.Expect(k8s.List(ctx(), statuses)).To(Succeed())
		var installed, connected int32
		for _, s := range statuses.Items {
			if !uses[s.Namespace] {
				continue
			}
			if s.Status.Installed {
				installed++
			}
			if meta.IsStatusConditionTrue(s.Status.Conditions, proxyv1alpha1.ConditionAgentConnected) {
				connected++
			}
		}
		st := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpcName).Status
		g.Expect([]int32{st.ClustersInstalled, st.ClustersConnected}).To(Equal([]int32{installed, connected}),
			"installed and connected clusters of %s", mpcName)
	}, timeout, interval).Should(Succeed())
}

var _ = Describe("Cluster counts", func() {
	It("counts the clusters whose agents a configuration renders, installed and connected, a while after they change", func() {
		// Two configurations of this spec's own, so the clusters of other specs (on the default one) do not count.
		edge, core := newMPC(), newMPC()
		createMPC(edge)
		createMPC(core)
		expectReady(edge)
		expectReady(core)

		c1, c2 := "cnt-"+mpcSuffix(), "cnt-"+mpcSuffix()
		for _, c := range []string{c1, c2} {
			newCluster(c)
			DeferCleanupDelete(&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: c}})
			installAddOn(c, mpcConfig(edge.Name))
		}

		By("the add-on is installed on two clusters: their agents are rendered from edge, neither applied nor connected")
		Eventually(func(g Gomega) {
			for _, c := range []string{c1, c2} {
				_, m := agentManifests(g, c)
				g.Expect(m).To(HaveKey("Deployment/cluster-proxy-proxy-agent"))
				g.Expect(agentDeployment(g, c).Spec.Template.Spec.Containers[0].Args).To(
					ContainElement("--proxy-server-host="+edge.Spec.ProxyServer.Entrypoint.Hostname.Value), "rendered from edge")
				g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, c, "cluster-proxy").Status.Conditions).NotTo(BeEmpty())
			}
		}, timeout, interval).Should(Succeed())
		expectClusterCounts(edge, 0, 0)
		By("zero counts are written, so the printer columns show 0")
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(proxyv1alpha1.GroupVersion.WithKind("ManagedProxyConfiguration"))
		Expect(k8s.Get(ctx(), client.ObjectKey{Name: edge.Name}, live)).To(Succeed())
		Expect(live.Object).To(HaveKeyWithValue("status", And(HaveKeyWithValue("clustersInstalled", BeEquivalentTo(0)),
			HaveKeyWithValue("clustersConnected", BeEquivalentTo(0)))))

		By("the work agent applied the first cluster's work")
		reportWorkApplied(c1)
		expectClusterCounts(edge, 1, 0)

		By("the first cluster's agent connected")
		tunnels.report(c1, healthyTunnel(1, 3*time.Millisecond))
		expectClusterCounts(edge, 1, 1)

		By("a status write that changes no count (a probe ten times slower) writes nothing to the configuration")
		rv := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", edge.Name).ResourceVersion
		tunnels.report(c1, healthyTunnel(1, 30*time.Millisecond))
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, c1, "cluster-proxy").Status.Probe.Latency).To(Equal("30ms"))
		}, timeout, interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", edge.Name).ResourceVersion).To(Equal(rv))
		}, 10*countsDelay, countsDelay/4).Should(Succeed(), "longer than the recount delay")

		By("the second cluster is installed and connected too")
		reportWorkApplied(c2)
		tunnels.report(c2, healthyTunnel(2, 3*time.Millisecond))
		expectClusterCounts(edge, 2, 2)
		expectClusterCounts(core, 0, 0)

		By("the second cluster's add-on moves to core and the first cluster leaves the hub")
		Eventually(func(g Gomega) {
			mca := get(g, &addonv1alpha1.ManagedClusterAddOn{}, c2, "cluster-proxy")
			mca.Spec.Configs = []addonv1alpha1.AddOnConfig{mpcConfig(core.Name)}
			g.Expect(k8s.Update(ctx(), mca)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Expect(k8s.Delete(ctx(), &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: c1}})).To(Succeed())
		expectGone(&proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: c1, Name: "cluster-proxy"}})
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, c2, "cluster-proxy").Status.Installed).To(BeFalse(),
				"core renders a new work, not applied yet")
		}, timeout, interval).Should(Succeed())
		expectClusterCounts(edge, 0, 0)
		expectClusterCounts(core, 0, 1)

		By("the work agent applied the work rendered from core")
		reportWorkApplied(c2)
		expectClusterCounts(core, 1, 1)

		By("the second cluster's add-on is removed")
		Expect(k8s.Delete(ctx(), &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: c2, Name: "cluster-proxy"}})).To(Succeed())
		expectGone(&proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: c2, Name: "cluster-proxy"}})
		expectClusterCounts(core, 0, 0)
	})
})
