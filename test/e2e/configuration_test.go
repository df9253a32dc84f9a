//go:build e2e

package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// configurationAndUpgrades: what users change after the install: the PortForward entrypoint, a registry mirror,
// NetworkPolicies, and a helm upgrade of the manager alone.
func configurationAndUpgrades() {
	Context("configuration and upgrades", func() {
		// The CRD's default entrypoint, and the chart's without an address: the managed clusters need no route to the
		// proxy-servers, only to the hub's kube-apiserver (cluster1 through its forward proxy).
		It("connects every agent to every replica by port-forward through the hub kube-apiserver with the PortForward entrypoint", func() {
			upgrade := func(entrypointType string) {
				must(sys.Helm(ctx(), "upgrade", "-n", localsystem.Namespace, "cluster-proxy", filepath.Join(repo.Root(), "charts", "cluster-proxy"),
					"--reuse-values", "--set", "proxyServer.entrypointType="+entrypointType))
			}
			upgrade("PortForward")
			DeferCleanup(func() {
				upgrade("")
				expectAgentsRolledOutWith("--proxy-server-host=" + localsystem.EntrypointHost)
				expectEveryClusterAvailable()
			})
			// Nothing listens on 127.0.0.1 in an agent pod: these agents reach the replicas by port-forward.
			expectAgentsRolledOutWith("--proxy-server-host=127.0.0.1", "--port-forward-namespace="+localsystem.Namespace)
			expectEveryClusterAvailable()
			for _, cluster := range clusterNames() {
				rc := must(kubernetes.NewForConfig(userRESTConfig(userKubeconfig(cluster, "viewer", viewerToken(cluster))))).Discovery().RESTClient()
				for i := range 20 {
					_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx())
					Expect(err).NotTo(HaveOccurred(), "%s request %d", cluster, i+1)
				}
			}

			// The attack: a managed cluster's own hub credentials (its agent's, as the cluster holds them) may
			// port-forward to every replica, and RBAC cannot limit port-forward to a port. Port-forward connects to
			// the pod's loopback: the agent port answers there, and so do the other ports, which each ask for a
			// credential an agent does not hold; the health port, whose /metrics answers whoever reaches it, binds
			// the pod's IP alone.
			agentCfg := agentHubConfig(localsystem.ProxiedCluster)
			live := &proxyv1alpha1.ManagedProxyConfiguration{}
			Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), live)).To(Succeed())
			ports := contract.PortsOf(live)
			for _, pod := range proxyServerPods(Default) {
				By("port-forward to " + pod + " with " + localsystem.ProxiedCluster + "'s agent credentials")
				local, stop, done, err := openPortForwardIn(agentCfg, localsystem.Namespace, pod, false, int(ports.AgentServer))
				Expect(err).NotTo(HaveOccurred(), "the agent's port-forward to a replica: the PortForward entrypoint's")
				conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", itoa(local)),
					&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only that the agent port answers TLS there
				Expect(err).NotTo(HaveOccurred(), "the agent port answers on the pod's loopback")
				Expect(conn.ConnectionState().PeerCertificates).NotTo(BeEmpty())
				_ = conn.Close()
				close(stop)
				Eventually(done).WithTimeout(30 * time.Second).Should(Receive())

				local, stop, done, err = openPortForwardIn(agentCfg, localsystem.Namespace, pod, false, int(ports.HealthServer))
				Expect(err).NotTo(HaveOccurred(), "RBAC names the pods, not their ports: the hub admits the port-forward")
				resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + net.JoinHostPort("127.0.0.1", itoa(local)) + "/metrics")
				if err == nil {
					_ = resp.Body.Close()
				}
				Expect(err).To(HaveOccurred(), "nothing of the health port listens on the pod's loopback (got %v)", resp)
				select {
				case err := <-done: // client-go ends a forwarding whose pod side could not connect
					GinkgoWriter.Println("the port-forward to the health port ended:", err)
				default:
					close(stop)
					Eventually(done).WithTimeout(30 * time.Second).Should(Receive())
				}
			}
		})

		It("rolls an agent to the mirror its cluster's image-registries annotation names, and back", func() {
			target := sys.Managed[len(sys.Managed)-1]
			cluster := target.Name()
			agent := func(g Gomega) *appsv1.Deployment { return agentDeployment(g, cluster) }
			original := agent(Default).Spec.Template.Spec.Containers[0].Image
			source := original[:strings.LastIndex(original, "/")]
			mirrored := "mirror.example" + original[strings.Index(original, "/"):]
			// The mirror's copy of the image, as a registry mirror would serve it to the node (pull policy IfNotPresent).
			Expect(target.TagImage(ctx(), original, mirrored)).To(Succeed())
			annotate := func(value *string) {
				Eventually(func(g Gomega) {
					mc := &clusterv1.ManagedCluster{}
					g.Expect(sys.HubClient.Get(ctx(), types("", cluster), mc)).To(Succeed())
					if value == nil {
						delete(mc.Annotations, clusterv1.ClusterImageRegistriesAnnotationKey)
					} else {
						metav1.SetMetaDataAnnotation(&mc.ObjectMeta, clusterv1.ClusterImageRegistriesAnnotationKey, *value)
					}
					g.Expect(sys.HubClient.Update(ctx(), mc)).To(Succeed())
				}).Should(Succeed())
			}
			expectAgent := func(image string) {
				Eventually(func(g Gomega) {
					d := agent(g)
					g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
					g.Expect(deploymentRolledOut(d)).To(BeTrue(), "every agent pod runs the new template: %+v", d.Status)
					cps := &proxyv1alpha1.ClusterProxyStatus{}
					g.Expect(sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), cps)).To(Succeed())
					g.Expect(cps.Status.AgentImage).To(Equal(image))
					g.Expect(meta.IsStatusConditionTrue(cps.Status.Conditions, proxyv1alpha1.ConditionAvailable)).To(BeTrue())
					g.Expect(grpcHealthz(cluster)).To(Equal("ok"))
				}).WithTimeout(3 * time.Minute).Should(Succeed())
			}
			DeferCleanup(func() {
				annotate(nil)
				expectAgent(original)
			})

			annotate(ptr.To(fmt.Sprintf(`{"registries":[{"source":%q,"mirror":%q}]}`, source, "mirror.example"+source[strings.Index(source, "/"):])))
			expectAgent(mirrored)
		})

		It("adds NetworkPolicies that select every component's pods with helm's networkPolicies.enabled, and removes them", func() {
			// The nodes' bridge CNI does not enforce NetworkPolicies: this proves they are accepted, applied on every
			// cluster (the agent's by OCM's work agent) and select the running pods, and that nothing else changes.
			chart := filepath.Join(repo.Root(), "charts", "cluster-proxy")
			servers := podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)
			selected := func(g Gomega, c client.Client, namespace, name string, want []string) {
				policy := &networkingv1.NetworkPolicy{}
				g.Expect(c.Get(ctx(), types(namespace, name), policy)).To(Succeed())
				g.Expect(want).NotTo(BeEmpty())
				g.Expect(podUIDs(c, namespace, policy.Spec.PodSelector.MatchLabels)).To(ConsistOf(want), "NetworkPolicy %s/%s selects the pods", namespace, name)
			}
			must(sys.Helm(ctx(), "upgrade", "-n", localsystem.Namespace, "cluster-proxy", chart, "--reuse-values", "--set", "networkPolicies.enabled=true"))
			Eventually(func(g Gomega) {
				selected(g, sys.HubClient, localsystem.Namespace, "cluster-proxy-addon-manager", podUIDs(sys.HubClient, localsystem.Namespace, managerLabels))
				selected(g, sys.HubClient, localsystem.Namespace, proxyv1alpha1.DefaultConfigurationName, servers)
				for _, cluster := range clusterNames() {
					ns := agentNamespace(g, cluster)
					selected(g, managedClient(cluster), ns, render.AgentNetworkPolicyName, podUIDs(managedClient(cluster), ns, agentLabels))
				}
			}).Should(Succeed())
			for _, cluster := range clusterNames() {
				Expect(grpcHealthz(cluster)).To(Equal("ok"), cluster)
			}
			Expect(podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)).To(ConsistOf(servers), "the proxy-servers did not roll")

			must(sys.Helm(ctx(), "upgrade", "-n", localsystem.Namespace, "cluster-proxy", chart, "--reuse-values", "--set", "networkPolicies.enabled=false"))
			Eventually(func(g Gomega) {
				policies := &networkingv1.NetworkPolicyList{}
				g.Expect(sys.HubClient.List(ctx(), policies, client.InNamespace(localsystem.Namespace))).To(Succeed())
				g.Expect(policies.Items).To(BeEmpty())
				for _, cluster := range clusterNames() {
					g.Expect(managedClient(cluster).List(ctx(), policies, client.InNamespace(agentNamespace(g, cluster)))).To(Succeed())
					g.Expect(policies.Items).To(BeEmpty(), cluster)
				}
			}).Should(Succeed())
		})

		It("rolls only the manager on a helm upgrade that changes only the manager's flags, and hands its leadership over within 3 s", func() {
			manager := podUIDs(sys.HubClient, localsystem.Namespace, managerLabels)
			servers := podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)
			agents := agentPods(Default)
			leases := watchLeaderLease()
			must(sys.Helm(ctx(), "upgrade", "-n", localsystem.Namespace, "cluster-proxy", filepath.Join(repo.Root(), "charts", "cluster-proxy"),
				"--reuse-values", "--set", "manager.extraArgs={--tunnel-health-interval=4s}"))
			Eventually(func(g Gomega) {
				d := &appsv1.Deployment{}
				g.Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, "cluster-proxy-addon-manager"), d)).To(Succeed())
				g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--tunnel-health-interval=4s"))
				g.Expect(deploymentRolledOut(d)).To(BeTrue())
				g.Expect(podUIDs(sys.HubClient, localsystem.Namespace, managerLabels)).To(HaveLen(1))
			}).Should(Succeed())
			Expect(podUIDs(sys.HubClient, localsystem.Namespace, managerLabels)).NotTo(ContainElements(manager), "a new manager pod")
			// The old manager gives the Lease up as it exits, its controllers stopped; the new one, already running,
			// takes it on its next try. What changes meanwhile, which no manager sees as it happens, the new leader puts
			// right: here, deleted objects the manager keeps.
			Eventually(leases.released).WithPolling(20 * time.Millisecond).Should(BeTrue())
			profile := &corev1.ConfigMap{}
			profileKey := types(localsystem.Namespace, render.TLSProfileConfigMapName(&proxyv1alpha1.ManagedProxyConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}))
			Expect(sys.HubClient.Get(ctx(), profileKey, profile)).To(Succeed())
			Expect(sys.HubClient.Delete(ctx(), profile)).To(Succeed())
			for _, cluster := range clusterNames() {
				Expect(sys.HubClient.Delete(ctx(), &proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{
					Namespace: cluster, Name: proxyv1alpha1.AddonName}})).To(Succeed())
			}
			deleted := time.Now()
			handover, acquired := leases.handover()
			AddReportEntry("manager leadership handover (the old manager's release to the new one's acquisition)", handover.String())
			Expect(handover).To(BeNumerically("<=", 3*time.Second))
			// The pods run on this machine, so their clock is this one's (the acquisition is stamped to the microsecond).
			AddReportEntry("objects deleted before the new leader acquired the Lease", fmt.Sprintf("%t (%s before)", deleted.Before(acquired),
				acquired.Sub(deleted).Round(time.Millisecond)))
			Eventually(func(g Gomega) {
				back := &corev1.ConfigMap{}
				g.Expect(sys.HubClient.Get(ctx(), profileKey, back)).To(Succeed())
				g.Expect(back.Data).To(Equal(profile.Data))
				for _, cluster := range clusterNames() {
					g.Expect(sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), &proxyv1alpha1.ClusterProxyStatus{})).To(Succeed())
				}
			}).Should(Succeed(), "the new leader puts back what was deleted during the handover")
			expectEveryClusterAvailable()
			Consistently(func(g Gomega) {
				g.Expect(podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)).To(ConsistOf(servers), "the proxy-server pods stay")
				for _, cluster := range clusterNames() {
					g.Expect(agentPods(g)[cluster]).To(ConsistOf(agents[cluster]), "%s's agent pods stay", cluster)
				}
			}, "10s", "1s").Should(Succeed())
		})
	})
}
