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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			loops := startKubectlLoops()
			oldCA := currentCA()
			// The README's command, as written.
			Expect(shell(`kubectl annotate managedproxyconfiguration cluster-proxy proxy.open-cluster-management.io/rotate-ca="$(date +%s)" --overwrite`)).
				To(ContainSubstring("managedproxyconfiguration.proxy.open-cluster-management.io/cluster-proxy annotated"))
			expectRolloverDone(func(g Gomega, ca *x509.Certificate) { g.Expect(ca.Equal(oldCA)).To(BeFalse(), "a new CA") })
			loops.stop("during the CA rotation")
		})

		It("replaces a Provided CA while clients loop over every cluster, with zero failed requests, and keeps the last good CA through a broken secret", func() {
			By("switching the signer to a Provided CA")
			first := must(certs.NewCA("e2e-provided-ca-1", 365*24*time.Hour, time.Now()))
			userSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: providedCASecret, Namespace: localsystem.Namespace},
				Data: map[string][]byte{"ca.crt": first.CertPEM, "ca.key": first.KeyPEM}}
			Expect(sys.HubClient.Create(ctx(), userSecret)).To(Succeed())
			DeferCleanup(func() {
				By("back to a self-signed CA")
				setSigner(proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{Type: proxyv1alpha1.SelfSigned})
				expectRolloverDone(func(g Gomega, ca *x509.Certificate) {
					g.Expect(ca.Subject.CommonName).To(Equal("open-cluster-management:cluster-proxy"))
				})
				Expect(sys.HubClient.Delete(ctx(), userSecret)).To(Succeed())
			})
			setSigner(proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{Type: proxyv1alpha1.Provided,
				Provided: &proxyv1alpha1.AuthenticationProvided{SecretRef: &proxyv1alpha1.SecretReference{Name: providedCASecret, Namespace: localsystem.Namespace}}})
			expectRolloverDone(func(g Gomega, ca *x509.Certificate) {
				g.Expect(ca.Equal(first.Cert)).To(BeTrue(), "the provided CA signs")
			})

			loops := startKubectlLoops()
			By("a key that does not match: the condition names the secret and its key, the last good CA keeps signing")
			other := must(certs.NewCA("e2e-someone-else", 365*24*time.Hour, time.Now()))
			userSecret.Data = map[string][]byte{"ca.crt": first.CertPEM, "ca.key": other.KeyPEM}
			Expect(sys.HubClient.Update(ctx(), userSecret)).To(Succeed())
			Eventually(func(g Gomega) {
				c := mpcCondition(g, proxyv1alpha1.ConditionSignerReady)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(proxyv1alpha1.ReasonSignerSecretInvalid))
				g.Expect(c.Message).To(And(ContainSubstring(localsystem.Namespace+"/"+providedCASecret), ContainSubstring("ca.key does not match ca.crt"),
					ContainSubstring("the last good CA "+certs.Fingerprint(first.Cert)+" keeps signing")))
			}).Should(Succeed())
			Expect(currentCA().Equal(first.Cert)).To(BeTrue(), "the last good CA still signs")

			By("a new CA in the secret rolls over with an overlap")
			second := must(certs.NewCA("e2e-provided-ca-2", 365*24*time.Hour, time.Now()))
			userSecret.Data = map[string][]byte{"ca.crt": second.CertPEM, "ca.key": second.KeyPEM}
			Expect(sys.HubClient.Update(ctx(), userSecret)).To(Succeed())
			expectRolloverDone(func(g Gomega, ca *x509.Certificate) {
				g.Expect(ca.Equal(second.Cert)).To(BeTrue(), "the new provided CA signs")
			})
			Expect(mpcCondition(Default, proxyv1alpha1.ConditionSignerReady).Status).To(Equal(metav1.ConditionTrue))
			loops.stop("while the Provided CA was replaced")
		})
	})
}

// providedCASecret is the Secret of the Provided CA spec, in the operator's namespace.
const providedCASecret = "e2e-provided-ca"

// kubectlLoops run kubectl get, one request after the other, to every cluster through the user-server and through the
// hub's aggregated API, as a user's script would: neither retries.
type kubectlLoops struct {
	ok, failures atomic.Int64
	mu           sync.Mutex
	errs         []string
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// startKubectlLoops starts the loops once every cluster answers, and waits for a few answers.
func startKubectlLoops() *kubectlLoops {
	GinkgoHelper()
	kubeconfigs := map[string]string{}
	for _, cluster := range clusterNames() {
		kubeconfigs[cluster] = userKubeconfig(cluster, "loop", viewerToken(cluster))
		// The hub's aggregated API: its APIService trusts the proxy-servers through the published bundle.
		kubeconfigs[cluster+" via the hub"] = viaHubKubeconfig(cluster, "loop", "")
		Eventually(func() (string, error) { return grpcHealthz(cluster) }).Should(Equal("ok"), "%s is up before the loops", cluster)
	}
	l := &kubectlLoops{}
	loopCtx, cancel := context.WithCancel(ctx())
	l.cancel = cancel
	for cluster, kc := range kubeconfigs {
		l.wg.Go(func() {
			defer GinkgoRecover()
			for loopCtx.Err() == nil {
				if _, err := kubeclient.Kubectl(kc, "get", "namespace", "default", "-o", "name"); err != nil {
					if loopCtx.Err() != nil {
						return
					}
					l.failures.Add(1)
					l.mu.Lock()
					l.errs = append(l.errs, cluster+": "+err.Error())
					l.mu.Unlock()
				} else {
					l.ok.Add(1)
				}
			}
		})
	}
	DeferCleanup(l.end)
	Eventually(l.ok.Load).Should(BeNumerically(">", 4))
	return l
}

func (l *kubectlLoops) end() {
	l.cancel()
	l.wg.Wait()
}

// stop checks that requests still flow, stops the loops, reports their counts and expects no failure.
func (l *kubectlLoops) stop(what string) {
	GinkgoHelper()
	Eventually(l.ok.Load).Should(BeNumerically(">", l.ok.Load()+4), "requests keep flowing")
	l.end()
	AddReportEntry("requests "+what, fmt.Sprintf("%d answered, %d failed", l.ok.Load(), l.failures.Load()))
	Expect(l.errs).To(BeEmpty())
	Expect(l.failures.Load()).To(BeZero())
}

// expectRolloverDone waits until a CA that isNew accepts signs, alone in the published bundle, every agent and hub
// certificate is signed by it, and a client that read the new bundle trusts every proxy-server replica.
func expectRolloverDone(isNew func(Gomega, *x509.Certificate)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		newCA := currentCA()
		isNew(g, newCA)
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
}

// setSigner sets the default configuration's signer.
func setSigner(signer proxyv1alpha1.ManagedProxyConfigurationCertificateSigner) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc)).To(Succeed())
		mpc.Spec.Authentication.Signer = signer
		g.Expect(sys.HubClient.Update(ctx(), mpc)).To(Succeed())
	}).Should(Succeed())
}

// mpcCondition is a condition of the default configuration.
func mpcCondition(g Gomega, conditionType string) *metav1.Condition {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc)).To(Succeed())
	c := meta.FindStatusCondition(mpc.Status.Conditions, conditionType)
	g.Expect(c).NotTo(BeNil(), conditionType)
	return c
}
