package controllers_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

// The hub the existing add-on (v0.11) ran on, as its manager leaves it when a Helm upgrade replaces it with the
// operator: its CA in cluster-proxy-signer (RSA, PKCS#8, no label of the operator's), the bundle and proxy-client hub
// programs mount, its proxy-server Deployment (selected by the component label alone), the TokenReview right it gave
// agents and the "*" serving certificate of its service-proxies.
var _ = Describe("A hub the existing add-on ran on", func() {
	It("keeps the add-on's CA and its proxy-client working, replaces its proxy-server and deletes its leftovers", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) { m.Name = proxyv1alpha1.DefaultConfigurationName })
		ns := mpc.Spec.ProxyServer.Namespace
		Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

		caCert, caKey := addonCA()
		addonClient := addonLeaf(caCert, caKey, "proxy-client", x509.ExtKeyUsageClientAuth)
		addonServer := addonLeaf(caCert, caKey, "proxy-server", x509.ExtKeyUsageServerAuth)
		addonClient.Namespace, addonServer.Namespace = ns, ns
		caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw})
		keyDER := must(x509.MarshalPKCS8PrivateKey(caKey))
		tokenReview := "cluster-proxy-addon-agent-tokenreview"
		addonObjects := []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy-signer"},
				Data: map[string][]byte{"ca.crt": caPEM, "ca.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-server-ca"}, Data: map[string][]byte{"ca.crt": caPEM}},
			addonClient, addonServer,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy-service-proxy-server-cert"},
				Type: corev1.SecretTypeTLS, Data: addonLeaf(caCert, caKey, "*", x509.ExtKeyUsageServerAuth).Data},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: tokenReview},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: tokenReview},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tokenReview},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "open-cluster-management:cluster-proxy"}}},
			addonProxyServer(ns, mpc.Name),
			serverPod(ns, "addon-proxy-server", map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}),
			serverPod(ns, "operator-proxy-server", render.ServerPodLabels(mpc)),
		}
		for _, o := range addonObjects {
			Expect(k8s.Create(ctx(), o)).To(Succeed(), "%T %s", o, o.GetName())
			DeferCleanupDelete(o)
		}
		cluster := "addon-ran-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		mca := get(Default, &addonv1alpha1.ManagedClusterAddOn{}, cluster, proxyv1alpha1.AddonName)
		addonWork := addonAgentWork(mca)
		Expect(k8s.Create(ctx(), addonWork)).To(Succeed())
		DeferCleanupDelete(addonWork)
		DeferCleanupDelete(mca)
		DeferCleanupDelete(&clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}})
		createMPC(mpc)
		expectReady(mpc)

		By("the add-on's agent ManifestWork, which carries none of the operator's labels, is replaced by the operator's agent")
		Eventually(func(g Gomega) {
			work := get(g, &workv1.ManifestWork{}, cluster, agentWork)
			g.Expect(work.Labels).To(HaveKeyWithValue(render.ManagedByLabel, render.ManagedByValue), "the cache sees it from now on")
			g.Expect(work.UID).To(Equal(addonWork.UID), "the same work, so OCM's work agent updates the agent in place")
			g.Expect(agentDeployment(g, cluster).Spec.Template.Spec.Containers[0].Image).To(Equal(mpc.Spec.ProxyAgent.Image))
		}, timeout, interval).Should(Succeed())

		By("the add-on's CA signs on: the same fingerprint, alone in the bundle, every new certificate under it")
		live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
		Expect(live.Status.Signer.CAFingerprint).To(Equal(certs.Fingerprint(caCert)))
		Expect(live.Status.Signer.BundleFingerprints).To(Equal([]string{certs.Fingerprint(caCert)}))
		roots := x509.NewCertPool()
		roots.AddCert(caCert)
		for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert", "cluster-proxy-impersonator"} {
			Eventually(func(g Gomega) {
				leaf := leafOf(g, get(g, &corev1.Secret{}, ns, name))
				_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: fakeClock.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
				g.Expect(err).NotTo(HaveOccurred(), name)
				g.Expect(leaf.Equal(leafOfSecret(addonClient)) || leaf.Equal(leafOfSecret(addonServer))).To(BeFalse(), "%s is re-issued", name)
			}, timeout, interval).Should(Succeed())
		}
		signerSecret := get(Default, &corev1.Secret{}, ns, "cluster-proxy-signer")
		Expect(signerSecret.Labels).To(HaveKey(render.ManagedByLabel), "the cache sees the adopted secret from now on")
		Expect(signerSecret.Data["ca.crt"]).To(Equal(addonObjects[0].(*corev1.Secret).Data["ca.crt"]))
		Expect(signerSecret.Data["ca.key"]).To(Equal(addonObjects[0].(*corev1.Secret).Data["ca.key"]),
			"the key stays PKCS#8, byte for byte: the add-on's manager parses nothing else, and reads it again after a rollback")

		By("a hub program still holding the add-on's proxy-client and bundle completes mutual TLS with the new proxy-server")
		Expect(handshake(get(Default, &corev1.Secret{}, ns, "proxy-server"), get(Default, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"],
			addonClient, caPEM)).To(Succeed())

		By("the proxy-servers take that proxy-client, by its fingerprint, as the operator's")
		sum := sha256.Sum256(leafOfSecret(addonClient).Raw)
		Eventually(func(g Gomega) {
			d := get(g, &appsv1.Deployment{}, ns, mpc.Name)
			g.Expect(d.Spec.Selector.MatchLabels).To(Equal(render.ServerPodLabels(mpc)), "the add-on's Deployment was replaced")
			g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(mpc.Spec.ProxyServer.Image))
			g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--" + contract.AdoptedProxyClientFlag + "=" + hex.EncodeToString(sum[:])))
		}, timeout, interval).Should(Succeed())

		By("the add-on's proxy-server pods are deleted at once, the operator's stay")
		Eventually(func(g Gomega) {
			pod := &corev1.Pod{}
			err := k8s.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "addon-proxy-server"}, pod)
			if apierrors.IsNotFound(err) {
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.DeletionGracePeriodSeconds).To(HaveValue(BeNumerically("<=", 1)), "a second's grace, not the pod's 30 s")
		}, timeout, interval).Should(Succeed())
		Expect(get(Default, &corev1.Pod{}, ns, "operator-proxy-server").DeletionTimestamp).To(BeNil())

		By("the add-on's leftovers are gone")
		for _, o := range []client.Object{
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: tokenReview}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: tokenReview}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy-service-proxy-server-cert"}},
		} {
			expectGone(o)
		}
		Expect(apierrors.IsNotFound(k8s.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "cluster-proxy-service-proxy-server-cert"}, &corev1.Secret{}))).To(BeTrue())
	})
})

// addonCA is a CA as the existing add-on generates it: RSA 2048, its common name.
func addonCA() (*x509.Certificate, *rsa.PrivateKey) {
	key := must(rsa.GenerateKey(rand.Reader, 2048))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "open-cluster-management:cluster-proxy"},
		NotBefore: fakeClock.Now().Add(-time.Hour), NotAfter: fakeClock.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, BasicConstraintsValid: true, IsCA: true,
	}
	cert := must(x509.ParseCertificate(must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))))
	return cert, key
}

// addonLeaf is a kubernetes.io/tls Secret named name with a certificate of ca for usage, as the add-on rotates them:
// no URI SAN.
func addonLeaf(ca *x509.Certificate, caKey *rsa.PrivateKey, name string, usage x509.ExtKeyUsage) *corev1.Secret {
	key := must(rsa.GenerateKey(rand.Reader, 2048))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(fakeClock.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: fakeClock.Now().Add(-time.Hour), NotAfter: fakeClock.Now().Add(180 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost", name},
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey))
	keyDER := must(x509.MarshalPKCS8PrivateKey(key))
	return &corev1.Secret{Type: corev1.SecretTypeTLS, ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string][]byte{"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}}
}

func leafOfSecret(s *corev1.Secret) *x509.Certificate {
	block, _ := pem.Decode(s.Data["tls.crt"])
	return must(x509.ParseCertificate(block.Bytes))
}

// addonAgentWork is the add-on's agent ManifestWork for the cluster of mca: its name and owner, no label of the
// operator's, the add-on's agent Deployment.
func addonAgentWork(mca *addonv1alpha1.ManagedClusterAddOn) *workv1.ManifestWork {
	agent := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "open-cluster-management-cluster-proxy", Name: "cluster-proxy-proxy-agent"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"open-cluster-management.io/addon": "cluster-proxy"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"open-cluster-management.io/addon": "cluster-proxy"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy-agent",
					Image: "quay.io/open-cluster-management/cluster-proxy:v0.11.0", Command: []string{"/proxy-agent"}}}},
			},
		},
	}
	return &workv1.ManifestWork{
		ObjectMeta: metav1.ObjectMeta{Namespace: mca.Namespace, Name: agentWork,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "addon.open-cluster-management.io/v1beta1", Kind: "ManagedClusterAddOn",
				Name: mca.Name, UID: mca.UID, Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}},
		Spec: workv1.ManifestWorkSpec{Workload: workv1.ManifestsTemplate{Manifests: []workv1.Manifest{
			{RawExtension: runtime.RawExtension{Raw: must(json.Marshal(agent))}}}}},
	}
}

// serverPod is a proxy-server pod with labels, scheduled to a node (so that its deletion waits for its grace period).
func serverPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "hub", Containers: []corev1.Container{{Name: "proxy-server", Image: "proxy-server"}}}}
}

// addonProxyServer is the add-on's proxy-server Deployment: its name, its selector.
func addonProxyServer(ns, name string) *appsv1.Deployment {
	labels := map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy-server",
					Image: "quay.io/open-cluster-management/cluster-proxy:v0.11.0", Command: []string{"/proxy-server"}}}},
			},
		},
	}
}
