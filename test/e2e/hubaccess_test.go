//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// hubAccess is the hub's own API as the way in: the aggregated API the proxy-servers serve behind the hub
// kube-apiserver, with the hub's authentication, RBAC per cluster and audit log.
func hubAccess() {
	Context("the hub's aggregated API", func() {
		proxyPath := func(cluster, path string) string {
			return "/apis/" + gatewayGroup + "/v1alpha1/clusters/" + cluster + "/proxy" + path
		}

		It("lists the clusters and reaches each cluster's kube-apiserver with the hub admin's own kubeconfig", func() {
			Eventually(func(g Gomega) {
				out, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "clusters."+gatewayGroup)
				g.Expect(err).NotTo(HaveOccurred())
				for _, cluster := range clusterNames() {
					g.Expect(out).To(MatchRegexp(`(?m)^%s\s+true\s+true\s+`, cluster), "installed and available")
				}
			}).Should(Succeed())
			for _, cluster := range clusterNames() {
				out, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "--raw", proxyPath(cluster, "/api/v1/namespaces"))
				Expect(err).NotTo(HaveOccurred(), cluster)
				var list corev1.NamespaceList
				Expect(json.Unmarshal([]byte(out), &list)).To(Succeed())
				Expect(list.Items).To(ContainElement(HaveField("Name", "open-cluster-management-agent")), "%s, not the hub", cluster)
			}
		})

		It("gives kubectl every verb through a context on the hub server: get, watch, apply, exec and port-forward over both protocols", func() {
			for _, cluster := range clusterNames() {
				By(cluster)
				kc := viaHubKubeconfig(cluster, "admin", "")
				out, err := kubeclient.Kubectl(kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(Equal("kubernetes-admin"), "the hub admin, by name, as impersonation")
				out, err = kubeclient.Kubectl(kc, "get", "pods", "-A")
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(ContainSubstring("probe-"), "the cluster's pods")

				expectWatchSeesNewNamespace(cluster, kc)

				manifest := filepath.Join(workDir, "via-hub-configmap.yaml")
				Expect(os.WriteFile(manifest, []byte(fmt.Sprintf(
					"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: via-hub, namespace: %s}\ndata: {k: v}\n", workloadNamespace)), 0o600)).To(Succeed())
				_, err = kubeclient.Kubectl(kc, "apply", "--server-side", "-f", manifest)
				Expect(err).NotTo(HaveOccurred())
				cm := &corev1.ConfigMap{}
				Expect(managedClient(cluster).Get(ctx(), types(workloadNamespace, "via-hub"), cm)).To(Succeed())
				Expect(cm.Data).To(HaveKeyWithValue("k", "v"))

				for _, websockets := range []string{"true", "false"} {
					By(cluster + " over websocket: " + websockets)
					cmd := kubectl(kc, []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + websockets},
						"exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "through", "the", "hub")
					Expect(process.Output(cmd, "kubectl exec")).To(Equal("through the hub\n"))
					port := must(portForward(kc, []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=" + websockets}, workloadNamespace, "deploy/probe", 8080))
					Expect(forwardedHealthz(port)).To(Equal("ok\n"))
				}
			}
		})

		It("lets the hub's RBAC decide per cluster, refuses before anything reaches a cluster, and records it in the hub's audit log", func() {
			nobody := hubServiceAccountToken("nobody", nil)
			one := hubServiceAccountToken("one-cluster", []string{localsystem.ProxiedCluster})
			for _, cluster := range clusterNames() {
				_, err := kubeclient.Kubectl(viaHubKubeconfig(cluster, "nobody", nobody), "get", "namespaces")
				Expect(err).To(MatchError(ContainSubstring("Forbidden")), "%s: no RBAC on the hub", cluster)
			}
			kc := viaHubKubeconfig(localsystem.ProxiedCluster, "one-cluster", one)
			out, err := kubeclient.Kubectl(kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(Equal("cluster:hub:system:serviceaccount:team:one-cluster"))
			_, err = kubeclient.Kubectl(viaHubKubeconfig(localsystem.DigitCluster, "one-cluster", one), "get", "namespaces")
			Expect(err).To(MatchError(ContainSubstring("Forbidden")), "resourceNames names the other cluster only")

			Eventually(func(g Gomega) {
				audit := string(must(os.ReadFile(sys.Hub.AuditLog())))
				g.Expect(auditEntries(audit, "system:serviceaccount:team:one-cluster", localsystem.ProxiedCluster, 201)).NotTo(BeEmpty(),
					"the allowed request (a SelfSubjectReview is a create)")
				g.Expect(auditEntries(audit, "system:serviceaccount:team:one-cluster", localsystem.DigitCluster, 403)).NotTo(BeEmpty(),
					"the refused one")
				g.Expect(auditEntries(audit, "system:serviceaccount:team:nobody", localsystem.ProxiedCluster, 403)).NotTo(BeEmpty())
			}).Should(Succeed())
		})
	})
}

// auditEntries are the hub audit events of user on clusters/proxy of cluster that ended with code.
func auditEntries(log, user, cluster string, code int) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		var ev struct {
			User      struct{ Username string }
			ObjectRef struct {
				APIGroup, Resource, Subresource, Name string
			}
			ResponseStatus struct{ Code int }
			Verb           string
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.User.Username == user && ev.ObjectRef.APIGroup == gatewayGroup && ev.ObjectRef.Resource == "clusters" &&
			ev.ObjectRef.Subresource == "proxy" && ev.ObjectRef.Name == cluster && ev.ResponseStatus.Code == code {
			out = append(out, ev.Verb)
		}
	}
	return out
}
