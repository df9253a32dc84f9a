//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		// kubectl logs -f through each cluster's via-hub context runs while the chapter does; its last spec checks
		// it outlived every timeout on the way.
		var follows []*followedLog
		BeforeAll(func() {
			for _, cluster := range clusterNames() {
				follows = append(follows, followLogs(cluster, viaHubKubeconfig(cluster, "admin", "")))
			}
		})

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
			for _, c := range sys.Managed {
				Expect(managedAuditSince(c.AuditLog(), 0, func(ev managedAuditEvent) bool {
					return strings.HasSuffix(ev.ImpersonatedUser.Username, "team:nobody")
				})).To(BeEmpty(), "%s: nothing of a request the hub refused reached the cluster", c.Name())
			}
		})

		It("lets a hub user act with kubectl --as on the user-server as whom the managed cluster's RBAC lets it impersonate, and as no one else", func() {
			tok := hubUserToken()
			cluster := localsystem.ProxiedCluster
			viewerToken(cluster)
			kc := userKubeconfig(cluster, "hub-user", tok)
			whoAs := func(as ...string) (string, error) {
				return kubeclient.Kubectl(kc, append([]string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}, as...)...)
			}
			// kubectl auth whoami words a refusal its own way; a list shows the cluster's answer.
			listAs := func(as ...string) error {
				_, err := kubeclient.Kubectl(kc, append([]string{"get", "namespaces"}, as...)...)
				return err
			}
			err := listAs("--as=e2e-stand-in")
			Expect(err).To(MatchError(ContainSubstring("cannot impersonate")), "the cluster grants the hub user no impersonation yet")

			c := managedClient(cluster)
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonate-e2e-stand-in"}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"e2e-stand-in"}, Verbs: []string{"impersonate"}}}}
			binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "impersonate-e2e-stand-in"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: hubUser}}}
			createOrExists(c, role)
			createOrExists(c, binding)
			DeferCleanup(func() {
				Expect(client.IgnoreNotFound(c.Delete(ctx(), binding))).To(Succeed())
				Expect(client.IgnoreNotFound(c.Delete(ctx(), role))).To(Succeed())
			})
			Eventually(func(g Gomega) {
				who, err := whoAs("--as=e2e-stand-in")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(who).To(Equal("e2e-stand-in"))
			}).Should(Succeed())
			Expect(listAs("--as=e2e-stand-in", "--as-group=system:masters")).To(MatchError(ContainSubstring(`"system:masters"`)),
				"a group the cluster does not let it impersonate")
			Expect(listAs("--as=someone-else")).To(MatchError(ContainSubstring("cannot impersonate")))
		})

		It("sends a hub user downstream by name only: the managed kube-apiserver sees the agent impersonate them and reviews no token, on both paths", func() {
			tok := hubUserToken()
			for _, c := range sys.Managed {
				cluster := c.Name()
				By(cluster)
				viewerToken(cluster) // the cluster's RBAC for the hub user
				from := must(os.Stat(c.AuditLog())).Size()
				_, err := kubeclient.Kubectl(userKubeconfig(cluster, "hub-user", tok), "get", "namespaces")
				Expect(err).NotTo(HaveOccurred(), "the user-server with the hub token")
				_, err = kubeclient.Kubectl(viaHubKubeconfig(cluster, "hub-user", tok), "get", "namespaces")
				Expect(err).NotTo(HaveOccurred(), "the hub's aggregated API with the same token")

				var agent string
				Eventually(func(g Gomega) { agent = "system:serviceaccount:" + agentNamespace(g, cluster) + ":" }).Should(Succeed())
				Eventually(func(g Gomega) {
					asHubUser := managedAuditSince(c.AuditLog(), from, func(ev managedAuditEvent) bool {
						return ev.ImpersonatedUser.Username == hubUser && ev.ObjectRef.Resource == "namespaces" && ev.Verb == "list"
					})
					g.Expect(asHubUser).To(HaveLen(2), "one list per path")
					for _, ev := range asHubUser {
						g.Expect(ev.User.Username).To(HavePrefix(agent), "the agent's own identity carries the request")
						g.Expect(ev.ResponseStatus.Code).To(Equal(200))
					}
				}).Should(Succeed())
				Expect(managedAuditSince(c.AuditLog(), from, func(ev managedAuditEvent) bool {
					return ev.ObjectRef.Resource == "tokenreviews" || ev.ResponseStatus.Code == 401
				})).To(BeEmpty(), "no token reviewed, none refused: the hub token never reached the cluster")
			}
		})

		It("keeps kubectl logs -f through the hub open past 90 s, past every request timeout on the way", func() {
			for _, f := range follows {
				Eventually(func() time.Duration { return time.Since(f.StartedAt()) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).
					Should(BeNumerically(">", 90*time.Second))
				Expect(f.ExitDescription()).To(BeEmpty(), "%s: kubectl logs -f ended: %s", f.cluster, f.output())
				mark := fmt.Sprintf("after-%ds", int(time.Since(f.StartedAt()).Seconds()))
				Eventually(func() string {
					_, _ = must(kubernetes.NewForConfig(managedConfig(f.cluster))).CoreV1().Pods(workloadNamespace).
						ProxyGet("http", f.pod, "8080", "/healthz", map[string]string{"mark": mark}).DoRaw(ctx())
					return f.output()
				}).Should(ContainSubstring("GET /healthz?mark="+mark), "%s: the stream still carries new lines", f.cluster)
				f.Stop()
			}
		})
		It("answers 503 naming a cluster whose agent cannot reach the hub", func() {
			// cluster1 reaches the hub only through squid: without it, its agents lose the hub. Last in the chapter: it
			// ends cluster1's streams.
			Expect(sys.Squid.Stop()).To(Succeed())
			DeferCleanup(func() {
				Expect(sys.Squid.Start()).To(Succeed())
				expectAgentsOnEveryReplica(3)
			})
			Eventually(func(g Gomega) {
				_, err := grpcHealthz(localsystem.ProxiedCluster)
				g.Expect(err).To(HaveOccurred())
			}).Should(Succeed())
			notConnected := fmt.Sprintf(`cluster %q is not connected`, localsystem.ProxiedCluster)
			hc := must(rest.HTTPClientFor(sys.Hub.Config))
			var took time.Duration
			Eventually(func(g Gomega) {
				start := time.Now()
				resp, err := hc.Get(sys.Hub.Config.Host + proxyPath(localsystem.ProxiedCluster, "/api"))
				took = time.Since(start)
				g.Expect(err).NotTo(HaveOccurred())
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				g.Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
				var status metav1.Status
				g.Expect(json.Unmarshal(body, &status)).To(Succeed(), "%s", body)
				g.Expect(status.Message).To(ContainSubstring(notConnected))
				// Through the hub's aggregator too, the answer says when to come back: client-go waits out an agent
				// that reconnects instead of failing.
				g.Expect(resp.Header.Get("Retry-After")).To(Equal("1"))
			}).Should(Succeed())
			AddReportEntry("the aggregated API's 503 for a cluster without its agent", took.Round(time.Millisecond).String())
			Expect(took).To(BeNumerically("<", 10*time.Second), "answered at once, not after a dial timeout")
			// kubectl tries it again, a second apart, ten times, then names the cluster.
			_, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "--raw", proxyPath(localsystem.ProxiedCluster, "/api"))
			Expect(err).To(MatchError(And(ContainSubstring("ServiceUnavailable"), ContainSubstring(notConnected))))
			_, err = kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "--raw", proxyPath(localsystem.DigitCluster, "/api"))
			Expect(err).NotTo(HaveOccurred(), "the other cluster keeps its tunnel")
		})

	})
}

// managedAuditEvent is what the specs read of a managed kube-apiserver's audit event.
type managedAuditEvent struct {
	Verb             string
	User             struct{ Username string }
	ImpersonatedUser struct{ Username string }
	ObjectRef        struct{ Resource, Subresource string }
	ResponseStatus   struct{ Code int }
}

// managedAuditSince are the events of an audit log from byte offset on that match.
func managedAuditSince(path string, offset int64, match func(managedAuditEvent) bool) []managedAuditEvent {
	GinkgoHelper()
	raw := must(os.ReadFile(path))
	if offset > int64(len(raw)) {
		offset = 0 // rotated meanwhile
	}
	var out []managedAuditEvent
	for _, line := range strings.Split(string(raw[offset:]), "\n") {
		var ev managedAuditEvent
		if json.Unmarshal([]byte(line), &ev) == nil && match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// followedLog is kubectl logs -f of the probe pod through a kubeconfig, as a process of its own (its output in its
// log file).
type followedLog struct {
	cluster, pod string
	*process.Process
}

func followLogs(cluster, kubeconfig string) *followedLog {
	GinkgoHelper()
	f := &followedLog{cluster: cluster, pod: probePod(managedConfig(cluster))}
	cmd := kubectl(kubeconfig, nil, "logs", "-f", "--tail=0", "-n", workloadNamespace, f.pod)
	f.Process = must(process.Run(process.Command{Path: cmd.Path, Args: cmd.Args[1:], Env: cmd.Env,
		LogPath: filepath.Join(workDir, "logs-f-via-hub-"+cluster+".log")}))
	DeferCleanup(f.Stop)
	return f
}

func (f *followedLog) output() string { return string(must(os.ReadFile(f.LogPath()))) }

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
