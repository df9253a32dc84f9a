//go:build e2e

package e2e

import (
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// highAvailability: three proxy-server replicas: every agent on each, no failed request through a deleted or killed
// replica, a rolled Deployment or a replaced agent.
func highAvailability() {
	Context("high availability", func() {
		Context("high availability", func() {
			It("connects every agent of every cluster to each of the 3 proxy-server replicas, as AgentConnected reports", func() {
				expectAgentsOnEveryReplica(3)
				Eventually(func(g Gomega) {
					for _, cluster := range clusterNames() {
						cps := &proxyv1alpha1.ClusterProxyStatus{}
						g.Expect(sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), cps)).To(Succeed())
						c := meta.FindStatusCondition(cps.Status.Conditions, proxyv1alpha1.ConditionAgentConnected)
						g.Expect(c).NotTo(BeNil())
						g.Expect(c.Message).To(Equal("3 agent(s) of the cluster connected to each of 3 proxy-server(s)"), cluster)
						g.Expect(cps.Status.ConnectedAgents).To(BeEquivalentTo(3))
					}
				}).Should(Succeed())
			})

			It("answers 200 requests in a row through the user-server Service", func() {
				for _, cluster := range clusterNames() {
					rc := must(kubernetes.NewForConfig(userRESTConfig(userKubeconfig(cluster, "viewer", viewerToken(cluster))))).Discovery().RESTClient()
					for i := range 200 {
						_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx())
						Expect(err).NotTo(HaveOccurred(), "%s request %d", cluster, i+1)
					}
				}
			})

			It("serves through the deletion of a proxy-server pod with no failed request, and the agents reach its replacement by themselves", func() {
				loops := startHALoops()
				victim := proxyServerPods(Default)[0]
				deleted := time.Now()
				shell("kubectl delete pod -n " + localsystem.Namespace + " " + victim)
				expectAgentsOnEveryReplica(3)
				AddReportEntry("every agent on the replacement proxy-server", time.Since(deleted).Round(10*time.Millisecond).String())
				// The deleted replica keeps accepting for its lame duck, and the replacement turns Ready only once it
				// holds every cluster.
				Expect(loops.stop("while a proxy-server pod was deleted")).To(BeEmpty())
			})

			It("keeps serving through kubectl drain of the hub's node with no failed request: the PodDisruptionBudget lets one proxy-server go at a time", func() {
				Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, proxyv1alpha1.DefaultConfigurationName), &policyv1.PodDisruptionBudget{})).To(Succeed())
				node := strings.TrimPrefix(strings.TrimSpace(shell("kubectl get nodes -o name")), "node/")
				loops := startHALoops()
				DeferCleanup(func() { shell("kubectl uncordon " + node) })
				// The proxy-servers alone: the hub has one node, where the manager and OCM's controllers run one replica each.
				out, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "drain", node, "--pod-selector="+proxyv1alpha1.ComponentLabel+"="+proxyv1alpha1.ComponentProxyServer,
					"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=40s")
				// The first eviction's replacement cannot be scheduled on the cordoned node, so the budget refuses every
				// further eviction until the drain gives up: two replicas serve throughout.
				Expect(err).To(HaveOccurred(), "the budget stops the drain: %s", out)
				Expect(err.Error()).To(ContainSubstring("disruption budget"))
				Eventually(func(g Gomega) {
					pods := &corev1.PodList{}
					g.Expect(sys.HubClient.List(ctx(), pods, client.InNamespace(localsystem.Namespace), client.MatchingLabels(proxyServerLabels))).To(Succeed())
					ready := 0
					for _, p := range pods.Items {
						for _, c := range p.Status.Conditions {
							if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
								ready++
							}
						}
					}
					g.Expect(ready).To(Equal(2), "one replica evicted, its replacement pending on the cordoned node")
				}).Should(Succeed())
				shell("kubectl uncordon " + node)
				expectAgentsOnEveryReplica(3)
				Expect(loops.stop("while kubectl drain evicted proxy-servers")).To(BeEmpty())
			})

			It("serves through a SIGKILL of a proxy-server process with no failed request", func() {
				loops := startHALoops()
				pod := &corev1.Pod{}
				Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, proxyServerPods(Default)[0]), pod)).To(Succeed())
				restarts := pod.Status.ContainerStatuses[0].RestartCount
				Expect(sys.Hub.KillContainer(ctx(), pod.Status.ContainerStatuses[0].ContainerID, "SIGKILL")).To(Succeed())
				Eventually(func(g Gomega) {
					g.Expect(sys.HubClient.Get(ctx(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
					g.Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeNumerically(">", restarts))
					g.Expect(pod.Status.ContainerStatuses[0].Ready).To(BeTrue())
				}).Should(Succeed())
				expectAgentsOnEveryReplica(3)
				failed := loops.stop("while a proxy-server process was killed")
				// pkg/clusterproxy tries a refused connection again; kubectl's client-go and curl do not. Until kubelet
				// and kube-proxy notice the dead process, the Service can send a new connection to it, which is refused.
				Expect(failedThrough(failed, "gRPC frontend")).To(BeEmpty())
				// The hub's aggregator answers 503 for the request its connection to the killed replica carried, and for a new
				// connection the Service still sent there.
				for name, failures := range failed {
					want := "connection refused"
					if strings.Contains(name, "hub's aggregated API") {
						want = "the server is currently unable to handle the request"
					}
					for _, f := range failures {
						Expect(f.Err).To(ContainSubstring(want), name)
					}
				}
			})

			// The Deployment replaces one replica at a time, a new one after an old one has gone (maxSurge 0): the old
			// one's agents look for a server at once and reach the new one through the entrypoint, which publishes it
			// before it is Ready; it turns Ready once it holds every cluster its Ready peers hold.
			It("rolls every proxy-server replica on a helm upgrade that changes their arguments with no failed request, each new one Ready only once it holds every cluster", func() {
				loops := startHALoops()
				servers := podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)
				must(sys.Helm(ctx(), "upgrade", "-n", localsystem.Namespace, "cluster-proxy", filepath.Join(repo.Root(), "charts", "cluster-proxy"),
					"--reuse-values", "--set", "proxyServer.additionalArgs={--v=1}"))
				Eventually(func(g Gomega) {
					now := podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)
					g.Expect(now).To(HaveLen(3))
					g.Expect(now).NotTo(ContainElements(servers[0]), "every replica is new")
					g.Expect(now).NotTo(ContainElements(servers[1]))
					g.Expect(now).NotTo(ContainElements(servers[2]))
				}).WithTimeout(5 * time.Minute).Should(Succeed())
				expectAgentsOnEveryReplica(3)
				Expect(loops.stop("while helm upgrade rolled every proxy-server")).To(BeEmpty())
				for _, pod := range proxyServerPods(Default) {
					Expect(shell("kubectl logs -n "+localsystem.Namespace+" "+pod)).To(
						ContainSubstring("Ready: this replica holds an agent of every cluster its peer holds"), pod)
				}
			})

			It("brings a deleted agent pod back, connected to every replica, with no failed request", func() {
				loops := startHALoops()
				cluster := localsystem.DigitCluster
				namespace := agentNamespace(Default, cluster)
				mc := managedClient(cluster)
				victim := podUIDs(mc, namespace, agentLabels)[0]
				pods := &corev1.PodList{}
				Expect(mc.List(ctx(), pods, client.InNamespace(namespace), client.MatchingLabels(agentLabels))).To(Succeed())
				deleted := time.Now()
				for _, p := range pods.Items {
					if string(p.UID) == victim {
						Expect(mc.Delete(ctx(), &p)).To(Succeed())
					}
				}
				Eventually(func(g Gomega) {
					g.Expect(podUIDs(mc, namespace, agentLabels)).NotTo(ContainElement(victim))
				}).Should(Succeed())
				expectAgentsOnEveryReplica(3)
				AddReportEntry("deleted agent pod replaced and connected to every replica", time.Since(deleted).Round(10*time.Millisecond).String())
				Expect(loops.stop("while an agent pod was deleted")).To(BeEmpty())
			})
		})
	})
}
