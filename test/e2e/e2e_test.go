//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/squid"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

var (
	// managerLabels select the manager's pods (the chart's selector labels).
	managerLabels     = map[string]string{"app.kubernetes.io/name": "cluster-proxy-operator"}
	proxyServerLabels = map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}
	agentLabels       = map[string]string{proxyv1alpha1.ComponentLabel: "proxy-agent"}
)

var _ = Describe("The product on real clusters", Ordered, func() {
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

			mc := managedClient(cluster)
			create := func(c context.Context, name string) error {
				return mc.Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
			Expect(testenv.WatchSeesNamespace(ctx(), viewer, create, 3*time.Second, timeout)).To(Succeed())

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
				resp := must(http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port)))
				body := must(io.ReadAll(resp.Body))
				resp.Body.Close()
				stop()
				Expect(string(body)).To(Equal("ok\n"))
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
					resp := must(http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port)))
					body := must(io.ReadAll(resp.Body))
					resp.Body.Close()
					Expect(string(body)).To(Equal("ok\n"))
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

	It("routes cluster1's klusterlet and agent through squid, its only way to the hub, and comes back within 10 s of a squid restart", func() {
		hub := net.JoinHostPort(sys.Hub.NodeIP.String(), itoa(realcluster.APIServerPort))
		entrypoint := net.JoinHostPort(localsystem.EntrypointHost, itoa(localsystem.EntrypointPort))
		cps := &proxyv1alpha1.ClusterProxyStatus{}
		Expect(sys.HubClient.Get(ctx(), types(localsystem.ProxiedCluster, proxyv1alpha1.AddonName), cps)).To(Succeed())
		Expect(cps.Status.ProxySettings).NotTo(BeNil())
		Expect(cps.Status.ProxySettings.HTTPSProxy).To(Equal(sys.Squid.TLSURL()))
		caSum := sha256.Sum256(sys.Squid.CA())
		Expect(cps.Status.ProxySettings.CABundleFingerprint).To(Equal("SHA256:"+hex.EncodeToString(caSum[:])), "the agent trusts squid's CA")

		// Squid logs a CONNECT when it closes: stopping it writes the running tunnels; they come back by themselves.
		Expect(sys.Squid.Stop()).To(Succeed())
		Eventually(func(g Gomega) {
			_, err := grpcHealthz(localsystem.ProxiedCluster)
			g.Expect(err).To(HaveOccurred())
		}).Should(Succeed())
		Expect(grpcHealthz(localsystem.DigitCluster)).To(Equal("ok"), "the direct cluster keeps its tunnel")
		Expect(sys.Squid.Tunnels()).To(ContainElements(squid.Tunnel{Target: hub, TLS: true}, squid.Tunnel{Target: entrypoint, TLS: true}))
		Expect(sys.Squid.Tunnels()).NotTo(ContainElement(squid.Tunnel{Target: hub, TLS: false}), "nothing reached the hub through the plain-HTTP port")

		By("a direct dial from cluster1's network to the hub fails")
		out, err := exec.Command("nsenter", "--net="+sys.Managed[0].NetNS(), "--", "curl", "-sk", "--max-time", "3", "https://"+hub+"/healthz").CombinedOutput()
		Expect(err).To(HaveOccurred(), "cluster1 reached the hub directly: %s", out)

		By("the tunnel comes back through the restarted squid")
		Expect(sys.Squid.Start()).To(Succeed())
		started := time.Now()
		Eventually(func() (string, error) { return grpcHealthz(localsystem.ProxiedCluster) }).Should(Equal("ok"))
		back := time.Since(started)
		AddReportEntry("cluster1's tunnel back after squid restarted", back.Round(10*time.Millisecond).String())
		Expect(back).To(BeNumerically("<=", 10*time.Second))
	})

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
			for name, failures := range failed {
				for _, f := range failures {
					Expect(f.Err).To(ContainSubstring("connection refused"), name)
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
	})

	It("reports a bad proxy URL by its field and keeps the running agent", func() {
		setProxy("http//no-scheme", nil)
		Eventually(func(g Gomega) {
			cps := &proxyv1alpha1.ClusterProxyStatus{}
			g.Expect(sys.HubClient.Get(ctx(), types(localsystem.ProxiedCluster, proxyv1alpha1.AddonName), cps)).To(Succeed())
			c := meta.FindStatusCondition(cps.Status.Conditions, proxyv1alpha1.ConditionProxySettingsApplied)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("spec.proxyConfig.httpsProxy"))
		}).Should(Succeed())
		agents := podUIDs(managedClient(localsystem.ProxiedCluster), agentNamespace(Default, localsystem.ProxiedCluster), agentLabels)
		Consistently(func(g Gomega) {
			g.Expect(agentWorkHTTPSProxy(g)).To(Equal(sys.Squid.TLSURL()), "the agent ManifestWork keeps the last good proxy")
			body, err := grpcHealthz(localsystem.ProxiedCluster)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(Equal("ok"))
		}, "5s", "500ms").Should(Succeed())
		Expect(podUIDs(managedClient(localsystem.ProxiedCluster), agentNamespace(Default, localsystem.ProxiedCluster), agentLabels)).
			To(ConsistOf(agents), "the agent pods kept running")
		setProxy(sys.Squid.TLSURL(), nil)
	})

	It("takes a changed AddOnDeploymentConfig to the agent: it rolls and reconnects through the new proxy", func() {
		proxied := sys.Managed[0]
		second := must(squid.Start(filepath.Join(workDir, "squid-2"), squid.Options{
			Listen: proxied.HostIP, Hosts: map[string]string{localsystem.EntrypointHost: sys.Hub.NodeIP.String()},
			AllowFrom: []string{proxied.NodeIP.String() + "/32"},
		}))
		DeferCleanup(func() { _ = second.Stop() })
		// The new route is plain HTTP to the proxy, the other way an agent reaches one.
		setProxy(second.URL(), nil)
		expectAgentRunsWithProxy(second.URL())
		Eventually(func(g Gomega) {
			// The old route is gone: the agent now goes through the second proxy only.
			g.Expect(sys.Squid.Stop()).To(Succeed())
			g.Expect(grpcHealthz(localsystem.ProxiedCluster)).To(Equal("ok"))
		}).Should(Succeed())
		Expect(sys.Squid.Start()).To(Succeed())
		setProxy(sys.Squid.TLSURL(), nil)
		expectAgentRunsWithProxy(sys.Squid.TLSURL())
		Expect(second.Stop()).To(Succeed())
		Expect(second.Tunnels()).To(ContainElement(squid.Tunnel{Target: net.JoinHostPort(localsystem.EntrypointHost, itoa(localsystem.EntrypointPort)), TLS: false}),
			"the second squid carried the agent's tunnel on its plain-HTTP port")
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

		setCustomizedVariables([]addonv1alpha1.CustomizedVariable{
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

	It("refuses TLS 1.2 clients once spec.tlsProfile asks for TLS 1.3, without a restart or a dropped tunnel", func() {
		cert, key, ca := hubClientFiles()
		pair := must(tls.LoadX509KeyPair(cert, key))
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(must(os.ReadFile(ca)))).To(BeTrue())
		frontend := net.JoinHostPort(sys.Hub.NodeIP.String(), itoa(localsystem.HTTPConnectNodePort))
		handshake := func(maxVersion uint16) error {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", frontend, &tls.Config{
				Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: frontendServerName,
				MinVersion: tls.VersionTLS12, MaxVersion: maxVersion})
			if err != nil {
				return err
			}
			return conn.Close()
		}
		Expect(handshake(tls.VersionTLS12)).To(Succeed())
		servers := podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)
		agents := agentPods(Default)
		setProfile := func(profile *proxyv1alpha1.ManagedProxyConfigurationTLSProfile) {
			Eventually(func(g Gomega) {
				mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
				g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc)).To(Succeed())
				mpc.Spec.TLSProfile = profile
				g.Expect(sys.HubClient.Update(ctx(), mpc)).To(Succeed())
			}).Should(Succeed())
		}
		DeferCleanup(func() {
			setProfile(nil)
			Eventually(func() error { return handshake(tls.VersionTLS12) }).WithTimeout(3 * time.Minute).Should(Succeed())
		})

		setProfile(&proxyv1alpha1.ManagedProxyConfigurationTLSProfile{MinTLSVersion: "VersionTLS13"})
		// The kubelet updates the mounted ConfigMap within its sync period; the proxy-servers re-read it.
		Eventually(func() error { return handshake(tls.VersionTLS12) }).WithTimeout(3 * time.Minute).
			Should(MatchError(ContainSubstring("protocol version")))
		Expect(handshake(tls.VersionTLS13)).To(Succeed())
		for _, cluster := range clusterNames() {
			Expect(grpcHealthz(cluster)).To(Equal("ok"), cluster)
			Expect(agentPods(Default)[cluster]).To(ConsistOf(agents[cluster]), "%s's agents stay", cluster)
		}
		Expect(podUIDs(sys.HubClient, localsystem.Namespace, proxyServerLabels)).To(ConsistOf(servers), "the proxy-servers did not restart")
		expectEveryClusterAvailable()
	})

	It("rotates the CA while clients loop over every cluster, with zero failed requests", func() {
		kubeconfigs := map[string]string{}
		for _, cluster := range clusterNames() {
			kubeconfigs[cluster] = userKubeconfig(cluster, "loop", viewerToken(cluster))
			Eventually(func() (string, error) { return grpcHealthz(cluster) }).Should(Equal("ok"), "%s is up before the rotation", cluster)
		}
		oldCA := currentCA()
		var ok, failures atomic.Int64
		var mu sync.Mutex
		var errs []string
		loopCtx, stop := context.WithCancel(ctx())
		var wg sync.WaitGroup
		for cluster, kc := range kubeconfigs {
			wg.Go(func() {
				defer GinkgoRecover()
				for loopCtx.Err() == nil {
					if _, err := kubeclient.Kubectl(kc, "get", "namespace", "default", "-o", "name"); err != nil {
						failures.Add(1)
						mu.Lock()
						errs = append(errs, cluster+": "+err.Error())
						mu.Unlock()
					} else {
						ok.Add(1)
					}
				}
			})
		}
		Eventually(ok.Load).Should(BeNumerically(">", 4))

		// The README's command, as written.
		Expect(shell(`kubectl annotate managedproxyconfiguration cluster-proxy proxy.open-cluster-management.io/rotate-ca="$(date +%s)" --overwrite`)).
			To(ContainSubstring("managedproxyconfiguration.proxy.open-cluster-management.io/cluster-proxy annotated"))

		Eventually(func(g Gomega) {
			newCA := currentCA()
			g.Expect(newCA.Equal(oldCA)).To(BeFalse(), "a new CA")
			live := &proxyv1alpha1.ManagedProxyConfiguration{}
			g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), live)).To(Succeed())
			g.Expect(live.Status.Signer.BundleFingerprints).To(Equal([]string{certs.Fingerprint(newCA)}), "the old CA left the bundle")
			for _, cluster := range clusterNames() {
				g.Expect(agentCertificate(g, cluster).CheckSignatureFrom(newCA)).To(Succeed(), "%s's agent certificate", cluster)
			}
			for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert"} {
				s := &corev1.Secret{}
				g.Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, name), s)).To(Succeed())
				leaf := must(certs.ParseCertificates(s.Data["tls.crt"]))[0]
				g.Expect(leaf.CheckSignatureFrom(newCA)).To(Succeed(), name)
			}
		}, 8*time.Minute, time.Second).Should(Succeed()) // the old CA stays CARolloverGrace (3 min) after its last use
		// The old CA leaves the bundle only when the pods serve the new certificates (the kubelet has updated their
		// volumes within the grace period): a client that reads the new bundle then trusts every replica at once.
		completed := time.Now()
		// Each replica, through a port-forward to it, by a client that read the new bundle (pkg/clusterproxy).
		answers, err := sys.ReplicaAgents(ctx())
		Expect(err).NotTo(HaveOccurred(), "a client with the new bundle, to each replica")
		Expect(answers).To(HaveLen(3))
		AddReportEntry("a client with the new bundle trusts every proxy-server again, after the rollover", time.Since(completed).Round(time.Second).String())
		Eventually(ok.Load).Should(BeNumerically(">", ok.Load()+4), "requests keep flowing after the rotation")
		stop()
		wg.Wait()
		AddReportEntry("requests during the CA rotation", fmt.Sprintf("%d answered, %d failed", ok.Load(), failures.Load()))
		Expect(errs).To(BeEmpty())
		Expect(failures.Load()).To(BeZero())
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

	It("removes the agent from a cluster and its status from the hub when its add-on is removed", func() {
		cluster := localsystem.DigitCluster
		namespace := agentNamespace(Default, cluster)
		Expect(namespace).NotTo(BeEmpty(), "the add-on reports where its agent is installed")
		deployment := types(namespace, render.AgentDeploymentName)
		mc := managedClient(cluster)
		Expect(mc.Get(ctx(), deployment, &appsv1.Deployment{})).To(Succeed(), "the agent Deployment is there before the removal")

		Expect(sys.HubClient.Delete(ctx(), &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: proxyv1alpha1.AddonName}})).To(Succeed())
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
	})

	It("leaves nothing of the operator but its CRDs after helm uninstall", func() {
		must(sys.Helm(ctx(), "uninstall", "-n", localsystem.Namespace, "cluster-proxy", "--wait"))
		Eventually(func(g Gomega) {
			g.Expect(leftAfterUninstall(g)).To(BeEmpty())
		}).Should(Succeed())
		crds := shell("kubectl get crds -o name")
		for _, crd := range []string{"managedproxyconfigurations", "clusterproxystatuses", "proxycertificates"} {
			Expect(crds).To(ContainSubstring(crd+"."+proxyv1alpha1.GroupVersion.Group), "Helm keeps CRDs by rule")
		}
	})
})
