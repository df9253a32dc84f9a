//go:build bench

package dataplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// rsaFrontend is a second mTLS frontend of the baseline's ProxyServer whose CA, serving and client certificates are
// RSA-2048, the key type of the library-go signer OCM uses and of the anchor figures in docs/performance.md#targets. Only the per-request
// row uses it: a new tunnel's handshake is where the key type shows.
type rsaFrontend struct {
	addr      string
	clientTLS *tls.Config
}

func startRSAFrontend(t *testing.T, ps client.ProxyServiceServer, keepaliveTime time.Duration) *rsaFrontend {
	t.Helper()
	caKey, caCert := rsaCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "bench-rsa-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, nil, nil)
	leaf := func(cn string, usage x509.ExtKeyUsage, ips []net.IP) tls.Certificate {
		key, cert := rsaCert(t, &x509.Certificate{
			Subject: pkix.Name{CommonName: cn}, IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}, caCert, caKey)
		return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	server := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12,
			Certificates: []tls.Certificate{leaf("anp-server-rsa", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})},
		})),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime}),
	)
	client.RegisterProxyServiceServer(server, ps)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = server.Serve(ln) }()
	t.Cleanup(server.Stop)
	return &rsaFrontend{addr: ln.Addr().String(), clientTLS: &tls.Config{
		RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{leaf("anp-client-rsa", x509.ExtKeyUsageClientAuth, nil)},
	}}
}

// rsaCert makes an RSA-2048 key and a certificate from tmpl, signed by parent (self-signed when parent is nil).
func rsaCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *rsa.PrivateKey) (*rsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	must(t, err)
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return key, cert
}
