package agent

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"
)

func TestConnectsOnlyThroughTheForwardProxy(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "http proxy"
		if overTLS {
			name = "https proxy with its own CA"
		}
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			env := newEnv(t)
			scheme, proxyCert := "http", (*tls.Certificate)(nil)
			opts := env.options(t)
			if overTLS {
				// The proxy's CA is not the hub's: the agent trusts it for the hop to the proxy only.
				proxyCA := newProxyCA(t)
				cert := proxyCA.leaf(t, "proxy", net.IPv4(127, 0, 0, 1))
				scheme, proxyCert = "https", &cert
				opts.ProxyRoots = proxyCA.roots
			}
			proxy := startConnectProxy(t, proxyCert, env.resolve)
			proxyURL := &url.URL{Scheme: scheme, Host: proxy.ln.Addr().String(), User: url.UserPassword("agent", "s3cret")}

			var mu sync.Mutex
			var dialed []string
			opts.Proxy = fixedProxy(proxyURL)
			opts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dialed = append(dialed, addr)
				mu.Unlock()
				return env.resolve.DialContext(ctx, network, addr)
			}
			a, _ := runAgent(t, opts)
			waitForTunnel(g, a, 1)
			g.Expect(env.srv.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
			body, err := env.srv.get(clusterAddress, "/bulk")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sha([]byte(body))).To(Equal(sha(bulkBody)))

			targets, auths := proxy.seen()
			g.Expect(targets).To(ConsistOf(env.srv.agentAddress()), "CONNECT targets")
			g.Expect(auths).To(ConsistOf("Basic " + base64.StdEncoding.EncodeToString([]byte("agent:s3cret"))))
			mu.Lock()
			defer mu.Unlock()
			// The proxy-server was never dialed directly; the kube-apiserver always is.
			g.Expect(dialed).NotTo(ContainElement(env.srv.agentAddress()))
			g.Expect(dialed).To(ContainElement(proxy.ln.Addr().String()))
			g.Expect(dialed).To(ContainElement(kubeName))
		})
	}
}

// proxyCA is a forward proxy's own CA, as an AddOnDeploymentConfig's proxyConfig.caBundle names it.
type proxyCA struct {
	ca   *certs.KeyPair
	pool *x509.CertPool
}

func newProxyCA(t testing.TB) *proxyCA {
	t.Helper()
	ca, err := certs.NewCA("test-proxy-ca", time.Hour, time.Now())
	must(t, err)
	p := &proxyCA{ca: ca, pool: x509.NewCertPool()}
	p.pool.AddCert(ca.Cert)
	return p
}

func (p *proxyCA) roots() *x509.CertPool { return p.pool }

// leaf is a serving certificate of the proxy's CA for name (a DNS name) and ip.
func (p *proxyCA) leaf(t testing.TB, name string, ip net.IP) tls.Certificate {
	t.Helper()
	kp, err := certs.IssueLeaf(p.ca, certs.LeafSpec{CommonName: name, DNSNames: []string{name}, IPAddresses: []net.IP{ip},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, time.Now())
	must(t, err)
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	must(t, err)
	return cert
}

// A forward proxy that terminates the CONNECT and answers as the proxy-server, with a certificate of its own CA for
// the proxy-server's name (what a TLS-inspecting corporate proxy does): the agent trusts that CA for the hop to the
// proxy, and must not trust it for the hub. Before the proxy's CA was kept apart, it sat in the agent's one bundle
// and the man in the middle completed the agent's handshake.
func TestAnHTTPSProxyWhoseCAForgesTheProxyServerGetsNoTunnel(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	proxyCA := newProxyCA(t)
	mitm := startInterceptingProxy(t, proxyCA.leaf(t, "proxy", net.IPv4(127, 0, 0, 1)), proxyCA.leaf(t, serverName, net.IPv4(127, 0, 0, 1)))
	opts := env.options(t)
	opts.Proxy = fixedProxy(&url.URL{Scheme: "https", Host: mitm.ln.Addr().String()})
	opts.ProxyRoots = proxyCA.roots
	a, _ := runAgent(t, opts)

	g.Eventually(mitm.intercepted).Should(BeNumerically(">=", 3), "the agent tried the proxy-server through the proxy")
	g.Expect(counterValue(a.metrics.connects.WithLabelValues("error"))).To(BeNumerically(">=", 2))
	g.Expect(mitm.handshakes()).To(BeZero(), "the agent completed a TLS handshake with a proxy-server its proxy's CA forged")
	g.Expect(a.Tunnels()).To(BeZero())
}

// interceptingProxy is an https forward proxy that answers each CONNECT itself: it accepts the tunnel, then serves
// TLS inside it with a forged certificate, and counts the handshakes that completed.
type interceptingProxy struct {
	ln        net.Listener
	mu        sync.Mutex
	tries, ok int
}

func startInterceptingProxy(t testing.TB, proxyCert, forged tls.Certificate) *interceptingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &interceptingProxy{ln: tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{proxyCert}, MinVersion: tls.VersionTLS12})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = p.ln.Close()
		wg.Wait()
	})
	inner := &tls.Config{Certificates: []tls.Certificate{forged}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"}}
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				if req, err := http.ReadRequest(br); err != nil || req.Method != http.MethodConnect {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
					return
				}
				p.mu.Lock()
				p.tries++
				p.mu.Unlock()
				if tls.Server(&bufferedConn{Conn: c, r: br}, inner).Handshake() == nil {
					p.mu.Lock()
					p.ok++
					p.mu.Unlock()
				}
			})
		}
	}()
	return p
}

func (p *interceptingProxy) intercepted() int { p.mu.Lock(); defer p.mu.Unlock(); return p.tries }
func (p *interceptingProxy) handshakes() int  { p.mu.Lock(); defer p.mu.Unlock(); return p.ok }

func TestForwardProxyRefusalsNameTheProxyButNotItsCredentials(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			_, _ = io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
			_ = c.Close()
		}
	}()
	d := &serverDialer{
		proxy: fixedProxy(&url.URL{Scheme: "http", Host: ln.Addr().String(), User: url.UserPassword("agent", "s3cret")}),
		dial:  resolve.Resolver(nil).DialContext,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = d.DialContext(ctx, "proxy-server.test:8091")
	g.Expect(err).To(MatchError(ContainSubstring("407")))
	g.Expect(err).To(MatchError(ContainSubstring("http://***@"+ln.Addr().String())), "the proxy named, its whole userinfo redacted")
	g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
	g.Expect(err.Error()).NotTo(ContainSubstring("agent"))
}

func TestAgentRetriesWhileTheProxyRefuses(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	_ = ln.Close() // nothing listens: the forward proxy is down
	opts := env.options(t)
	opts.Proxy = fixedProxy(&url.URL{Scheme: "http", Host: ln.Addr().String()})
	a, _ := runAgent(t, opts)
	g.Eventually(func() float64 { return counterValue(a.metrics.connects.WithLabelValues("error")) }).
		Should(BeNumerically(">=", 2))
	g.Expect(a.Tunnels()).To(BeZero())
}

func TestProxyFromEnvironment(t *testing.T) {
	server := &url.URL{Scheme: "https", Host: "proxy-server.example:8091"}
	for _, tc := range []struct {
		name                  string
		httpsProxy, httpProxy string
		noProxy               string
		target                string // the proxy-server address, proxy-server.example:8091 when empty
		want                  string // proxy host, "" for direct
		wantErr               bool
	}{
		{name: "no proxy variables: direct"},
		{name: "HTTPS_PROXY", httpsProxy: "http://proxy.example:3128", want: "proxy.example:3128"},
		{name: "HTTPS_PROXY wins over HTTP_PROXY", httpsProxy: "https://secure.example:3129", httpProxy: "http://plain.example:3128", want: "secure.example:3129"},
		{name: "HTTP_PROXY alone is used", httpProxy: "http://plain.example:3128", want: "plain.example:3128"},
		{name: "NO_PROXY exempts the proxy-server", httpsProxy: "http://proxy.example:3128", noProxy: "localhost,.example", want: ""},
		{name: "NO_PROXY for other hosts", httpsProxy: "http://proxy.example:3128", noProxy: "kubernetes.default.svc", want: "proxy.example:3128"},
		{name: "a loopback proxy-server goes through the proxy unless NO_PROXY says otherwise", httpsProxy: "http://proxy.example:3128", target: "127.0.0.1:8091", want: "proxy.example:3128"},
		{name: "NO_PROXY with the loopback IP", httpsProxy: "http://proxy.example:3128", noProxy: "127.0.0.1", target: "127.0.0.1:8091", want: ""},
		{name: "NO_PROXY with a CIDR", httpsProxy: "http://proxy.example:3128", noProxy: "10.0.0.0/8", target: "10.1.2.3:8091", want: ""},
		{name: "NO_PROXY with another port", httpsProxy: "http://proxy.example:3128", noProxy: "proxy-server.example:443", want: "proxy.example:3128"},
		{name: "NO_PROXY with the port", httpsProxy: "http://proxy.example:3128", noProxy: "proxy-server.example:8091", want: ""},
		{name: "NO_PROXY subdomains only", httpsProxy: "http://proxy.example:3128", noProxy: ".proxy-server.example", want: "proxy.example:3128"},
		{name: "NO_PROXY *", httpsProxy: "http://proxy.example:3128", noProxy: "*", want: ""},
		{name: "not a URL", httpsProxy: "http://agent:pa ss%zz@proxy", wantErr: true},
		{name: "unsupported scheme", httpsProxy: "socks5://agent:secret@proxy:1080", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "REQUEST_METHOD"} {
				t.Setenv(name, "")
			}
			t.Setenv("HTTPS_PROXY", tc.httpsProxy)
			t.Setenv("HTTP_PROXY", tc.httpProxy)
			t.Setenv("NO_PROXY", tc.noProxy)
			proxy, err := ProxyFromEnvironment()
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).NotTo(Or(ContainSubstring("pa ss"), ContainSubstring("secret")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if proxy == nil {
				g.Expect(tc.want).To(BeEmpty())
				return
			}
			target := server
			if tc.target != "" {
				target = &url.URL{Scheme: "https", Host: tc.target}
			}
			u, err := proxy(target)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == "" {
				g.Expect(u).To(BeNil())
			} else {
				g.Expect(u).NotTo(BeNil())
				g.Expect(u.Host).To(Equal(tc.want))
			}
		})
	}
}

func fixedProxy(u *url.URL) func(*url.URL) (*url.URL, error) {
	return func(*url.URL) (*url.URL, error) { return u, nil }
}

// An OIDC issuer behind an https forward proxy whose CA is not the issuer's: net/http verifies a proxy with the
// transport's own roots, the issuer's, and so fails; ForwardProxyDial verifies the proxy with the agent's bundle and
// leaves the issuer's TLS, inside the tunnel, to the transport.
func TestForwardProxyDialReachesATLSServerBehindAnHTTPSProxyWithAnotherCA(t *testing.T) {
	g := NewWithT(t)
	proxyCA, err := certs.NewCA("test-proxy-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	kp, err := certs.IssueLeaf(proxyCA, certs.LeafSpec{CommonName: "proxy", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	proxyCert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	proxy := startConnectProxy(t, &proxyCert, nil)
	proxyURL := &url.URL{Scheme: "https", Host: proxy.ln.Addr().String()}
	agentBundle := x509.NewCertPool()
	g.Expect(agentBundle.AppendCertsFromPEM(proxyCA.CertPEM)).To(BeTrue())

	issuer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "issuer") }))
	defer issuer.Close()
	issuerRoots := x509.NewCertPool()
	issuerRoots.AddCert(issuer.Certificate())
	get := func(transport *http.Transport) (string, error) {
		transport.TLSClientConfig = &tls.Config{RootCAs: issuerRoots, MinVersion: tls.VersionTLS12}
		defer transport.CloseIdleConnections()
		resp, err := (&http.Client{Transport: transport, Timeout: 5 * time.Second}).Get(issuer.URL)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	_, err = get(&http.Transport{Proxy: http.ProxyURL(proxyURL)})
	g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")), "net/http checks the proxy with the issuer's roots")

	dial := ForwardProxyDial(fixedProxy(proxyURL), resolve.Resolver(nil).DialContext, func() *x509.CertPool { return agentBundle })
	g.Expect(get(&http.Transport{DialContext: dial})).To(Equal("issuer"))
	targets, _ := proxy.seen()
	g.Expect(targets).To(ContainElement(issuer.Listener.Addr().String()), "the issuer was reached through the proxy")
}
