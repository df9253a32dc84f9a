package clusteragent

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
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
