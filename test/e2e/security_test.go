//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

// security tries, on the real clusters, what an attacker would: the forward proxy's operator posing as the hub's
// impersonator, the impersonator's key and a tenant's certificate on the frontends, a retargeted reserved
// certificate, a made-up token for an allow-listed service, and a hub token sent past the hub kube-apiserver.
func security() {
	Context("attacks", func() {
		It("refuses an impersonator certificate signed by the CA of cluster1's forward proxy, and serves the operator's own", func() {
			cluster := localsystem.ProxiedCluster
			ownSecret := secretPair(proxyv1alpha1.ImpersonatorSecretName)
			own := must(tls.X509KeyPair(ownSecret.Data[corev1.TLSCertKey], ownSecret.Data[corev1.TLSPrivateKeyKey]))
			forgedPair := must(certs.IssueLeaf(sys.Squid.CAPair(), certs.LeafSpec{CommonName: contract.ImpersonatorCommonName,
				URIs: []*url.URL{contract.SANURL(contract.ImpersonatorRoleURI)}, Usages: []certs.Usage{certs.UsageClientAuth},
				Duration: time.Hour}, time.Now()))
			forged := must(tls.X509KeyPair(forgedPair.CertPEM, forgedPair.KeyPEM))
			admin := http.Header{"Impersonate-User": {"system:admin"}, "Impersonate-Group": {"system:masters"}}

			By("the operator's impersonator, through the tunnel to cluster1's service-proxy: the path works")
			code, body, err := serviceProxyGet(cluster, own, "/api/v1/namespaces/kube-system/secrets", admin)
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusOK), body)

			By("the same request with a certificate of squid's CA, which cluster1's caBundle names")
			code, body, err = serviceProxyGet(cluster, forged, "/api/v1/namespaces/kube-system/secrets", admin)
			Expect(err).To(HaveOccurred(), "answered %d: %s", code, body)
			Expect(err.Error()).To(ContainSubstring("tls"), "refused at the handshake: the proxy's CA vouches for nothing behind the proxy")
		})

		It("refuses, in cluster1's agent, a proxy-server certificate of its forward proxy's CA from a proxy that terminates the CONNECT", func() {
			proxied := sys.Managed[0]
			// A TLS-inspecting proxy with squid's key, whose CA cluster1's caBundle holds: it answers the CONNECT, then
			// poses as the proxy-server with a certificate of that CA for the host the agent asked for.
			mitm := startInterceptingProxy(proxied.HostIP, sys.Squid.CAPair())
			DeferCleanup(mitm.close)
			setProxy(mitm.url(), nil)
			DeferCleanup(func() {
				setProxy(sys.Squid.TLSURL(), nil)
				expectAgentRunsWithProxy(sys.Squid.TLSURL())
			})
			Eventually(func(g Gomega) {
				connects, handshakes := mitm.seen()
				g.Expect(connects).To(ContainElement(net.JoinHostPort(localsystem.EntrypointHost, itoa(localsystem.EntrypointPort))),
					"the new agent dials the entrypoint through the proxy")
				g.Expect(handshakes).NotTo(BeEmpty())
				for _, err := range handshakes {
					g.Expect(err).To(MatchError(ContainSubstring("bad certificate")), "the agent ends each handshake with the forged proxy-server")
				}
			}).WithTimeout(3 * time.Minute).Should(Succeed())
			_, handshakes := mitm.seen()
			Expect(handshakes).To(HaveEach(HaveOccurred()), "no handshake with the forged certificate succeeded")
		})

		It("keeps the impersonator's key and a tenant's ProxyCertificate off both frontends until the hub grants the certificate a cluster", func() {
			_, _, ca := hubClientFiles()
			imp := writePair("impersonator", secretPair(proxyv1alpha1.ImpersonatorSecretName))
			for _, cluster := range clusterNames() {
				_, err := grpcHealthzAs(imp.cert, imp.key, ca, cluster)
				Expect(err).To(HaveOccurred(), "the impersonator on the gRPC frontend, %s", cluster)
				_, err = curlHealthzAs(imp.cert, imp.key, ca, cluster)
				Expect(err).To(HaveOccurred(), "the impersonator on the HTTP-CONNECT frontend, %s", cluster)
			}

			By("a ProxyCertificate in a namespace the manager was not given issues nothing")
			stranger := "security-tenant"
			createOrExists(sys.HubClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stranger}})
			DeferCleanup(func() {
				_ = sys.HubClient.Delete(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stranger}})
			})
			refused := &proxyv1alpha1.ProxyCertificate{ObjectMeta: metav1.ObjectMeta{Namespace: stranger, Name: "tool"},
				Spec: proxyv1alpha1.ProxyCertificateSpec{SecretName: "tool", CommonName: "tool",
					IssuerRef: proxyv1alpha1.IssuerReference{Name: proxyv1alpha1.DefaultConfigurationName}}}
			Expect(sys.HubClient.Create(ctx(), refused)).To(Succeed())
			Eventually(func(g Gomega) {
				live := &proxyv1alpha1.ProxyCertificate{}
				g.Expect(sys.HubClient.Get(ctx(), client.ObjectKeyFromObject(refused), live)).To(Succeed())
				c := meta.FindStatusCondition(live.Status.Conditions, proxyv1alpha1.ConditionReady)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(proxyv1alpha1.ReasonNamespaceNotManaged))
			}).Should(Succeed())
			Expect(apierrors.IsNotFound(sys.HubClient.Get(ctx(), types(stranger, "tool"), &corev1.Secret{}))).To(BeTrue(),
				"no Secret where the manager was not given the namespace")

			By("a tenant's ProxyCertificate, named like the proxy-client, in a namespace certificates are issued into")
			tenant := localsystem.TenantNamespace
			pc := &proxyv1alpha1.ProxyCertificate{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "security-tool"},
				Spec: proxyv1alpha1.ProxyCertificateSpec{SecretName: "security-tool", CommonName: "cluster-proxy-proxy-client",
					Subject:   &proxyv1alpha1.CertificateSubject{Organizations: []string{"system:masters"}},
					IssuerRef: proxyv1alpha1.IssuerReference{Name: proxyv1alpha1.DefaultConfigurationName}}}
			Expect(sys.HubClient.Create(ctx(), pc)).To(Succeed())
			DeferCleanup(func() {
				_ = sys.HubClient.Delete(ctx(), pc)
				_ = sys.HubClient.Delete(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "security-tool"}})
			})
			Eventually(func(g Gomega) {
				live := &proxyv1alpha1.ProxyCertificate{}
				g.Expect(sys.HubClient.Get(ctx(), client.ObjectKeyFromObject(pc), live)).To(Succeed())
				g.Expect(meta.IsStatusConditionTrue(live.Status.Conditions, proxyv1alpha1.ConditionReady)).To(BeTrue())
			}).Should(Succeed())
			toolSecret := &corev1.Secret{}
			Expect(sys.HubClient.Get(ctx(), types(tenant, "security-tool"), toolSecret)).To(Succeed())
			tool := writePair("tenant-tool", toolSecret)
			leaf := must(certs.ParseCertificates(toolSecret.Data[corev1.TLSCertKey]))[0]
			Expect(leaf.ExtKeyUsage).To(ConsistOf(x509.ExtKeyUsageClientAuth), "a tenant's certificate is client-only by default")
			for _, cluster := range clusterNames() {
				_, err := grpcHealthzAs(tool.cert, tool.key, ca, cluster)
				Expect(err).To(MatchError(ContainSubstring("forbidden")), "no grant yet: gRPC, %s", cluster)
				_, err = curlHealthzAs(tool.cert, tool.key, ca, cluster)
				Expect(err).To(MatchError(ContainSubstring("403")), "no grant yet: CONNECT, %s", cluster)
			}

			By("the hub's RBAC grants the certificate cluster1, and nothing else")
			user, _ := contract.CertificateIdentity(tenant, "security-tool")
			role := "security-tenant-tool"
			createOrExists(sys.HubClient, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{gatewayGroup}, Resources: []string{"clusters/proxy"}, ResourceNames: []string{localsystem.ProxiedCluster},
				Verbs: []string{"get"}}}})
			createOrExists(sys.HubClient, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}})
			DeferCleanup(func() {
				_ = sys.HubClient.Delete(ctx(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role}})
				_ = sys.HubClient.Delete(ctx(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}})
			})
			// The proxy-servers keep the hub's answers for 10 s.
			Eventually(func() (string, error) { return grpcHealthzAs(tool.cert, tool.key, ca, localsystem.ProxiedCluster) }).Should(Equal("ok"))
			Eventually(func() (string, error) { return curlHealthzAs(tool.cert, tool.key, ca, localsystem.ProxiedCluster) }).Should(Equal("ok"))
			_, err := grpcHealthzAs(tool.cert, tool.key, ca, localsystem.DigitCluster)
			Expect(err).To(MatchError(ContainSubstring("forbidden")), "the cluster the hub did not grant")
		})

		It("issues nothing into a Secret that a writer of ProxyCertificates retargets the impersonator's certificate to", func() {
			key := types(localsystem.Namespace, proxyv1alpha1.ImpersonatorSecretName)
			// The configuration's reconciler puts the rendered secretName back; an attacker writes it again, as often
			// as it takes: the certificate's controller sees the retargeted spec every time.
			retargets := 0
			retarget := func(g Gomega) {
				pc := &proxyv1alpha1.ProxyCertificate{}
				g.Expect(sys.HubClient.Get(ctx(), key, pc)).To(Succeed())
				if pc.Spec.SecretName == "stolen" {
					return
				}
				before := pc.DeepCopy()
				pc.Spec.SecretName = "stolen"
				g.Expect(sys.HubClient.Patch(ctx(), pc, client.MergeFrom(before))).To(Succeed())
				retargets++
			}
			retarget(Default)
			DeferCleanup(func() {
				Eventually(func() error {
					live := &proxyv1alpha1.ProxyCertificate{}
					if err := sys.HubClient.Get(ctx(), key, live); err != nil {
						return err
					}
					if live.Spec.SecretName == proxyv1alpha1.ImpersonatorSecretName {
						return nil
					}
					undo := live.DeepCopy()
					undo.Spec.SecretName = proxyv1alpha1.ImpersonatorSecretName
					return sys.HubClient.Patch(ctx(), undo, client.MergeFrom(live))
				}).Should(Succeed())
			})
			Consistently(func(g Gomega) {
				retarget(g)
				err := sys.HubClient.Get(ctx(), types(localsystem.Namespace, "stolen"), &corev1.Secret{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the impersonator's key was issued into a Secret of the writer's choosing")
			}).WithTimeout(15 * time.Second).Should(Succeed())
			AddReportEntry("times the impersonator's certificate was retargeted", retargets)
		})

		It("answers Bearer garbage to an allow-listed service with 401, and serves a token of the cluster", func() {
			path := "/api/v1/namespaces/" + workloadNamespace + "/services/http:probe:80/proxy-service/healthz"
			for _, cluster := range clusterNames() {
				garbage := userRESTConfig(userKubeconfig(cluster, "garbage", "garbage"))
				code, body := rawGet(garbage, path)
				Expect(code).To(Equal(http.StatusUnauthorized), "%s: %s", cluster, body)
				viewer := userRESTConfig(userKubeconfig(cluster, "viewer", viewerToken(cluster)))
				code, body = rawGet(viewer, path)
				Expect(code).To(Equal(http.StatusOK), "%s: %s", cluster, body)
			}
		})

		It("answers a hub token or a hub client certificate sent straight to the aggregated API's port with 401", func() {
			pod := proxyServerPods(Default)[0]
			port := must(portForward(sys.Hub.Kubeconfig, nil, localsystem.Namespace, "pod/"+pod, proxyv1alpha1.GatewayPort))
			target := fmt.Sprintf("https://127.0.0.1:%d/apis/%s/v1alpha1/clusters/%s/proxy/api", port, gatewayGroup, localsystem.ProxiedCluster)
			direct := func(cert []tls.Certificate, header http.Header) int {
				GinkgoHelper()
				hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
					Certificates: cert, MinVersion: tls.VersionTLS12,
					InsecureSkipVerify: true, //nolint:gosec // who the server is does not matter here: what it accepts does
				}}}
				req := must(http.NewRequestWithContext(ctx(), http.MethodGet, target, nil))
				req.Header = header
				resp, err := hc.Do(req)
				Expect(err).NotTo(HaveOccurred())
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode
			}
			Expect(direct(nil, http.Header{"Authorization": {"Bearer " + hubUserToken()}})).To(Equal(http.StatusUnauthorized),
				"a hub token, past the hub's audit log")
			admin := must(tls.X509KeyPair(sys.Hub.Config.CertData, sys.Hub.Config.KeyData))
			Expect(direct([]tls.Certificate{admin}, http.Header{})).To(Equal(http.StatusUnauthorized), "the hub admin's client certificate")
			Expect(direct(nil, http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}})).
				To(Equal(http.StatusUnauthorized), "front-proxy headers without the front proxy's certificate")
		})
	})
}

// secretPair is the kubernetes.io/tls Secret name of the proxy-server namespace.
func secretPair(name string) *corev1.Secret {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, name), s)).To(Succeed())
	return s
}

type pairFiles struct{ cert, key string }

// writePair writes the pair of a TLS Secret to files, as a program that mounts it has them.
func writePair(name string, s *corev1.Secret) pairFiles {
	GinkgoHelper()
	dir := filepath.Join(workDir, "pairs", name)
	Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
	p := pairFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	Expect(os.WriteFile(p.cert, s.Data[corev1.TLSCertKey], 0o600)).To(Succeed())
	Expect(os.WriteFile(p.key, s.Data[corev1.TLSPrivateKeyKey], 0o600)).To(Succeed())
	return p
}

// serviceProxyGet sends GET path with header to cluster's service-proxy, in TLS with the client certificate cert,
// through the gRPC frontend with the proxy-client, as the proxy-servers send hub users.
func serviceProxyGet(cluster string, cert tls.Certificate, path string, header http.Header) (int, string, error) {
	c, cancel := context.WithTimeout(ctx(), 20*time.Second)
	defer cancel()
	conn, err := proxies().Dialer(cluster).DialContext(c, "tcp", fmt.Sprintf("%s:%d", cluster, contract.ServiceProxyPort))
	if err != nil {
		return 0, "", fmt.Errorf("tunnel: %w", err)
	}
	defer conn.Close()
	// The certificate goes whatever CAs the service-proxy names as acceptable (crypto/tls would send none of another
	// CA): an attacker sends what it has.
	tc := tls.Client(conn, &tls.Config{MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		InsecureSkipVerify:   true}) //nolint:gosec // the agent's certificate is not what this checks
	req := must(http.NewRequestWithContext(c, http.MethodGet, "https://"+cluster+path, nil))
	req.Header = header
	if err := tc.HandshakeContext(c); err != nil {
		return 0, "", fmt.Errorf("tls handshake: %w", err)
	}
	if err := req.Write(tc); err != nil {
		return 0, "", fmt.Errorf("tls: write: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		return 0, "", fmt.Errorf("tls: read: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// rawGet GETs path with cfg (a user-server kubeconfig's) and returns the code and body.
func rawGet(cfg *rest.Config, path string) (int, string) {
	GinkgoHelper()
	hc := must(rest.HTTPClientFor(cfg))
	req := must(http.NewRequestWithContext(ctx(), http.MethodGet, cfg.Host+path, nil))
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// interceptingProxy is an HTTPS forward proxy that terminates the TLS of every CONNECT instead of tunnelling it,
// with a certificate its CA issues for the host asked for: what a TLS-inspecting corporate proxy does.
type interceptingProxy struct {
	ln         net.Listener
	ca         *certs.KeyPair
	mu         sync.Mutex
	connects   []string
	handshakes []error // the result of each handshake it served as the CONNECT's destination
}

// startInterceptingProxy listens on ip with a certificate of ca for ip (the proxy hop the agent's caBundle trusts).
func startInterceptingProxy(ip net.IP, ca *certs.KeyPair) *interceptingProxy {
	GinkgoHelper()
	hop := must(certs.IssueLeaf(ca, certs.LeafSpec{CommonName: ip.String(), IPAddresses: []net.IP{ip},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, time.Now()))
	pair := must(tls.X509KeyPair(hop.CertPEM, hop.KeyPEM))
	p := &interceptingProxy{ca: ca}
	p.ln = must(tls.Listen("tcp", net.JoinHostPort(ip.String(), "0"), &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	go func() {
		for {
			conn, err := p.ln.Accept()
			if err != nil {
				return
			}
			go p.serve(conn)
		}
	}()
	return p
}

func (p *interceptingProxy) url() string { return "https://" + p.ln.Addr().String() }

func (p *interceptingProxy) close() { _ = p.ln.Close() }

func (p *interceptingProxy) seen() ([]string, []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.connects...), append([]error(nil), p.handshakes...)
}

func (p *interceptingProxy) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	req, err := http.ReadRequest(r)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	host, _, err := net.SplitHostPort(req.Host)
	if err != nil {
		return
	}
	forged, err := certs.IssueLeaf(p.ca, certs.LeafSpec{CommonName: host, DNSNames: []string{host},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, time.Now())
	if err != nil {
		return
	}
	pair, err := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM)
	if err != nil {
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	inner := tls.Server(&bufferedConn{Conn: conn, r: r}, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	err = inner.Handshake()
	p.mu.Lock()
	p.connects = append(p.connects, req.Host)
	p.handshakes = append(p.handshakes, err)
	p.mu.Unlock()
}

// bufferedConn reads what its reader buffered past the CONNECT request first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
