package serviceproxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
)

// seenRequest is what a test service received.
type seenRequest struct {
	method, path, query, host string
	header                    http.Header
}

// echoService is a test service on 127.0.0.1 that records the requests it gets and answers "hello from <name>".
type echoService struct {
	*httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

func newEchoService(name string, tlsCert *tls.Certificate) *echoService {
	GinkgoHelper()
	s := &echoService{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, seenRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone()})
		s.mu.Unlock()
		_, _ = fmt.Fprintf(w, "hello from %s", name)
	}))
	// The negative TLS specs make handshakes fail on purpose; keep their log lines in the spec's output.
	s.Config.ErrorLog = log.New(GinkgoWriter, name+": ", 0)
	if tlsCert != nil {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{*tlsCert}}
		s.StartTLS()
	} else {
		s.Start()
	}
	DeferCleanup(s.Close)
	return s
}

func (s *echoService) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

// serviceHeaders are the headers the user-server sets for a service request.
func serviceHeaders(proto, ns, name, port string) map[string][]string {
	return map[string][]string{
		"Cluster-Proxy-Proto": {proto}, "Cluster-Proxy-Namespace": {ns}, "Cluster-Proxy-Service": {name}, "Cluster-Proxy-Port": {port},
	}
}

func merge(maps ...map[string][]string) map[string][]string {
	out := map[string][]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// servingCert is a certificate for dnsName from a CA of its own, which nothing trusts.
func servingCert(dnsName string) *tls.Certificate {
	GinkgoHelper()
	return servingCertFrom(newServiceCA("service-ca"), dnsName)
}

// newServiceCA is a CA for test services; its CertPEM is what a service CA file holds.
func newServiceCA(name string) *certs.KeyPair {
	GinkgoHelper()
	ca, err := certs.NewCA(name, time.Hour, time.Now())
	Expect(err).NotTo(HaveOccurred())
	return ca
}

// servingCertFrom is a certificate for dnsName signed by ca.
func servingCertFrom(ca *certs.KeyPair, dnsName string) *tls.Certificate {
	GinkgoHelper()
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: dnsName, DNSNames: []string{dnsName},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, time.Now())
	Expect(err).NotTo(HaveOccurred())
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	Expect(err).NotTo(HaveOccurred())
	return &cert
}

// teamServices is the allow-list of the service and service tunnel specs.
var teamServices = allowlist.List{
	{Namespace: teamNamespace, Name: "echo", Port: 8080},
	{Namespace: teamNamespace, Name: "secure"},
	{Namespace: teamNamespace, Name: "stream", Port: 8080},
}

var _ = Describe("service requests", func() {

	It("reach an allow-listed service with the path, query and headers, the caller's Authorization included", func(ctx SpecContext) {
		p := startProxy(func(o *Options) { o.Allowed = teamServices })
		echo := newEchoService("echo", nil)
		p.dialer.route("echo.team.svc:8080", echo.Listener.Addr().String())

		code, body := rawRequest(ctx, p, http.MethodGet, "/metrics/a%2Fb?x=1&y=2", merge(serviceHeaders("http", teamNamespace, "echo", "8080"),
			map[string][]string{"Authorization": {"Bearer service-decides"}, "X-Custom": {"kept"}, "Impersonate-User": {"as-sent"}}))
		Expect(code).To(Equal(http.StatusOK), "body: %s", body)
		Expect(string(body)).To(Equal("hello from echo"))
		Expect(echo.requests()).To(HaveLen(1))
		seen := echo.requests()[0]
		Expect(seen.method).To(Equal(http.MethodGet))
		Expect(seen.path).To(Equal("/metrics/a/b"))
		Expect(seen.query).To(Equal("x=1&y=2"))
		Expect(seen.host).To(Equal("echo.team.svc:8080"))
		Expect(seen.header.Get("Authorization")).To(Equal("Bearer service-decides"))
		Expect(seen.header.Get("X-Custom")).To(Equal("kept"))
		Expect(seen.header.Get("Impersonate-User")).To(Equal("as-sent"), "no impersonation for services: the header is the service's business")
		for k := range seen.header {
			Expect(strings.ToLower(k)).NotTo(HavePrefix("cluster-proxy-"))
		}
		Expect(p.managedReviews.Load()).To(BeZero(), "services authenticate their callers themselves")

		By("defaulting the scheme to https")
		code, body = rawRequest(ctx, p, http.MethodGet, "/", map[string][]string{
			"Cluster-Proxy-Namespace": {teamNamespace}, "Cluster-Proxy-Service": {"echo"}, "Cluster-Proxy-Port": {"8080"},
		})
		Expect(code).To(Equal(http.StatusBadGateway), "an https handshake with a plain-HTTP server fails")
		expectStatus(body, http.StatusBadGateway, metav1.StatusReasonInternalError)
		Expect(echo.requests()).To(HaveLen(1))
	})

	It("refuses a service that is not allow-listed with 403 and dials nothing", func(ctx SpecContext) {
		p := startProxy(func(o *Options) { o.Allowed = teamServices })
		for _, h := range []map[string][]string{
			serviceHeaders("http", teamNamespace, "other", "8080"),
			serviceHeaders("http", teamNamespace, "echo", "9090"),
			serviceHeaders("http", agentNamespace, "echo", "8080"),
		} {
			code, body := rawRequest(ctx, p, http.MethodGet, "/", h)
			Expect(code).To(Equal(http.StatusForbidden))
			expectStatus(body, http.StatusForbidden, metav1.StatusReasonForbidden)
		}
		Expect(p.dialer.dialedAddrs()).To(BeEmpty())
	})

	It("refuses missing or malformed Cluster-Proxy-* headers with 400 and dials nothing", func(ctx SpecContext) {
		p := startProxy(func(o *Options) { o.Allowed = teamServices })
		for _, h := range []map[string][]string{
			{"Cluster-Proxy-Namespace": {teamNamespace}},
			{"Cluster-Proxy-Anything": {"x"}},
			serviceHeaders("ftp", teamNamespace, "echo", "8080"),
			serviceHeaders("http", teamNamespace, "echo", "80a"),
			serviceHeaders("http", "Team", "echo", "8080"),
		} {
			code, body := rawRequest(ctx, p, http.MethodGet, "/", h)
			Expect(code).To(Equal(http.StatusBadRequest), "headers %v", h)
			expectStatus(body, http.StatusBadRequest, metav1.StatusReasonBadRequest)
		}
		Expect(p.dialer.dialedAddrs()).To(BeEmpty())
	})

	It("refuses an https service whose certificate does not chain to the system roots", func(ctx SpecContext) {
		secure := newEchoService("secure", servingCert("secure.team.svc"))
		untrusting := startProxy(func(o *Options) { o.Allowed = teamServices })
		untrusting.dialer.route("secure.team.svc:8443", secure.Listener.Addr().String())
		code, body := rawRequest(ctx, untrusting, http.MethodGet, "/", serviceHeaders("https", teamNamespace, "secure", "8443"))
		Expect(code).To(Equal(http.StatusBadGateway))
		Expect(expectStatus(body, http.StatusBadGateway, metav1.StatusReasonInternalError).Message).To(ContainSubstring("certificate"))
		Expect(secure.requests()).To(BeEmpty())
	})

	It("relays a chunked answer as it comes: the headers at once, then each chunk when the service sends it", func(ctx SpecContext) {
		next := make(chan struct{})
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_ = rc.Flush()
			for _, event := range []string{"ADDED", "MODIFIED"} {
				select { // the client must see what came before without this
				case <-next:
				case <-r.Context().Done():
					return
				}
				_, _ = fmt.Fprintf(w, `{"type":%q}`+"\n", event)
				_ = rc.Flush()
			}
		}))
		DeferCleanup(backend.Close)
		p := startProxy(func(o *Options) { o.Allowed = teamServices })
		p.dialer.route("stream.team.svc:8080", backend.Listener.Addr().String())

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/watch", nil)
		Expect(err).NotTo(HaveOccurred())
		for k, v := range serviceHeaders("http", teamNamespace, "stream", "8080") {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req) // returns with the headers, before any event
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		events := bufio.NewReader(resp.Body)
		for _, event := range []string{"ADDED", "MODIFIED"} {
			next <- struct{}{}
			Expect(events.ReadString('\n')).To(Equal(fmt.Sprintf(`{"type":%q}`+"\n", event)))
		}
	}, SpecTimeout(20*time.Second))

	It("relays an upgraded connection both ways", func(ctx SpecContext) {
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.EqualFold(r.Header.Get("Upgrade"), "SPDY/3.1") {
				http.Error(w, "upgrade expected", http.StatusBadRequest)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nhello from backend\n")
			_ = rw.Flush()
			for {
				line, err := rw.ReadString('\n')
				if err != nil {
					return
				}
				_, _ = rw.WriteString("echo: " + line)
				_ = rw.Flush()
			}
		}))
		DeferCleanup(backend.Close)
		p := startProxy(func(o *Options) { o.Allowed = teamServices })
		p.dialer.route("stream.team.svc:8080", backend.Listener.Addr().String())

		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(p.url, "http://"))
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		Expect(conn.SetDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
		_, err = io.WriteString(conn, "POST /exec HTTP/1.1\r\nHost: cluster:7443\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"+
			"Cluster-Proxy-Namespace: team\r\nCluster-Proxy-Service: stream\r\nCluster-Proxy-Port: 8080\r\nCluster-Proxy-Proto: http\r\n\r\n")
		Expect(err).NotTo(HaveOccurred())
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusSwitchingProtocols))
		Expect(resp.Header.Get("Upgrade")).To(Equal("SPDY/3.1"))
		Expect(r.ReadString('\n')).To(Equal("hello from backend\n"))
		for _, msg := range []string{"ping", "pong"} {
			_, err = io.WriteString(conn, msg+"\n")
			Expect(err).NotTo(HaveOccurred())
			Expect(r.ReadString('\n')).To(Equal("echo: " + msg + "\n"))
		}
	})
})
