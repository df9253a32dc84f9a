package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

func TestSniffListenerServesPlainAndTLSOnOnePort(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	ca, err := certs.NewCA("signer", time.Hour, now)
	g.Expect(err).NotTo(HaveOccurred())
	serving, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "agent", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Duration: time.Hour}, now)
	g.Expect(err).NotTo(HaveOccurred())
	client, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "caller", Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, now)
	g.Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	servingPair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	clientPair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred())

	inner, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	ln := newSniffListener(inner, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{servingPair},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool})
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.TLS == nil:
			_, _ = fmt.Fprint(w, "plain")
		case len(r.TLS.VerifiedChains) > 0:
			_, _ = fmt.Fprint(w, "tls:"+r.TLS.VerifiedChains[0][0].Subject.CommonName)
		default:
			_, _ = fmt.Fprint(w, "tls")
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	get := func(c *http.Client, url string) string {
		resp, err := c.Get(url)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return string(body)
	}
	addr := inner.Addr().String()
	tlsClient := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}}
	}
	g.Expect(get(&http.Client{}, "http://"+addr)).To(Equal("plain"))
	g.Expect(get(tlsClient(), "https://"+addr)).To(Equal("tls"))
	g.Expect(get(tlsClient(clientPair), "https://"+addr)).To(Equal("tls:caller"))

	// A caller that sends nothing holds up nobody.
	idle, err := net.Dial("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred())
	defer idle.Close()
	g.Expect(get(&http.Client{}, "http://"+addr)).To(Equal("plain"))

	g.Expect(ln.Close()).To(Succeed())
	_, err = ln.Accept()
	g.Expect(err).To(HaveOccurred())
}
