//go:build e2e

package e2e

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

// uninstall: removing it: an add-on, the configuration, then the helm release; an install again with the CA that
// outlived it; and the last uninstall.
func uninstall() {
	Context("uninstall", Ordered, func() {
		// What a hub program holds from before the uninstall: the proxy-client pair and the CA bundle, as files.
		var oldCert, oldKey, oldCA string
		var oldFingerprint string
		BeforeAll(func() {
			dir := filepath.Join(workDir, "hub-client-before-uninstall")
			var err error
			oldCert, oldKey, oldCA, err = sys.HubClientFiles(ctx(), dir)
			Expect(err).NotTo(HaveOccurred())
			oldFingerprint = certs.Fingerprint(currentCA())
		})

		It("removes the agent from a cluster and its status from the hub when its add-on is removed", func() {
			cluster := localsystem.DigitCluster
			namespace := agentNamespace(Default, cluster)
			Expect(namespace).NotTo(BeEmpty(), "the add-on reports where its agent is installed")
			deployment := types(namespace, render.AgentDeploymentName)
			mc := managedClient(cluster)
			Expect(mc.Get(ctx(), deployment, &appsv1.Deployment{})).To(Succeed(), "the agent Deployment is there before the removal")

			Expect(sys.HubClient.Delete(ctx(), &addonv1beta1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: proxyv1alpha1.AddonName}})).To(Succeed())
			Eventually(func(g Gomega) {
				err := mc.Get(ctx(), deployment, &appsv1.Deployment{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the agent Deployment is gone from the managed cluster: %v", err)
				g.Expect(podUIDs(mc, namespace, agentLabels)).To(BeEmpty(), "the agent pods are gone")
				err = sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), &proxyv1alpha1.ClusterProxyStatus{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the ClusterProxyStatus is gone: %v", err)
				err = sys.HubClient.Get(ctx(), types(cluster, render.AgentWorkName), &workv1.ManifestWork{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the agent ManifestWork is gone: %v", err)
			}).Should(Succeed())
		})

		It("cleans the hub when the ManagedProxyConfiguration is deleted", func() {
			Expect(sys.HubClient.Delete(ctx(), &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}})).To(Succeed())
			Eventually(func(g Gomega) {
				for _, name := range []string{"proxy-server-ca", "proxy-client", "proxy-server", "agent-server"} {
					err := sys.HubClient.Get(ctx(), types(localsystem.Namespace, name), &corev1.Secret{})
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", name, err)
				}
				err := sys.HubClient.Get(ctx(), types(localsystem.Namespace, "cluster-proxy"), &appsv1.Deployment{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the proxy-server Deployment: %v", err)
				g.Expect(podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)).To(BeEmpty(), "the proxy-server pods")
			}).Should(Succeed())
			Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, proxyv1alpha1.SignerSecretName), &corev1.Secret{})).To(Succeed(),
				"the CA every agent and hub client trusts outlives the configuration")
		})

		It("leaves nothing of the operator but its CRDs and the signer CA after helm uninstall", func() {
			must(sys.Helm(ctx(), "uninstall", "-n", localsystem.Namespace, "cluster-proxy", "--wait"))
			Eventually(func(g Gomega) {
				g.Expect(leftAfterUninstall(g)).To(ConsistOf(localsystem.Namespace+": secret/"+proxyv1alpha1.SignerSecretName),
					"the signer CA stays for the next install (docs/backup-restore.md)")
			}).Should(Succeed())
			crds := shell("kubectl get crds -o name")
			for _, crd := range []string{"managedproxyconfigurations", "clusterproxystatuses", "proxycertificates"} {
				Expect(crds).To(ContainSubstring(crd+"."+proxyv1alpha1.GroupVersion.Group), "Helm keeps CRDs by rule")
			}
		})

		It("installs again with the CA that stayed: every agent reconnects under it, and a hub program holding the old CA bundle and proxy-client keeps working", func() {
			Expect(sys.Reinstall(ctx())).To(Succeed())
			Eventually(func(g Gomega) {
				mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
				g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc)).To(Succeed())
				g.Expect(mpc.Status.Signer).NotTo(BeNil())
				g.Expect(mpc.Status.Signer.CAFingerprint).To(Equal(oldFingerprint), "the new configuration signs with the CA that stayed")
				g.Expect(mpc.Status.Signer.BundleFingerprints).To(Equal([]string{oldFingerprint}), "and publishes it alone")
			}).Should(Succeed())
			roots := x509.NewCertPool()
			Expect(roots.AppendCertsFromPEM(must(os.ReadFile(oldCA)))).To(BeTrue())
			newCSRs := 0
			for _, cluster := range clusterNames() {
				Eventually(func(g Gomega) {
					agent := agentCertificate(g, cluster)
					_, err := agent.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
					g.Expect(err).NotTo(HaveOccurred(), "%s's agent certificate chains to the CA of the bundle a hub program held before", cluster)
				}).Should(Succeed())
				Eventually(func() error {
					_, err := grpcHealthzAs(oldCert, oldKey, oldCA, cluster)
					return err
				}).Should(Succeed(), "the proxy-client and CA bundle read before the uninstall reach %s", cluster)
				csrs := &certificatesv1.CertificateSigningRequestList{}
				Expect(sys.HubClient.List(ctx(), csrs, client.MatchingLabels{csrreview.ClusterNameLabel: cluster,
					csrreview.AddonNameLabel: proxyv1alpha1.AddonName})).To(Succeed())
				newCSRs += len(csrs.Items)
			}
			// The agents were removed with their namespace, so each asks for a certificate again; every one is signed by
			// the same CA, so none asks again because of a new CA, and no hub program needs new files.
			GinkgoWriter.Printf("after the install again: CA %s kept; %d add-on CSRs on the hub; the hub program's old files reach every cluster\n",
				oldFingerprint, newCSRs)
		})

		It("leaves nothing of the operator after the last helm uninstall and the signer CA deleted", func() {
			must(sys.Helm(ctx(), "uninstall", "-n", localsystem.Namespace, "cluster-proxy", "--wait"))
			shell("kubectl delete secret -n open-cluster-management-addon cluster-proxy-signer")
			Eventually(func(g Gomega) {
				g.Expect(leftAfterUninstall(g)).To(BeEmpty())
			}).WithTimeout(4 * time.Minute).Should(Succeed())
		})
	})
}
