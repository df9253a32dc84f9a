//go:build e2e

package e2enodes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/squid"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

var _ = Describe("The product on real clusters", Ordered, func() {
	ctx := context.Background()

	It("runs the proxy-server 3/3 and the manager 1/1 on the hub and an agent on every cluster, all Ready", func() {
		ready := func(c client.Client, ns, name string, replicas int32) {
			Eventually(func(g Gomega) {
				var d appsv1.Deployment
				g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d)).To(Succeed())
				g.Expect(d.Status.ReadyReplicas).To(Equal(replicas), "%s/%s ready replicas", ns, name)
			}).Should(Succeed())
		}
		ready(sys.HubClient, localsystem.Namespace, "cluster-proxy", 3)
		ready(sys.HubClient, localsystem.Namespace, "cluster-proxy-addon-manager", 1)
		for _, c := range sys.Managed {
			mc, err := client.New(c.Config, client.Options{})
			Expect(err).NotTo(HaveOccurred())
			// cluster1's AddOnDeploymentConfig brings its own install namespace (the ADC's default): the status says where.
			var cps proxyv1alpha1.ClusterProxyStatus
			Expect(sys.HubClient.Get(ctx, client.ObjectKey{Namespace: c.Name(), Name: proxyv1alpha1.AddonName}, &cps)).To(Succeed())
			Expect(cps.Status.AgentNamespace).NotTo(BeEmpty())
			ready(mc, cps.Status.AgentNamespace, "cluster-proxy-proxy-agent", 3)
		}
		out, err := testenv.Kubectl(sys.Hub.Kubeconfig, "get", "deploy", "-n", localsystem.Namespace)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Println(out)
	})

	It("shows every ClusterProxyStatus and ManagedClusterAddOn Available", func() {
		states, err := sys.States(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(states).To(HaveLen(2))
		for _, st := range states {
			Expect(st.Available).To(BeTrue(), st.Name+": "+st.Status)
			Expect(string(st.AddOnAvailable)).To(Equal("True"), st.Name)
		}
	})

	It("denies the manager nothing by RBAC", func() {
		logs, err := testenv.Kubectl(sys.Hub.Kubeconfig, "logs", "-n", localsystem.Namespace, "deploy/cluster-proxy-addon-manager")
		Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(workDir, "manager.log")
		Expect(os.WriteFile(path, []byte(logs), 0o600)).To(Succeed())
		Expect(testenv.CheckManagerRBAC(path)).To(Succeed())
	})

	It("routes cluster1's klusterlet and agent through squid, its only way to the hub", func() {
		hub := net.JoinHostPort(sys.Hub.NodeIP.String(), strconv.Itoa(realcluster.APIServerPort))
		entrypoint := net.JoinHostPort(localsystem.EntrypointHost, strconv.Itoa(localsystem.EntrypointPort))
		// Squid logs a CONNECT when it closes: restart it to see the running tunnels; they come back by themselves.
		Expect(sys.Squid.Stop()).To(Succeed())
		Expect(sys.Squid.Start()).To(Succeed())
		Expect(sys.Squid.Tunnels()).To(ContainElements(
			squid.Tunnel{Target: hub, TLS: true}, squid.Tunnel{Target: entrypoint, TLS: true}))

		By("a direct dial from cluster1's network to the hub fails")
		proxied := sys.Managed[0]
		out, err := exec.Command("nsenter", "--net="+proxied.NetNS(), "--", "curl", "-sk", "--max-time", "3", "https://"+hub+"/healthz").CombinedOutput()
		Expect(err).To(HaveOccurred(), "cluster1 reached the hub directly: %s", out)

		By("the tunnel comes back through the restarted squid")
		Eventually(func(g Gomega) {
			states, err := sys.States(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			for _, st := range states {
				g.Expect(st.Available).To(BeTrue(), st.Name+": "+st.Status)
			}
		}).Should(Succeed())
	})
})

var _ = Describe("High availability on real clusters", Ordered, func() {
	ctx := context.Background()

	It("connects every agent of every cluster to each of the 3 proxy-server replicas", func() {
		pods, err := testenv.Kubectl(sys.Hub.Kubeconfig, "get", "pods", "-n", localsystem.Namespace, "-l",
			proxyv1alpha1.ComponentLabel+"="+proxyv1alpha1.ComponentProxyServer, "-o", "jsonpath={.items[*].metadata.name}")
		Expect(err).NotTo(HaveOccurred())
		names := strings.Fields(pods)
		Expect(names).To(HaveLen(3))
		for _, pod := range names {
			// Each replica answers /agents on its own HTTP-CONNECT port, reached through kubectl port-forward.
			port := portForward(pod, 8094)
			proxies, err := clusterproxy.New(ctx, sys.Hub.Config, clusterproxy.Options{Resolve: mustResolve(
				fmt.Sprintf("proxy-entrypoint.%s.svc:8094=127.0.0.1:%d", localsystem.Namespace, port))})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func(g Gomega) {
				agents, err := proxies.ConnectedAgents(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				for _, cluster := range sys.Clusters() {
					g.Expect(agents[cluster]).To(HaveLen(3), "replica %s: the agents of %s", pod, cluster)
				}
			}).Should(Succeed())
		}
	})
})

// portForward runs kubectl port-forward to the hub pod's port for the rest of the suite and returns the local port.
func portForward(pod string, port int) int {
	cmd := exec.Command(filepath.Join(os.Getenv("NODE_ASSETS"), "kubectl"), "--kubeconfig", sys.Hub.Kubeconfig,
		"port-forward", "-n", localsystem.Namespace, "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n') // "Forwarding from 127.0.0.1:NNNNN -> 8094"
	Expect(err).NotTo(HaveOccurred())
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	var local int
	_, err = fmt.Sscanf(line, "Forwarding from 127.0.0.1:%d ->", &local)
	Expect(err).NotTo(HaveOccurred(), line)
	return local
}

func mustResolve(values ...string) clusterproxy.Resolver {
	r, err := clusterproxy.ParseResolve(values)
	Expect(err).NotTo(HaveOccurred())
	return r
}
