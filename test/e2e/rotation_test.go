//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

// rotation: TLS settings and certificates change under traffic: the TLS profile without a restart, the CA with no
// failed request.
func rotation() {
	Context("rotation", func() {
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
				// The hub's aggregated API: its APIService trusts the proxy-servers through the published bundle.
				kubeconfigs[cluster+" via the hub"] = viaHubKubeconfig(cluster, "loop", "")
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
				for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert", "cluster-proxy-impersonator"} {
					s := &corev1.Secret{}
					g.Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, name), s)).To(Succeed())
					leaf := must(certs.ParseCertificates(s.Data["tls.crt"]))[0]
					g.Expect(leaf.CheckSignatureFrom(newCA)).To(Succeed(), name)
				}
			}, 8*time.Minute, time.Second).Should(Succeed()) // the old CA stays --ca-rollover-grace (45 s here) after its last use
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
	})
}
