//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// install: the operator as helm installs it: every component Ready, every cluster joined through OCM with its tunnel
// up, least-privilege RBAC, memory, and the status a user reads.
func install() {
	Context("install", func() {
		It("runs the proxy-server 3/3 and the manager 1/1 on the hub and an agent on every cluster, all Ready", func() {
			ready := func(c client.Client, ns, name string, replicas int32) {
				Eventually(func(g Gomega) {
					var d appsv1.Deployment
					g.Expect(c.Get(ctx(), types(ns, name), &d)).To(Succeed())
					g.Expect(d.Status.ReadyReplicas).To(Equal(replicas), "%s/%s ready replicas", ns, name)
				}).Should(Succeed())
			}
			ready(sys.HubClient, localsystem.Namespace, "cluster-proxy", 3)
			ready(sys.HubClient, localsystem.Namespace, "cluster-proxy-addon-manager", 1)
			for _, cluster := range clusterNames() {
				// cluster1's AddOnDeploymentConfig brings its own install namespace (the ADC's default): the status says where.
				var cps proxyv1alpha1.ClusterProxyStatus
				Expect(sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), &cps)).To(Succeed())
				Expect(cps.Status.AgentNamespace).NotTo(BeEmpty())
				ready(managedClient(cluster), cps.Status.AgentNamespace, render.AgentDeploymentName, 3)
			}
			GinkgoWriter.Println(shell("kubectl get deploy -n " + localsystem.Namespace))
		})

		It("joins every cluster through OCM and brings every tunnel up with certificates from klusterlet CSRs", func() {
			states := must(sys.States(ctx()))
			Expect(states).To(HaveLen(2))
			for _, st := range states {
				Expect(st.Available).To(BeTrue(), "%s: %s", st.Name, st.Status)
				Expect(st.AddOnAvailable).To(Equal(metav1.ConditionTrue), st.Name)
			}
			csrs := &certificatesv1.CertificateSigningRequestList{}
			Expect(sys.HubClient.List(ctx(), csrs)).To(Succeed())
			for _, cluster := range clusterNames() {
				var signed *certificatesv1.CertificateSigningRequest
				for i := range csrs.Items {
					csr := &csrs.Items[i]
					if csr.Spec.SignerName == "open-cluster-management.io/proxy-agent-signer" &&
						csr.Labels["open-cluster-management.io/cluster-name"] == cluster && len(csr.Status.Certificate) > 0 {
						signed = csr
					}
				}
				Expect(signed).NotTo(BeNil(), "cluster %s has a signed agent CSR", cluster)
				Expect(signed.Spec.Username).To(HavePrefix("system:open-cluster-management:"+cluster+":"), "the klusterlet created it")
				chain := must(certs.ParseCertificates(signed.Status.Certificate))
				Expect(chain[0].Subject.CommonName).To(Equal(contract.AgentCommonNamePrefix + cluster))
			}
		})

		It("denies the manager nothing by RBAC", func() {
			logs := shell("kubectl logs -n " + localsystem.Namespace + " deploy/cluster-proxy-addon-manager")
			path := filepath.Join(workDir, "manager.log")
			Expect(os.WriteFile(path, []byte(logs), 0o600)).To(Succeed())
			Expect(testenv.CheckManagerRBAC(path)).To(Succeed())
		})

		It("aims the manager's garbage collector below its container's memory limit", func() {
			d := &appsv1.Deployment{}
			Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, "cluster-proxy-addon-manager"), d)).To(Succeed())
			limit := d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory()
			Expect(limit.IsZero()).To(BeFalse(), "the chart limits the manager's memory")
			// 90 % of the limit, as the manager reads it from its cgroup on a real node.
			want := uint64(float64(limit.Value()) * 0.9)
			logs := shell("kubectl logs -n " + localsystem.Namespace + " deploy/cluster-proxy-addon-manager")
			Expect(logs).To(MatchRegexp(`Go memory limit set below the container's.*"bytes":%d\b`, want))
		})

		It("answers the README's status commands on the hub", func() {
			out := shell("kubectl get managedproxyconfiguration cluster-proxy -o yaml")
			Expect(out).To(ContainSubstring("entrypoint: " + localsystem.EntrypointHost))
			Expect(out).To(MatchRegexp(`status: "True"\n\s+type: Ready\n`), "Ready=True:\n%s", out)
			out = shell("kubectl get clusterproxystatuses -A")
			Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(ContainElements("CLUSTER", "INSTALLED", "AVAILABLE", "PROBED", "HEALTH", "LATENCY"))
			for _, cluster := range clusterNames() {
				Expect(out).To(MatchRegexp(`(?m)^`+cluster+`\s+cluster-proxy\s+`+cluster+`\s+true\s+true\s+True\s+\S+`), out)
			}
			out = shell("kubectl get proxycertificates -A")
			Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(ContainElements("READY", "SECRET", "ISSUER"))
			for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert"} {
				Expect(out).To(MatchRegexp(`(?m)^`+localsystem.Namespace+`\s+`+name+`\s+True\s+`), out)
			}
			out = shell("kubectl get managedclusters,clusterproxystatuses -A")
			Expect(out).To(ContainSubstring("managedcluster.cluster.open-cluster-management.io/" + localsystem.ProxiedCluster))
		})

		It("speaks OCM v1.2's add-on API v1beta1, which kubectl and v1beta1 clients read and write", func() {
			logs := shell("kubectl logs -n " + localsystem.Namespace + " deploy/cluster-proxy-addon-manager")
			Expect(logs).To(MatchRegexp(`Speaking OCM's add-on API.*"version":"v1beta1"`), "the manager discovered v1beta1")
			out := shell("kubectl get managedclusteraddons.v1beta1.addon.open-cluster-management.io -A")
			for _, cluster := range clusterNames() {
				Expect(out).To(MatchRegexp(`(?m)^`+cluster+`\s+cluster-proxy\s+True\s+`), "Available through v1beta1:\n%s", out)
			}
			out = shell("kubectl get addondeploymentconfigs.v1beta1.addon.open-cluster-management.io -n " + localsystem.ProxiedCluster +
				" " + localsystem.ProxyConfigName + " -o jsonpath={.spec.proxyConfig.httpsProxy}")
			Expect(out).To(Equal(sys.Squid.TLSURL()))
			for _, cluster := range clusterNames() {
				mca := &addonv1beta1.ManagedClusterAddOn{}
				Expect(sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), mca)).To(Succeed())
				Expect(meta.IsStatusConditionTrue(mca.Status.Conditions, addonv1beta1.ManagedClusterAddOnConditionAvailable)).To(BeTrue(), cluster)
				Expect(mca.Status.Namespace).To(Equal(agentNamespace(Default, cluster)))
				var custom []string
				for _, r := range mca.Status.Registrations {
					if r.Type == addonv1beta1.CustomSigner {
						custom = append(custom, r.CustomSigner.SignerName)
					}
				}
				Expect(custom).To(ContainElement("open-cluster-management.io/proxy-agent-signer"),
					"the operator's registration, as v1beta1 shows it")
			}
		})

		It("shows every cluster healthy with a latency in kubectl-cluster_proxy health", func() {
			// The probe of a round may have gone through a replica the agents had not reached yet: the next round's counts.
			Eventually(func(g Gomega) {
				out, err := plugin("health")
				g.Expect(err).NotTo(HaveOccurred())
				lines := strings.Split(strings.TrimSpace(out), "\n")
				g.Expect(strings.Fields(lines[0])).To(Equal([]string{"CLUSTER", "NAME", "INSTALLED", "AVAILABLE", "PROBED", "HEALTH", "LATENCY"}))
				for _, cluster := range clusterNames() {
					g.Expect(out).To(MatchRegexp(`(?m)^`+cluster+`\s+True\s+True\s+True\s+\S+`), out)
				}
			}).Should(Succeed())
		})

		It("holds the whole system in at most 4 GiB of memory", func() {
			m := must(sys.Memory())
			AddReportEntry("memory of the three clusters (daemons and pods)", fmt.Sprintf("%d MiB, %d MiB resident", m.Usage>>20, m.RSS>>20))
			Expect(m.Usage).To(BeNumerically("<=", uint64(4)<<30))
		})
	})
}
