//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// clusterProfiles: OCM's ClusterProfiles carry each cluster's access provider, and a consumer of sig-multicluster's
// library reaches every cluster with it.
func clusterProfiles() {
	Context("ClusterProfile", func() {
		It("lets a ClusterProfile consumer list every cluster's namespaces through the tunnel (cluster-inventory-api/pkg/access)", func() {
			// As Kueue's MultiKueue or multicluster-runtime would: a provider file naming this product's credential plugin,
			// and a rest.Config per ClusterProfile that OCM keeps. The hub user's token is mapped on each managed cluster.
			tokenFile := filepath.Join(workDir, "hub-user.token")
			Expect(os.WriteFile(tokenFile, []byte(hubUserToken()), 0o600)).To(Succeed())
			providerFile := filepath.Join(workDir, "clusterprofile-providers.json")
			Expect(os.WriteFile(providerFile, []byte(fmt.Sprintf(`{"providers":[{"name":"open-cluster-management","execConfig":{
				"apiVersion":"client.authentication.k8s.io/v1","command":%q,"args":["credential","--token-file",%q],
				"provideClusterInfo":true}}]}`, binary("kubectl-cluster_proxy"), tokenFile)), 0o600)).To(Succeed())
			providers := must(access.NewFromFile(providerFile))
			resolve := must(clusterproxy.ParseResolve(sys.Resolve()))
			for _, cluster := range clusterNames() {
				By(cluster)
				viewerToken(cluster) // the RBAC of the mapped hub user
				profile := &cpv1alpha1.ClusterProfile{}
				Eventually(func(g Gomega) {
					g.Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Namespace: localsystem.ClusterProfileNamespace, Name: cluster}, profile)).To(Succeed())
					g.Expect(profile.Status.AccessProviders).To(ContainElement(HaveField("Name", "open-cluster-management")))
				}).Should(Succeed(), "OCM keeps a ClusterProfile of %s and the operator publishes its provider", cluster)
				cfg := must(providers.BuildConfigFromCP(profile))
				Expect(cfg.Host).To(Equal(fmt.Sprintf("https://%s.%s.svc:%d/%s", proxyv1alpha1.UserServerServiceName,
					localsystem.Namespace, proxyv1alpha1.UserServerPort, cluster)))
				// This program runs beside the hub cluster, not in it: the Service's name goes to its node port, as in a
				// pod it would go to the Service. TLS still checks the certificate against that name.
				cfg.Dial = func(c context.Context, network, addr string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(c, network, resolve.Address(addr))
				}
				var names []string
				Eventually(func(g Gomega) {
					list, err := must(kubernetes.NewForConfig(cfg)).CoreV1().Namespaces().List(ctx(), metav1.ListOptions{})
					g.Expect(err).NotTo(HaveOccurred())
					names = names[:0]
					for _, ns := range list.Items {
						names = append(names, ns.Name)
					}
					g.Expect(names).To(ContainElement("open-cluster-management-agent"), "the managed cluster's namespaces, not the hub's")
				}).Should(Succeed())
			}
		})

		It("lets a ClusterProfile consumer reach a cluster through the hub provider with its own hub identity, under the hub's RBAC per cluster", func() {
			// No token of ours and no user-server: the consumer's own hub ServiceAccount token, handed over by the
			// credential plugin, and a hub RBAC rule naming one cluster.
			tokenFile := filepath.Join(workDir, "profile-consumer.token")
			Expect(os.WriteFile(tokenFile, []byte(hubServiceAccountToken("profile-consumer", []string{localsystem.ProxiedCluster})), 0o600)).To(Succeed())
			providerFile := filepath.Join(workDir, "clusterprofile-hub-providers.json")
			Expect(os.WriteFile(providerFile, []byte(fmt.Sprintf(`{"providers":[{"name":"open-cluster-management-hub","execConfig":{
				"apiVersion":"client.authentication.k8s.io/v1","command":%q,"args":["credential","--token-file",%q]}}]}`,
				binary("kubectl-cluster_proxy"), tokenFile)), 0o600)).To(Succeed())
			providers := must(access.NewFromFile(providerFile))
			hub := must(url.Parse(sys.Hub.APIServer()))
			for _, cluster := range clusterNames() {
				By(cluster)
				profile := &cpv1alpha1.ClusterProfile{}
				Eventually(func(g Gomega) {
					g.Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Namespace: localsystem.ClusterProfileNamespace, Name: cluster}, profile)).To(Succeed())
					g.Expect(profile.Status.AccessProviders).To(ContainElement(HaveField("Name", "open-cluster-management-hub")))
				}).Should(Succeed())
				cfg := must(providers.BuildConfigFromCP(profile))
				Expect(cfg.Host).To(Equal("https://kubernetes.default.svc" + clusterproxy.ViaHubPath(cluster)))
				// Beside the hub, not in it: the hub's in-cluster name goes to its kube-apiserver, whose certificate names it.
				cfg.Dial = func(c context.Context, network, addr string) (net.Conn, error) {
					if addr == "kubernetes.default.svc:443" {
						addr = hub.Host
					}
					return (&net.Dialer{}).DialContext(c, network, addr)
				}
				// Who the cluster sees: any authenticated user may ask.
				review, err := must(kubernetes.NewForConfig(cfg)).AuthenticationV1().SelfSubjectReviews().Create(ctx(),
					&authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
				if cluster == localsystem.ProxiedCluster {
					Expect(err).NotTo(HaveOccurred())
					Expect(review.Status.UserInfo.Username).To(Equal("cluster:hub:system:serviceaccount:team:profile-consumer"),
						"the consumer's own hub identity, as impersonation")
				} else {
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the hub's RBAC names %s only: %v", localsystem.ProxiedCluster, err)
					Expect(err.Error()).To(ContainSubstring("clusters/proxy"), "refused by the hub, not the cluster")
				}
			}
		})
	})
}
