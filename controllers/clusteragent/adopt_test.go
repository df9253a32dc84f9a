package clusteragent

import (
	"context"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
)

// TestTheAddOnsOwnerWaitsForALowPriorityPassAfterTheAgent: the pass that deploys a cluster's agent leaves the
// ClusterManagementAddOn's owner reference to a pass of low priority, which writes it and nothing else, once the
// cache has seen the first pass's writes.
func TestTheAddOnsOwnerWaitsForALowPriorityPassAfterTheAgent(t *testing.T) {
	ctx := context.Background()
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Generation: 1}}
	mpc.Status.Entrypoint = "proxy-entrypoint.hub.example.com:8091"
	mpc.Status.Signer = &proxyv1alpha1.SignerStatus{CAFingerprint: "SHA256:aa"}
	cma := &addonv1alpha1.ClusterManagementAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, UID: "cma-uid"}}
	mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: "cluster1", UID: "mca-uid"}}
	// stale, when set, is what the cache answers for the add-on: a version older than the last write.
	var stale *addonv1alpha1.ManagedClusterAddOn
	writes := 0
	c := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if a, ok := obj.(*addonv1alpha1.ManagedClusterAddOn); ok && stale != nil {
					stale.DeepCopyInto(a)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				writes++
				return c.Update(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				writes++
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).
		WithStatusSubresource(&addonv1alpha1.ManagedClusterAddOn{}, &proxyv1alpha1.ClusterProxyStatus{}).
		WithIndex(&certificatesv1.CertificateSigningRequest{}, index.CSRCluster, index.ClusterOfCSR).
		WithObjects(mpc, cma, mca, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "cluster1"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: contract.Namespace(mpc), Name: proxyv1alpha1.CABundleSecretName},
				Data: map[string][]byte{"ca.crt": []byte("bundle")}}).
		Build()
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakePassiveClock(time.Now())}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mca)}
	owners := func() []metav1.OwnerReference {
		live := &addonv1alpha1.ManagedClusterAddOn{}
		if err := c.Get(ctx, req.NamespacedName, live); err != nil {
			t.Fatal(err)
		}
		return live.OwnerReferences
	}

	read := &addonv1alpha1.ManagedClusterAddOn{}
	if err := c.Get(ctx, req.NamespacedName, read); err != nil {
		t.Fatal(err)
	}
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "cluster1", Name: "addon-cluster-proxy-deploy-0"}, &workv1.ManifestWork{}); err != nil {
		t.Fatalf("the first pass did not deploy the agent: %v", err)
	}
	if len(owners()) != 0 {
		t.Errorf("the pass that deployed the agent wrote the add-on's owner: %v", owners())
	}
	if res.Priority == nil || *res.Priority != handler.LowPriority || res.RequeueAfter <= 0 {
		t.Fatalf("the pass that deployed the agent did not queue one of low priority: %+v", res)
	}

	// A cache that has not seen the first pass's status write: the pass waits for it rather than writing at a
	// version the server has left.
	stale, writes = read, 0
	res, err = r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if writes != 0 || res.RequeueAfter <= 0 {
		t.Errorf("a pass on a cache behind its own write made %d writes and queued %+v; want none and a pass soon", writes, res)
	}

	stale = nil
	res, err = r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if writes != 1 {
		t.Errorf("the low-priority pass made %d writes; want the owner's alone", writes)
	}
	if got := owners(); len(got) != 1 || got[0].UID != cma.UID || got[0].Kind != "ClusterManagementAddOn" {
		t.Errorf("the low-priority pass did not make the ClusterManagementAddOn the add-on's owner: %v", got)
	}
	if res.Priority != nil {
		t.Errorf("the add-on is owned, yet the pass queued another: %+v", res)
	}
}
