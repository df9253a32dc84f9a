//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

// uninstall: removing it: an add-on, the configuration, then the helm release.
func uninstall() {
	Context("uninstall", func() {
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
			shell("kubectl delete secret -n open-cluster-management-addon cluster-proxy-signer")
			Eventually(func(g Gomega) {
				g.Expect(leftAfterUninstall(g)).To(BeEmpty())
			}).Should(Succeed())
		})
	})
}
