package clusteragent

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
)

func TestOnlyTheConfigurationChangesAgentsAreRenderedFromQueueEveryCluster(t *testing.T) {
	base := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Generation: 3}}
	base.Status.Entrypoint = "hub.example.com:8091"
	base.Status.Signer = &proxyv1alpha1.SignerStatus{CAFingerprint: "SHA256:aa"}
	for _, tc := range []struct {
		name   string
		change func(*proxyv1alpha1.ManagedProxyConfiguration)
		want   bool
	}{
		{"the cluster counts", func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Status.ClustersInstalled, m.Status.ClustersConnected = 7, 5
		}, false},
		{"a condition", func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Status.Conditions = []metav1.Condition{{Type: proxyv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
		}, false},
		{"the spec (generation)", func(m *proxyv1alpha1.ManagedProxyConfiguration) { m.Generation++ }, true},
		{"the entrypoint", func(m *proxyv1alpha1.ManagedProxyConfiguration) { m.Status.Entrypoint = "hub2.example.com:8091" }, true},
		{"the signer", func(m *proxyv1alpha1.ManagedProxyConfiguration) { m.Status.Signer.CAFingerprint = "SHA256:bb" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.change(cur)
			if got := agentInputChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.want {
				t.Errorf("every cluster queued = %v, want %v", got, tc.want)
			}
		})
	}
	if !agentInputChanged.Create(event.CreateEvent{Object: base}) || !agentInputChanged.Delete(event.DeleteEvent{Object: base}) {
		t.Error("a configuration created or deleted does not queue every cluster")
	}
}

// TestAPassesOwnWritesQueueNoOtherPass: the predicates of the add-on, its work and its ClusterProxyStatus pass what
// another writer changed and drop what a pass writes itself (a create, a new rendered hash, a status).
func TestAPassesOwnWritesQueueNoOtherPass(t *testing.T) {
	rendered := func(o client.Object, generation int64, hash string) client.Object {
		o.SetGeneration(generation)
		o.SetAnnotations(map[string]string{apply.HashAnnotation: hash})
		return o
	}
	work := func(generation int64, hash string, applied metav1.ConditionStatus) *workv1.ManifestWork {
		w := rendered(&workv1.ManifestWork{}, generation, hash).(*workv1.ManifestWork)
		w.Status.Conditions = []metav1.Condition{{Type: workv1.WorkApplied, Status: applied}}
		return w
	}
	cps := func(generation int64, hash string, installed bool) *proxyv1alpha1.ClusterProxyStatus {
		c := rendered(&proxyv1alpha1.ClusterProxyStatus{}, generation, hash).(*proxyv1alpha1.ClusterProxyStatus)
		c.Status.Installed = installed
		return c
	}
	addOn := func(generation int64, deleting bool, condition string) *addonv1alpha1.ManagedClusterAddOn {
		m := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Generation: generation}}
		if deleting {
			now := metav1.Now()
			m.DeletionTimestamp = &now
		}
		m.Status.Conditions = []metav1.Condition{{Type: condition, Status: metav1.ConditionTrue}}
		return m
	}
	for _, tc := range []struct {
		name     string
		p        predicate.Funcs
		old, cur client.Object
		want     bool
	}{
		{"the work rendered anew by a pass", workChangedByOthers, work(1, "a", metav1.ConditionTrue), work(2, "b", metav1.ConditionTrue), false},
		{"the work's spec edited by someone else", workChangedByOthers, work(1, "a", metav1.ConditionTrue), work(2, "a", metav1.ConditionTrue), true},
		{"the work agent's status", workChangedByOthers, work(2, "b", metav1.ConditionFalse), work(2, "b", metav1.ConditionTrue), true},
		{"the status a pass wrote", renderedChangedByOthers, cps(1, "a", false), cps(1, "a", true), false},
		{"the status's spec edited by someone else", renderedChangedByOthers, cps(1, "a", false), cps(2, "a", false), true},
		{"the add-on's status (a pass's, or OCM's conditions)", addOnSpecChanged, addOn(1, false, "Configured"), addOn(1, false, "RegistrationApplied"), false},
		{"the add-on's spec", addOnSpecChanged, addOn(1, false, "Configured"), addOn(2, false, "Configured"), true},
		{"the add-on's deletion", addOnSpecChanged, addOn(1, false, "Configured"), addOn(1, true, "Configured"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.cur}); got != tc.want {
				t.Errorf("a pass queued = %v, want %v", got, tc.want)
			}
		})
	}
	for name, p := range map[string]predicate.Funcs{"work": workChangedByOthers, "status": renderedChangedByOthers} {
		if p.Create(event.CreateEvent{Object: &workv1.ManifestWork{}}) {
			t.Errorf("the %s a pass created queues another pass", name)
		}
		if !p.Delete(event.DeleteEvent{Object: &workv1.ManifestWork{}}) {
			t.Errorf("a deleted %s queues no pass", name)
		}
	}
}

// TestAClusterQueuesAPassOnlyForWhatAPassReads: the klusterlet's status updates of a ManagedCluster queue no pass;
// its deletion and its image-registries annotation do.
func TestAClusterQueuesAPassOnlyForWhatAPassReads(t *testing.T) {
	cluster := func(annotation string, deleting bool, mutate func(*clusterv1.ManagedCluster)) *clusterv1.ManagedCluster {
		c := &clusterv1.ManagedCluster{}
		if annotation != "" {
			c.Annotations = map[string]string{clusterv1.ClusterImageRegistriesAnnotationKey: annotation}
		}
		if deleting {
			now := metav1.Now()
			c.DeletionTimestamp = &now
		}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	status := func(c *clusterv1.ManagedCluster) {
		c.Status.Conditions = []metav1.Condition{{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionTrue}}
		c.Status.Version.Kubernetes = "v1.36.3"
	}
	for _, tc := range []struct {
		name     string
		old, cur *clusterv1.ManagedCluster
		want     bool
	}{
		{"a status update", cluster("", false, nil), cluster("", false, status), false},
		{"another annotation or label", cluster("", false, nil), cluster("", false, func(c *clusterv1.ManagedCluster) {
			c.Labels = map[string]string{"env": "prod"}
			c.Annotations = map[string]string{"note": "x"}
		}), false},
		{"the image-registries annotation set", cluster("", false, nil), cluster(`{"registries":[]}`, false, nil), true},
		{"the image-registries annotation changed", cluster(`{"registries":[]}`, false, nil), cluster(`{"registries":[{"mirror":"m"}]}`, false, nil), true},
		{"deletion", cluster("", false, nil), cluster("", true, nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clusterInputChanged.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.cur}); got != tc.want {
				t.Fatalf("passes %v, want %v", got, tc.want)
			}
		})
	}
	if !clusterInputChanged.Create(event.CreateEvent{Object: cluster("", false, nil)}) ||
		!clusterInputChanged.Delete(event.DeleteEvent{Object: cluster("", false, nil)}) {
		t.Fatal("a cluster's creation and deletion queue its pass")
	}
}
