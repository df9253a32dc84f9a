//go:build e2e

package squid

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestSquidTunnelsOverTLSAndPlainHTTP runs the real squid and goes through both of its ports the way client-go does
// with a kubeconfig's proxy-url: over TLS to the proxy trusting CA() next to the server's CA, and over plain HTTP.
func TestSquidTunnelsOverTLSAndPlainHTTP(t *testing.T) {
	g := NewWithT(t)
	target := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer target.Close()
	squid, err := Start(filepath.Join(t.TempDir(), "squid"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = squid.Stop() }()
	g.Expect(squid.URL()).To(HavePrefix("http://127.0.0.1:"))
	g.Expect(squid.TLSURL()).To(HavePrefix("https://127.0.0.1:"))
	g.Expect(squid.TLSURL()).NotTo(Equal("https"+squid.URL()[len("http"):]), "a port of its own")

	get := func(proxyURL string, roots *x509.CertPool) error {
		proxy, err := url.Parse(proxyURL)
		if err != nil {
			return err
		}
		transport := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}
		defer transport.CloseIdleConnections()
		resp, err := (&http.Client{Transport: transport}).Get(target.URL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(string(body)).To(Equal("ok"))
		return err
	}
	serverOnly := x509.NewCertPool()
	serverOnly.AddCert(target.Certificate())
	both := serverOnly.Clone()
	g.Expect(both.AppendCertsFromPEM(squid.CA())).To(BeTrue(), "CA() is PEM")

	g.Expect(get(squid.TLSURL(), both)).To(Succeed(), "TLS to the proxy, trusting its CA and the server's")
	g.Expect(get(squid.TLSURL(), serverOnly)).To(MatchError(ContainSubstring("certificate")), "the proxy's CA is needed")
	g.Expect(get(squid.URL(), serverOnly)).To(Succeed(), "plain HTTP to the proxy")

	g.Expect(squid.Stop()).To(Succeed())
	targetAddr := target.Listener.Addr().String()
	g.Expect(squid.Tunnels()).To(ConsistOf(Tunnel{Target: targetAddr, TLS: true}, Tunnel{Target: targetAddr, TLS: false}),
		"the untrusted TLS handshake never reached CONNECT")

	g.Expect(squid.Start()).To(Succeed(), "it starts again on the same ports")
	g.Expect(get(squid.TLSURL(), both)).To(Succeed())
}
