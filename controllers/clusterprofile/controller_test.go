package clusterprofile

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/client-go/tools/events"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestWithProviderTouchesOnlyItsOwnEntry(t *testing.T) {
	g := NewWithT(t)
	other := func(name string) cpv1alpha1.AccessProvider {
		return cpv1alpha1.AccessProvider{Name: name, Cluster: clientcmdv1.Cluster{Server: "https://" + name}}
	}
	ours, err := Provider("c1", "user.ns.svc:9092", []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ours.Cluster.Server).To(Equal("https://user.ns.svc:9092/c1"))
	stale := *ours
	stale.Cluster.CertificateAuthorityData = []byte("old ca")

	g.Expect(WithProvider(nil, ProviderName, nil)).To(BeNil())
	g.Expect(WithProvider(nil, ProviderName, ours)).To(Equal([]cpv1alpha1.AccessProvider{*ours}))
	g.Expect(WithProvider([]cpv1alpha1.AccessProvider{other("a"), other("b")}, ProviderName, ours)).To(
		Equal([]cpv1alpha1.AccessProvider{other("a"), other("b"), *ours}), "added last")
	g.Expect(WithProvider([]cpv1alpha1.AccessProvider{other("a"), stale, other("b")}, ProviderName, ours)).To(
		Equal([]cpv1alpha1.AccessProvider{other("a"), *ours, other("b")}), "replaced in place")
	g.Expect(WithProvider([]cpv1alpha1.AccessProvider{stale, *ours}, ProviderName, ours)).To(
		Equal([]cpv1alpha1.AccessProvider{*ours}), "a duplicate of its own goes")
	g.Expect(WithProvider([]cpv1alpha1.AccessProvider{other("a"), stale}, ProviderName, nil)).To(
		Equal([]cpv1alpha1.AccessProvider{other("a")}), "removed")
	g.Expect(WithProvider([]cpv1alpha1.AccessProvider{stale}, ProviderName, nil)).To(BeNil())
}

func TestHubProviderIsTheHubsPathToTheCluster(t *testing.T) {
	g := NewWithT(t)
	p, err := HubProvider("c1", "https://hub.example:6443/", []byte("hub ca"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Name).To(Equal("open-cluster-management-hub"))
	g.Expect(p.Cluster.Server).To(Equal("https://hub.example:6443/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/c1/proxy"))
	g.Expect(p.Cluster.CertificateAuthorityData).To(Equal([]byte("hub ca")))
	userServer, err := Provider("c1", "user.ns.svc:9092", []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	both := WithProvider(WithProvider(nil, ProviderName, userServer), HubProviderName, p)
	g.Expect(both).To(Equal([]cpv1alpha1.AccessProvider{*userServer, *p}))
	g.Expect(WithProvider(both, HubProviderName, nil)).To(Equal([]cpv1alpha1.AccessProvider{*userServer}), "each name is its own entry")
}

func TestClusterOfPrefersTheClusterNameLabel(t *testing.T) {
	g := NewWithT(t)
	p := &cpv1alpha1.ClusterProfile{}
	p.Name = "profile"
	cluster, field := ClusterOf(p)
	g.Expect(cluster).To(Equal("profile"))
	g.Expect(field).To(Equal("metadata.name"))
	p.Labels = map[string]string{ClusterNameLabel: "c1"}
	cluster, field = ClusterOf(p)
	g.Expect(cluster).To(Equal("c1"))
	g.Expect(field).To(Equal("metadata.labels[open-cluster-management.io/cluster-name]"))
}

func TestServedOnlyWhereTheHubHasTheAPI(t *testing.T) {
	g := NewWithT(t)
	without := meta.NewDefaultRESTMapper(nil)
	served, err := Served(without)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(served).To(BeFalse())

	with := meta.NewDefaultRESTMapper([]schema.GroupVersion{cpv1alpha1.GroupVersion})
	with.Add(cpv1alpha1.GroupVersion.WithKind("ClusterProfile"), meta.RESTScopeNamespace)
	served, err = Served(with)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(served).To(BeTrue())
}

// TestWarnsWhenTheCRDDropsAccessProviders: a hub whose ClusterProfile CRD predates status.accessProviders prunes
// them; the reconciler says so in a Warning instead of writing in vain unnoticed.
func TestWarnsWhenTheCRDDropsAccessProviders(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, cpv1alpha1.AddToScheme, clusterv1.Install,
		addonv1alpha1.Install, proxyv1alpha1.AddToScheme} {
		g.Expect(add(scheme)).To(Succeed())
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{UserServer: &proxyv1alpha1.ManagedProxyConfigurationUserServer{},
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{Namespace: "proxy"}}}
	profile := &cpv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "open-cluster-management"},
		Spec: cpv1alpha1.ClusterProfileSpec{ClusterManager: cpv1alpha1.ClusterManager{Name: ClusterManagerName}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(profile).WithObjects(
		&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "c1"}},
		&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: "c1"}},
		mpc,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.CABundleSecretName, Namespace: "proxy"},
			Data: map[string][]byte{"ca.crt": []byte("ca")}},
		profile,
	).WithInterceptorFuncs(interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			obj.(*cpv1alpha1.ClusterProfile).Status.AccessProviders = nil // as an old CRD's schema prunes them
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}).Build()
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: recorder}
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(profile)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(recorder.Events).To(Receive(ContainSubstring(proxyv1alpha1.ReasonAccessProvidersNotStored)))
}
