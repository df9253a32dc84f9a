package controllers_test

import (
	"encoding/json"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// profileNamespace is where the specs keep ClusterProfiles, as OCM does in a namespace bound to a cluster set.
const profileNamespace = "open-cluster-management"

// newProfile creates the ClusterProfile OCM keeps for cluster, with a provider of another product in its status.
func newProfile(name, manager string, labels map[string]string) *cpv1alpha1.ClusterProfile {
	if err := k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: profileNamespace}}); !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	profile := &cpv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: profileNamespace,
			Labels: map[string]string{cpv1alpha1.LabelClusterManagerKey: manager}},
		Spec: cpv1alpha1.ClusterProfileSpec{DisplayName: name, ClusterManager: cpv1alpha1.ClusterManager{Name: manager}},
	}
	for k, v := range labels {
		profile.Labels[k] = v
	}
	Expect(k8s.Create(ctx(), profile)).To(Succeed())
	// The operator may write its provider first: another product's goes beside whatever is there.
	Eventually(func(g Gomega) {
		live := get(g, &cpv1alpha1.ClusterProfile{}, profileNamespace, name)
		live.Status.AccessProviders = append(live.Status.AccessProviders,
			cpv1alpha1.AccessProvider{Name: "another-product", Cluster: clientcmdv1.Cluster{Server: "https://elsewhere.example"}})
		g.Expect(k8s.Status().Update(ctx(), live)).To(Succeed())
	}, timeout, interval).Should(Succeed())
	return profile
}

func providersOf(g Gomega, profile *cpv1alpha1.ClusterProfile) map[string]cpv1alpha1.AccessProvider {
	live := get(g, &cpv1alpha1.ClusterProfile{}, profile.Namespace, profile.Name)
	out := map[string]cpv1alpha1.AccessProvider{}
	for _, p := range live.Status.AccessProviders {
		out[p.Name] = p
	}
	return out
}

// hubServer is the hub URL the suite's manager publishes in the hub providers, as a chart user sets it.
const hubServer = "https://hub.example.com:6443"

var _ = Describe("ClusterProfile access providers", func() {
	It("publishes the hub's own path to each cluster of the default configuration, for consumers with their own hub identity", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) { m.Name = proxyv1alpha1.DefaultConfigurationName })
		createMPC(mpc)
		expectReady(mpc)
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster, mpcConfig(mpc.Name))
		profile := newProfile(cluster, "open-cluster-management", nil)

		server := hubServer + "/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/" + cluster + "/proxy"
		Eventually(func(g Gomega) {
			providers := providersOf(g, profile)
			g.Expect(providers).To(HaveKey("another-product"))
			g.Expect(providers).NotTo(HaveKey("open-cluster-management"), "the configuration has no user-server")
			hub, ok := providers["open-cluster-management-hub"]
			g.Expect(ok).To(BeTrue())
			g.Expect(hub.Cluster.Server).To(Equal(server))
			g.Expect(hub.Cluster.CertificateAuthorityData).To(Equal(env.Config.CAData), "the hub kube-apiserver's CA")
		}, timeout, interval).Should(Succeed())

		By("a consumer that names only the hub provider gets the hub's path and its own credential plugin")
		file := filepath.Join(GinkgoT().TempDir(), "providers.json")
		Expect(os.WriteFile(file, []byte(`{"providers":[{"name":"open-cluster-management-hub","execConfig":{
			"apiVersion":"client.authentication.k8s.io/v1","command":"kubectl-cluster_proxy","args":["credential"]}}]}`), 0o600)).To(Succeed())
		providers, err := access.NewFromFile(file)
		Expect(err).NotTo(HaveOccurred())
		rc, err := providers.BuildConfigFromCP(get(Default, &cpv1alpha1.ClusterProfile{}, profile.Namespace, profile.Name))
		Expect(err).NotTo(HaveOccurred())
		Expect(rc.Host).To(Equal(server))

		By("the add-on leaving takes the provider with it")
		addOn := get(Default, &addonv1alpha1.ManagedClusterAddOn{}, cluster, proxyv1alpha1.AddonName)
		Expect(k8s.Delete(ctx(), addOn)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(providersOf(g, profile)).NotTo(HaveKey("open-cluster-management-hub"))
		}, timeout, interval).Should(Succeed())
	})

	It("publishes the user-server of each cluster's configuration, follows a CA rotation, and leaves with the add-on", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
		})
		Expect(k8s.Create(ctx(), mpc)).To(Succeed())
		DeferCleanupDelete(mpc)
		expectReady(mpc)
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster, mpcConfig(mpc.Name))
		profile := newProfile(cluster, "open-cluster-management", nil)
		caOf := func(g Gomega) []byte {
			return get(g, &corev1.Secret{}, mpc.Spec.ProxyServer.Namespace, proxyv1alpha1.CABundleSecretName).Data["ca.crt"]
		}

		server := "https://cluster-proxy-addon-user." + mpc.Spec.ProxyServer.Namespace + ".svc:9092/" + cluster
		Eventually(func(g Gomega) {
			providers := providersOf(g, profile)
			g.Expect(providers).To(HaveKey("another-product"), "another product's provider stays")
			ours, ok := providers["open-cluster-management"]
			g.Expect(ok).To(BeTrue())
			g.Expect(ours.Cluster.Server).To(Equal(server))
			g.Expect(ours.Cluster.CertificateAuthorityData).To(Equal(caOf(g)))
			g.Expect(ours.Cluster.Extensions).To(HaveLen(1))
			g.Expect(ours.Cluster.Extensions[0].Name).To(Equal("client.authentication.k8s.io/exec"))
			g.Expect(ours.Cluster.Extensions[0].Extension.Raw).To(MatchJSON(`{"clusterName":"` + cluster + `"}`))
		}, timeout, interval).Should(Succeed())

		By("a consumer's provider file and sigs.k8s.io/cluster-inventory-api/pkg/access build the cluster's rest.Config")
		file := filepath.Join(GinkgoT().TempDir(), "providers.json")
		Expect(os.WriteFile(file, []byte(`{"providers":[{"name":"open-cluster-management","execConfig":{
			"apiVersion":"client.authentication.k8s.io/v1","command":"kubectl-cluster_proxy","args":["credential"],
			"provideClusterInfo":true}}]}`), 0o600)).To(Succeed())
		providers, err := access.NewFromFile(file)
		Expect(err).NotTo(HaveOccurred())
		cfg, err := providers.BuildConfigFromCP(get(Default, &cpv1alpha1.ClusterProfile{}, profile.Namespace, profile.Name))
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg.Host).To(Equal(server))
		Expect(cfg.CAData).To(Equal(caOf(Default)))
		Expect(cfg.ExecProvider.Command).To(Equal("kubectl-cluster_proxy"))
		var ext map[string]string
		Expect(cfg.ExecProvider.Config).To(BeAssignableToTypeOf(&runtime.Unknown{}))
		Expect(json.Unmarshal(cfg.ExecProvider.Config.(*runtime.Unknown).Raw, &ext)).To(Succeed())
		Expect(ext).To(HaveKeyWithValue("clusterName", cluster))

		By("at steady state, a pass of the profile writes nothing to it")
		expectQuiet()
		before := requests.WritesTo("clusterprofiles")
		// Both pass the profile's predicate: a new label, and another writer changing its own provider.
		Eventually(func(g Gomega) {
			live := get(g, &cpv1alpha1.ClusterProfile{}, profile.Namespace, profile.Name)
			live.Labels["example.com/touched"] = "yes"
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			live := get(g, &cpv1alpha1.ClusterProfile{}, profile.Namespace, profile.Name)
			for i := range live.Status.AccessProviders {
				if live.Status.AccessProviders[i].Name == "another-product" {
					live.Status.AccessProviders[i].Cluster.Server = "https://moved.example"
				}
			}
			g.Expect(k8s.Status().Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectQuiet()
		Expect(requests.WritesTo("clusterprofiles")).To(Equal(before))
		Expect(providersOf(Default, profile)["another-product"].Cluster.Server).To(Equal("https://moved.example"), "theirs stays as they wrote it")

		By("a CA rotation puts the new bundle in the provider")
		oldCA := caOf(Default)
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Annotations = map[string]string{proxyv1alpha1.RotateCAAnnotation: "profiles"}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			ca := caOf(g)
			g.Expect(ca).NotTo(Equal(oldCA))
			g.Expect(providersOf(g, profile)["open-cluster-management"].Cluster.CertificateAuthorityData).To(Equal(ca))
		}, timeout, interval).Should(Succeed())

		By("removing the add-on removes the provider, and only it")
		Expect(k8s.Delete(ctx(), &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: proxyv1alpha1.AddonName}})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(providersOf(g, profile)).To(And(HaveKey("another-product"), Not(HaveKey("open-cluster-management"))))
		}, timeout, interval).Should(Succeed())
	})

	It("publishes nothing for a profile of an unknown cluster, saying which field names it, nor for another manager's profile", func() {
		ghost := "ghost-" + mpcSuffix()
		unknown := newProfile("profile-"+mpcSuffix(), "open-cluster-management", map[string]string{"open-cluster-management.io/cluster-name": ghost})
		Eventually(func(g Gomega) {
			g.Expect(eventReasons(get(g, &cpv1alpha1.ClusterProfile{}, unknown.Namespace, unknown.Name))).To(ContainElement("UnknownCluster"))
		}, timeout, interval).Should(Succeed())
		events := &corev1.EventList{}
		Expect(k8s.List(ctx(), events)).To(Succeed())
		var messages []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == unknown.Name && e.Reason == "UnknownCluster" {
				messages = append(messages, e.Message)
			}
		}
		Expect(messages).To(ContainElement(And(ContainSubstring("metadata.labels[open-cluster-management.io/cluster-name]"), ContainSubstring(ghost))))
		Expect(providersOf(Default, unknown)).NotTo(HaveKey("open-cluster-management"))

		By("another cluster manager's profile of a cluster with the add-on is left alone")
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
		})
		Expect(k8s.Create(ctx(), mpc)).To(Succeed())
		DeferCleanupDelete(mpc)
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster, mpcConfig(mpc.Name))
		foreign := newProfile(cluster, "another-manager", nil)
		expectReady(mpc)
		expectQuiet()
		Expect(providersOf(Default, foreign)).To(HaveLen(1))
	})
})
