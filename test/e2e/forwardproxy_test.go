//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/squid"
)

// forwardProxy: a cluster that reaches the hub only through a forward proxy: squid as its only route, a bad proxy URL,
// and a changed AddOnDeploymentConfig.
func forwardProxy() {
	Context("forward proxy", func() {
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
			// One answer proves one replica; the next spec asks any of them.
			expectAgentsOnEveryReplica(3)
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
	})
}
