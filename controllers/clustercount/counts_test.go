package clustercount

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func addOn(cluster string, configs ...addonv1alpha1.AddOnConfig) addonv1alpha1.ManagedClusterAddOn {
	return addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: cluster},
		Spec:       addonv1alpha1.ManagedClusterAddOnSpec{Configs: configs},
	}
}

func mpcConfig(name string) addonv1alpha1.AddOnConfig {
	return addonv1alpha1.AddOnConfig{
		ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: proxyv1alpha1.GroupVersion.Group, Resource: "managedproxyconfigurations"},
		ConfigReferent:      addonv1alpha1.ConfigReferent{Name: name},
	}
}

func clusterStatus(cluster string, installed bool, connected metav1.ConditionStatus) proxyv1alpha1.ClusterProxyStatus {
	cps := proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: cluster}}
	cps.Status.Installed = installed
	cps.Status.Conditions = []metav1.Condition{{Type: proxyv1alpha1.ConditionAgentConnected, Status: connected}}
	return cps
}

func TestCountClusters(t *testing.T) {
	g := NewWithT(t)
	addOns := []addonv1alpha1.ManagedClusterAddOn{
		addOn("c1"), addOn("c2"), addOn("c3", mpcConfig("edge")), addOn("c4", mpcConfig("cluster-proxy")), addOn("c5"),
	}
	statuses := []proxyv1alpha1.ClusterProxyStatus{
		clusterStatus("c1", true, metav1.ConditionTrue),
		clusterStatus("c2", true, metav1.ConditionFalse),
		clusterStatus("c3", true, metav1.ConditionTrue),
		clusterStatus("c4", false, metav1.ConditionUnknown),
		clusterStatus("c5", false, metav1.ConditionTrue),  // connected before the work agent reported the work applied
		clusterStatus("gone", true, metav1.ConditionTrue), // its add-on was deleted: not counted anywhere
	}

	installed, connected := countClusters("cluster-proxy", addOns, statuses)
	g.Expect(installed).To(Equal(int32(2)), "c1, c2")
	g.Expect(connected).To(Equal(int32(2)), "c1, c5")

	installed, connected = countClusters("edge", addOns, statuses)
	g.Expect(installed).To(Equal(int32(1)), "c3")
	g.Expect(connected).To(Equal(int32(1)), "c3")

	installed, connected = countClusters("unused", addOns, statuses)
	g.Expect(installed).To(BeZero())
	g.Expect(connected).To(BeZero())
}

func TestAgentCountsChanged(t *testing.T) {
	cps := func(installed bool, connected metav1.ConditionStatus, mutate ...func(*proxyv1alpha1.ClusterProxyStatus)) *proxyv1alpha1.ClusterProxyStatus {
		c := clusterStatus("c1", installed, connected)
		for _, m := range mutate {
			m(&c)
		}
		return &c
	}
	probed := func(c *proxyv1alpha1.ClusterProxyStatus) {
		c.Status.Probe = &proxyv1alpha1.ProbeStatus{Health: "True", Latency: "41ms"}
		c.Status.ConnectedAgents = 2
		c.Status.AgentCertificateAuthorityKeyID = "0a1b"
	}
	for name, tc := range map[string]struct {
		old, new *proxyv1alpha1.ClusterProxyStatus
		want     bool
	}{
		"installed":                             {cps(false, metav1.ConditionUnknown), cps(true, metav1.ConditionUnknown), true},
		"uninstalled":                           {cps(true, metav1.ConditionUnknown), cps(false, metav1.ConditionUnknown), true},
		"connected":                             {cps(true, metav1.ConditionFalse), cps(true, metav1.ConditionTrue), true},
		"disconnected to Unknown":               {cps(true, metav1.ConditionTrue), cps(true, metav1.ConditionUnknown), true},
		"False to Unknown, still not connected": {cps(true, metav1.ConditionFalse), cps(true, metav1.ConditionUnknown), false},
		"probe, agents and issuer":              {cps(true, metav1.ConditionTrue), cps(true, metav1.ConditionTrue, probed), false},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(agentCountsChanged.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new})).To(Equal(tc.want))
		})
	}

	t.Run("created or deleted: only a status that counts", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(agentCountsChanged.Create(event.CreateEvent{Object: cps(false, metav1.ConditionUnknown)})).To(BeFalse(), "a new cluster's status")
		g.Expect(agentCountsChanged.Create(event.CreateEvent{Object: cps(true, metav1.ConditionUnknown)})).To(BeTrue())
		g.Expect(agentCountsChanged.Delete(event.DeleteEvent{Object: cps(false, metav1.ConditionTrue)})).To(BeTrue())
		g.Expect(agentCountsChanged.Delete(event.DeleteEvent{Object: cps(false, metav1.ConditionFalse)})).To(BeFalse())
	})
}

func TestAddOnConfigurationChanged(t *testing.T) {
	g := NewWithT(t)
	moved := func(old, new addonv1alpha1.ManagedClusterAddOn) bool {
		return addOnConfigurationChanged.Update(event.UpdateEvent{ObjectOld: &old, ObjectNew: &new})
	}
	g.Expect(moved(addOn("c1"), addOn("c1", mpcConfig("edge")))).To(BeTrue())
	g.Expect(moved(addOn("c1", mpcConfig("edge")), addOn("c1"))).To(BeTrue())
	g.Expect(moved(addOn("c1"), addOn("c1", mpcConfig("cluster-proxy")))).To(BeFalse(), "the default, named")
	statusOnly := addOn("c1")
	statusOnly.Status.Conditions = []metav1.Condition{{Type: "Available", Status: metav1.ConditionTrue}}
	g.Expect(moved(addOn("c1"), statusOnly)).To(BeFalse())
}

// delayQueue records what a handler queues, and when.
type delayQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	now   []reconcile.Request
	later map[reconcile.Request]time.Duration
}

func (q *delayQueue) Add(r reconcile.Request) { q.now = append(q.now, r) }

func (q *delayQueue) AddAfter(r reconcile.Request, d time.Duration) { q.later[r] = d }

// TestRecountLater: a count change re-queues every configuration after the delay, never at once.
func TestRecountLater(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(proxyv1alpha1.AddToScheme(scheme)).To(Succeed())
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy"}},
		&proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "edge"}},
	).Build()
	h := (&Reconciler{Client: c, Delay: 3 * time.Second}).recountLater()
	cps := clusterStatus("c1", true, metav1.ConditionTrue)

	q := &delayQueue{later: map[reconcile.Request]time.Duration{}}
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: &cps, ObjectNew: &cps}, q)
	h.Create(context.Background(), event.CreateEvent{Object: &cps}, q)
	h.Delete(context.Background(), event.DeleteEvent{Object: &cps}, q)
	g.Expect(q.now).To(BeEmpty())
	g.Expect(q.later).To(Equal(map[reconcile.Request]time.Duration{
		{NamespacedName: client.ObjectKey{Name: "cluster-proxy"}}: 3 * time.Second,
		{NamespacedName: client.ObjectKey{Name: "edge"}}:          3 * time.Second,
	}))
}
