//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
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
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// tunnelsAndClients: every way in to a managed cluster, with real clients: konnectivity-client, curl, kubectl through
// the user-server (logs -f, exec, port-forward, services), pkg/clusterproxy, and identities mapped by OIDC.
func tunnelsAndClients() {
	Context("tunnels and clients", func() {
		It("reaches every managed kube-apiserver with konnectivity-client over gRPC and with curl over HTTP CONNECT", func() {
			for _, cluster := range clusterNames() {
				Eventually(func() (string, error) { return grpcHealthz(cluster) }).Should(Equal("ok"), cluster)
				Eventually(func() (string, error) { return curlHealthz(cluster) }).Should(Equal("ok"), cluster)
			}
		})

		It("lets kubectl list, watch and act as a mapped hub user on every cluster through the user-server", func() {
			hubToken := hubUserToken()
			for _, cluster := range clusterNames() {
				By(cluster)
				viewer := userKubeconfig(cluster, "viewer", viewerToken(cluster))
				out, err := kubeclient.Kubectl(viewer, "get", "namespaces", "-o", "name")
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(ContainSubstring("namespace/open-cluster-management-agent"), "the managed cluster, not the hub")

				expectWatchSeesNewNamespace(cluster, viewer)

				hub := userKubeconfig(cluster, "hub-user", hubToken)
				out, err = kubeclient.Kubectl(hub, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(Equal(hubUser))
				_, err = kubeclient.Kubectl(hub, "get", "namespaces")
				Expect(err).NotTo(HaveOccurred(), "the managed cluster's RBAC for the mapped user applies")
			}
		})

		It("gives hub programs a rest.Config and a probe for each cluster by name (pkg/clusterproxy)", func() {
			p := proxies()
			for _, cluster := range clusterNames() {
				base := rest.CopyConfig(managedConfig(cluster))
				// A name that resolves nowhere on the machine: only the tunnel can reach the apiserver.
				base.Host = "https://kubernetes.default.svc"
				cfg := must(p.RESTConfig(cluster, base))
				ns := must(must(kubernetes.NewForConfig(cfg)).CoreV1().Namespaces().Get(ctx(), "open-cluster-management-agent", metav1.GetOptions{}))
				Expect(ns.Name).To(Equal("open-cluster-management-agent"))
				result := must(p.Probe(ctx(), cluster))
				Expect(result.Healthy).To(BeTrue(), "%s: %s", cluster, result.Message)
				Expect(result.Latency).To(BeNumerically(">", 0))
			}
		})

		It("execs into a pod and forwards a port to it from Go (pkg/clusterproxy, client-go's executors and port-forward dialers), over SPDY and websocket", func() {
			p := proxies()
			for _, cluster := range clusterNames() {
				base := rest.CopyConfig(managedConfig(cluster))
				// A name that resolves nowhere on the machine: only the tunnel can reach the apiserver.
				base.Host = "https://kubernetes.default.svc"
				cfg := must(p.RESTConfig(cluster, base))
				pod := probePod(cfg)
				for _, transport := range []string{"SPDY", "websocket"} {
					By(cluster + ": exec and port-forward over " + transport)
					Expect(goExec(cfg, pod, transport == "websocket", "/probe", "echo", "through", "the", "tunnel")).To(Equal("through the tunnel\n"))
					port, stop := goPortForward(cfg, pod, transport == "websocket", 8080)
					body := forwardedHealthz(port)
					stop()
					Expect(body).To(Equal("ok\n"))
				}
			}

			By("a cluster without an agent: exec fails at once, naming the cluster")
			cfg := must(p.RESTConfig("no-such-cluster", &rest.Config{Host: "https://kubernetes.default.svc",
				TLSClientConfig: rest.TLSClientConfig{CAData: managedConfig(clusterNames()[0]).CAData}}))
			c, cancel := context.WithTimeout(ctx(), 20*time.Second)
			defer cancel()
			_, err := must(kubernetes.NewForConfig(cfg)).CoreV1().Namespaces().List(c, metav1.ListOptions{})
			Expect(err).To(MatchError(ContainSubstring("no-such-cluster")))
			_, err = goExec(cfg, "any", true, "true")
			Expect(err).To(MatchError(ContainSubstring("no-such-cluster")))
			Expect(c.Err()).NotTo(HaveOccurred(), "both failed before the deadline")
		})

		Context("a pod on each managed cluster, through the user-server kubeconfig", func() {
			It("follows its log with kubectl logs -f", func() {
				for _, cluster := range clusterNames() {
					By(cluster)
					kc := userKubeconfig(cluster, "viewer", viewerToken(cluster))
					c, cancel := context.WithTimeout(ctx(), time.Minute)
					cmd := exec.CommandContext(c, filepath.Join(os.Getenv("NODE_ASSETS"), "kubectl"), "--kubeconfig", kc,
						"logs", "-f", "--tail=1", "-n", workloadNamespace, "deploy/probe")
					stdout := must(cmd.StdoutPipe())
					Expect(cmd.Start()).To(Succeed())
					lines := make(chan string, 64)
					go func() {
						s := bufio.NewScanner(stdout)
						for s.Scan() {
							lines <- s.Text()
						}
						close(lines)
					}()
					// A request the pod logs after the stream began, sent on the managed cluster itself.
					mark := fmt.Sprintf("/healthz?mark=%s-%d", cluster, time.Now().UnixNano())
					cs := must(kubernetes.NewForConfig(managedConfig(cluster)))
					Eventually(func(g Gomega) {
						_, err := cs.CoreV1().Services(workloadNamespace).ProxyGet("http", "probe", "80", "/healthz",
							map[string]string{"mark": strings.TrimPrefix(mark, "/healthz?mark=")}).DoRaw(ctx())
						g.Expect(err).NotTo(HaveOccurred())
						select {
						case line, ok := <-lines:
							g.Expect(ok).To(BeTrue(), "kubectl logs -f ended")
							g.Expect(line).To(HaveSuffix("GET " + mark))
						case <-time.After(2 * time.Second):
							g.Expect("no line").To(Equal("a line"))
						}
					}).Should(Succeed())
					cancel()
					_ = cmd.Wait()
				}
			})

			It("runs a command in it with kubectl exec, over websocket and over SPDY", func() {
				for _, cluster := range clusterNames() {
					kc := userKubeconfig(cluster, "viewer", viewerToken(cluster))
					for _, websockets := range []string{"true", "false"} {
						By(cluster + " KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + websockets)
						cmd := kubectl(kc, []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + websockets},
							"exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "through", "the", "tunnel")
						out, err := process.Output(cmd, "kubectl exec")
						Expect(err).NotTo(HaveOccurred())
						Expect(out).To(Equal("through the tunnel\n"))
					}
				}
			})

			It("forwards a local port to it with kubectl port-forward, over websocket and over SPDY", func() {
				for _, cluster := range clusterNames() {
					kc := userKubeconfig(cluster, "viewer", viewerToken(cluster))
					for _, websockets := range []string{"true", "false"} {
						By(cluster + " KUBECTL_PORT_FORWARD_WEBSOCKETS=" + websockets)
						port := must(portForward(kc, []string{"KUBECTL_PORT_FORWARD_WEBSOCKETS=" + websockets}, workloadNamespace, "deploy/probe", 8080))
						Expect(forwardedHealthz(port)).To(Equal("ok\n"))
					}
				}
			})

			It("reaches its Service through /proxy-service/, which the chart's userServer.allowedServices allows, and no other", func() {
				for _, cluster := range clusterNames() {
					kc := userKubeconfig(cluster, "viewer", viewerToken(cluster))
					Expect(kubeclient.Kubectl(kc, "get", "--raw", "/api/v1/namespaces/"+workloadNamespace+"/services/http:probe:80/proxy-service/healthz")).
						To(Equal("ok\n"), cluster)
					_, err := kubeclient.Kubectl(kc, "get", "--raw", "/api/v1/namespaces/kube-system/services/http:kube-dns:9153/proxy-service/metrics")
					Expect(err).To(MatchError(ContainSubstring("Forbidden")), "%s: default deny", cluster)
				}
			})
		})

		It("maps the OIDC tokens of 1st-cluster's ServiceAccount issuer on cluster1, discovered through squid, and refuses forged ones", func() {
			// The issuer is a real one this project did not write: 1st-cluster's kube-apiserver, whose OpenID discovery
			// cluster1's agent reaches only through squid, like the hub (cluster1's network has no route to 1st-cluster's
			// and its CoreDNS does not know the issuer's name; squid logs a CONNECT only when it ends, and the agent keeps
			// its connection to the issuer). Its tokens are neither cluster1's nor the hub's.
			issuer, target := managedClient(localsystem.DigitCluster), localsystem.ProxiedCluster
			createOrExists(issuer, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oidc-discovery-public"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}}})
			createOrExists(issuer, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "oidc-user"}})
			issued := must(kubeclient.ServiceAccountToken(ctx(), must(kubernetes.NewForConfig(managedConfig(localsystem.DigitCluster))),
				"default", "oidc-user", time.Hour, oidcClientID))
			user := "oidc:system:serviceaccount:default:oidc-user"

			c := managedClient(target)
			viewerToken(target) // the ClusterRole namespace-viewer
			createOrExists(c, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oidc-namespace-viewer"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "namespace-viewer"},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}})
			createOrExists(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace(Default, target), Name: "issuer-ca"},
				Data: map[string]string{"ca.crt": string(sys.Managed[1].CA())}})

			setCustomizedVariables([]addonv1beta1.CustomizedVariable{
				{Name: "oidcIssuerURL", Value: localsystem.DigitIssuer}, {Name: "oidcClientID", Value: oidcClientID},
				{Name: "oidcUsernamePrefix", Value: "oidc:"}, {Name: "oidcCAConfigMap", Value: "issuer-ca"},
				// realcluster signs ServiceAccount tokens with an ECDSA P-256 key.
				{Name: "oidcSigningAlgs", Value: "ES256"},
			})
			DeferCleanup(func() {
				setCustomizedVariables(nil)
				expectAgentArgs(target, Not(ContainElement(HavePrefix("--oidc-"))))
			})
			expectAgentArgs(target, ContainElement("--oidc-issuer-url="+localsystem.DigitIssuer))

			kc := userKubeconfig(target, "oidc", issued)
			Eventually(func() (string, error) {
				return kubeclient.Kubectl(kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			}).Should(Equal(user), "the token's subject, with the prefix, impersonated on cluster1")
			Expect(kubeclient.Kubectl(kc, "get", "namespaces", "-o", "name")).To(ContainSubstring("namespace/open-cluster-management-agent"))

			forged := userKubeconfig(target, "oidc-forged", forgeSignature(issued))
			_, err := kubeclient.Kubectl(forged, "get", "namespaces")
			Expect(err).To(MatchError(ContainSubstring("Unauthorized")))
		})
	})
}
