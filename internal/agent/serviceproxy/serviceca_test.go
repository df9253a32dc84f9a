package serviceproxy

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
)

// writeServiceCAFile replaces path with data the way the kubelet updates a volume: a reader sees the old content or
// the new, never part of it.
func writeServiceCAFile(path string, data []byte) {
	GinkgoHelper()
	tmp := path + ".tmp"
	Expect(os.WriteFile(tmp, data, 0o600)).To(Succeed())
	Expect(os.Rename(tmp, path)).To(Succeed())
}

// fakeSystemRoots stands in for the system roots: a pool of cas.
func fakeSystemRoots(cas ...*certs.KeyPair) func() (*x509.CertPool, error) {
	return func() (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		for _, ca := range cas {
			pool.AddCert(ca.Cert)
		}
		return pool, nil
	}
}

// serviceCAs is the service transport of p's handler, built with a ServiceCAFile.
func (p *proxyUnderTest) serviceCAs() *serviceCATransport {
	GinkgoHelper()
	t, ok := p.handler.(*proxy).services.Transport.(*serviceCATransport)
	Expect(ok).To(BeTrue(), "the service transport follows a CA file")
	return t
}

var _ = Describe("https services and the service CA file", func() {
	allowed := allowlist.List{{Namespace: teamNamespace, Name: "secure"}}
	// The services of a spec all answer to secure.team.svc, one port each.
	const first, second = "8443", "9443"

	// request sends GET / to secure.team.svc:<port> over https through p.
	request := func(ctx SpecContext, p *proxyUnderTest, port string) (int, []byte) {
		GinkgoHelper()
		return rawRequest(ctx, p, http.MethodGet, "/", serviceHeaders("https", teamNamespace, "secure", port))
	}
	expectReached := func(ctx SpecContext, p *proxyUnderTest, port, name string) {
		GinkgoHelper()
		code, body := request(ctx, p, port)
		Expect(code).To(Equal(http.StatusOK), "body: %s", body)
		Expect(string(body)).To(Equal("hello from " + name))
	}
	expectRefused := func(ctx SpecContext, p *proxyUnderTest, port string) {
		GinkgoHelper()
		code, body := request(ctx, p, port)
		Expect(code).To(Equal(http.StatusBadGateway), "body: %s", body)
		Expect(expectStatus(body, http.StatusBadGateway, metav1.StatusReasonInternalError).Message).To(ContainSubstring("certificate"))
	}

	// secureService is an https service whose certificate for secure.team.svc is signed by ca.
	secureService := func(name string, ca *certs.KeyPair) *echoService {
		GinkgoHelper()
		return newEchoService(name, servingCertFrom(ca, "secure.team.svc"))
	}
	// route sends secure.team.svc's port first to a and its port second to b.
	route := func(p *proxyUnderTest, a, b *echoService) {
		p.dialer.route("secure.team.svc:"+first, a.Listener.Addr().String())
		p.dialer.route("secure.team.svc:"+second, b.Listener.Addr().String())
	}

	var caFile string
	BeforeEach(func() {
		caFile = filepath.Join(GinkgoT().TempDir(), "service-ca.crt")
	})

	It("reaches an https service whose CA is in the file, still checking the name it dialed", func(ctx SpecContext) {
		ca := newServiceCA("team-ca")
		secure := secureService("secure", ca)
		misnamed := newEchoService("misnamed", servingCertFrom(ca, "other.team.svc"))
		writeServiceCAFile(caFile, ca.CertPEM)
		p := startProxy(func(o *Options) { o.Allowed = allowed; o.ServiceCAFile = caFile })
		route(p, secure, misnamed)

		expectReached(ctx, p, first, "secure")
		Expect(secure.requests()).To(HaveLen(1))

		By("refusing a certificate of the same CA issued for another name")
		expectRefused(ctx, p, second)
		Expect(misnamed.requests()).To(BeEmpty())
	})

	It("trusts a rewritten file without a restart: the new CA's service is reached and the old CA's refused", func(ctx SpecContext) {
		oldCA, newCA := newServiceCA("old-ca"), newServiceCA("new-ca")
		before, after := secureService("before", oldCA), secureService("after", newCA)
		writeServiceCAFile(caFile, oldCA.CertPEM)
		p := startProxy(func(o *Options) {
			o.Allowed = allowed
			o.ServiceCAFile = caFile
			o.ServiceCACheckInterval = 20 * time.Millisecond
		})
		route(p, before, after)
		expectReached(ctx, p, first, "before")
		expectRefused(ctx, p, second)

		writeServiceCAFile(caFile, newCA.CertPEM)
		Eventually(func(g Gomega) {
			code, body := request(ctx, p, second)
			g.Expect(code).To(Equal(http.StatusOK), "body: %s", body)
			g.Expect(string(body)).To(Equal("hello from after"))
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())

		By("refusing the old CA's service: the pooled connection verified under the old file is not reused")
		expectRefused(ctx, p, first)
		Expect(before.requests()).To(HaveLen(1))
	})

	It("keeps the system roots when the file holds no PEM certificate", func(ctx SpecContext) {
		publicCA, privateCA := newServiceCA("public-ca"), newServiceCA("private-ca")
		public, private := secureService("public", publicCA), secureService("private", privateCA)
		writeServiceCAFile(caFile, []byte("service-ca.crt: not a certificate\n"))
		p := startProxy(func(o *Options) {
			o.Allowed = allowed
			o.ServiceCAFile = caFile
			o.systemRoots = fakeSystemRoots(publicCA)
		})
		route(p, public, private)

		expectReached(ctx, p, first, "public")
		expectRefused(ctx, p, second)
		Expect(private.requests()).To(BeEmpty())
	})

	It("follows the file of an optional ConfigMap: trusted once it appears, kept when it breaks, dropped when it goes", func(ctx SpecContext) {
		publicCA, privateCA := newServiceCA("public-ca"), newServiceCA("private-ca")
		public, private := secureService("public", publicCA), secureService("private", privateCA)
		p := startProxy(func(o *Options) {
			o.Allowed = allowed
			o.ServiceCAFile = caFile // not written yet
			o.ServiceCACheckInterval = 20 * time.Millisecond
			o.systemRoots = fakeSystemRoots(publicCA)
		})
		route(p, public, private)
		expectReached(ctx, p, first, "public")
		expectRefused(ctx, p, second)

		By("trusting the file once it appears")
		writeServiceCAFile(caFile, privateCA.CertPEM)
		Eventually(func(g Gomega) {
			code, body := request(ctx, p, second)
			g.Expect(code).To(Equal(http.StatusOK), "body: %s", body)
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
		expectReached(ctx, p, first, "public")

		By("reporting a file without a PEM certificate and keeping what was trusted")
		writeServiceCAFile(caFile, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"))
		Expect(p.serviceCAs().check()).To(MatchError(And(ContainSubstring(caFile), ContainSubstring("no PEM certificate"))))
		expectReached(ctx, p, second, "private")
		expectReached(ctx, p, first, "public")

		By("trusting the system roots only once the file is gone")
		Expect(os.Remove(caFile)).To(Succeed())
		Eventually(func(g Gomega) {
			code, body := request(ctx, p, second)
			g.Expect(code).To(Equal(http.StatusBadGateway), "body: %s", body)
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
		expectReached(ctx, p, first, "public")
	})
})

func TestServiceCAFileIsReadAtMostOncePerIntervalAndOnlyAChangeRebuildsTheTransport(t *testing.T) {
	g := NewWithT(t)
	ca, err := certs.NewCA("team-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	system := x509.NewCertPool()
	withCA := x509.NewCertPool()
	withCA.AddCert(ca.Cert)
	file := filepath.Join(t.TempDir(), "service-ca.crt")
	write := func(data []byte) { g.Expect(os.WriteFile(file, data, 0o600)).To(Succeed()) }

	var built []*x509.CertPool // the roots of every transport built
	tr := newServiceCATransport(file, 5*time.Second, system, func(roots *x509.CertPool) *http.Transport {
		built = append(built, roots)
		return &http.Transport{}
	})
	g.Expect(built).To(HaveLen(1), "one transport at start")
	g.Expect(built[0].Equal(system)).To(BeTrue(), "no file: the system roots only")
	now := time.Now()
	tr.now = func() time.Time { return now }
	tr.nextCheck.Store(now.Add(tr.interval).UnixNano())
	after := func(d time.Duration) { now = now.Add(d); tr.checkIfDue() }

	write(ca.CertPEM)
	after(4 * time.Second)
	g.Expect(built).To(HaveLen(1), "not read again within the interval")
	after(time.Second)
	g.Expect(built).To(HaveLen(2), "read once the interval passed")
	g.Expect(built[1].Equal(withCA)).To(BeTrue(), "the system roots and the file's CA")
	g.Expect(tr.current.Load()).NotTo(BeNil())

	after(5 * time.Second)
	g.Expect(built).To(HaveLen(2), "the same content builds nothing")

	inUse := tr.current.Load()
	write([]byte("garbage"))
	after(5 * time.Second)
	g.Expect(built).To(HaveLen(2), "no PEM certificate: the trust in effect stays")
	g.Expect(tr.current.Load()).To(BeIdenticalTo(inUse))

	g.Expect(os.Remove(file)).To(Succeed())
	after(5 * time.Second)
	g.Expect(built).To(HaveLen(3))
	g.Expect(built[2].Equal(system)).To(BeTrue(), "the file is gone: the system roots only")
	g.Expect(system.Equal(x509.NewCertPool())).To(BeTrue(), "the system pool itself is never changed")

	write(ca.CertPEM)
	g.Expect(tr.check()).To(Succeed())
	g.Expect(built).To(HaveLen(4))
	g.Expect(built[3].Equal(withCA)).To(BeTrue(), "back again")
}

func TestServiceCAFileThatIsInvalidAtStartTrustsTheSystemRoots(t *testing.T) {
	g := NewWithT(t)
	system := x509.NewCertPool()
	file := filepath.Join(t.TempDir(), "service-ca.crt")
	g.Expect(os.WriteFile(file, []byte("not PEM"), 0o600)).To(Succeed())
	var built []*x509.CertPool
	tr := newServiceCATransport(file, time.Second, system, func(roots *x509.CertPool) *http.Transport {
		built = append(built, roots)
		return &http.Transport{}
	})
	g.Expect(built).To(HaveLen(1))
	g.Expect(built[0].Equal(system)).To(BeTrue())
	g.Expect(tr.current.Load()).NotTo(BeNil())
	g.Expect(tr.check()).To(Succeed(), "the same bad content is reported once, when it is first read")
}

func TestServiceCAFileTrustsItsCertificatesAndSkipsOtherBlocks(t *testing.T) {
	g := NewWithT(t)
	ca, err := certs.NewCA("team-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	withCA := x509.NewCertPool()
	withCA.AddCert(ca.Cert)
	file := filepath.Join(t.TempDir(), "service-ca.crt")
	broken := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	g.Expect(os.WriteFile(file, append(append(append([]byte("text before\n"), ca.KeyPEM...), broken...), ca.CertPEM...), 0o600)).To(Succeed())
	var built []*x509.CertPool
	tr := newServiceCATransport(file, time.Second, x509.NewCertPool(), func(roots *x509.CertPool) *http.Transport {
		built = append(built, roots)
		return &http.Transport{}
	})
	g.Expect(built).To(HaveLen(1))
	g.Expect(built[0].Equal(withCA)).To(BeTrue(), "the one certificate, not the text, the key or the block that does not parse")

	for name, data := range map[string][]byte{"a key alone": ca.KeyPEM, "an empty file": nil} {
		g.Expect(os.WriteFile(file, data, 0o600)).To(Succeed())
		g.Expect(tr.check()).To(MatchError(ContainSubstring("no PEM certificate")), name)
		g.Expect(built).To(HaveLen(1), "%s: the trust in effect stays", name)
	}
}
