package hubidentity

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// ImpersonatorTLSConfig is the TLS client side of a tunnel to cluster's service-proxy that carries hub users. It
// presents cert (the impersonator certificate, which is what makes the service-proxy serve Impersonate-* headers) and
// accepts only the certificate of cluster's own agent, verified against roots (the CA bundle agent certificates are
// checked against): hub users are never sent to an agent of another cluster, whatever routed the tunnel. Both are read
// at every handshake, so renewals and CA rollovers apply at once.
func ImpersonatorTLSConfig(cluster string, cert func() *tls.Certificate, roots func() *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := cert(); c != nil {
				return c, nil
			}
			return nil, errors.New("no impersonator certificate loaded")
		},
		// The agent's certificate is a client certificate naming its cluster, not a host name: it is verified below.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection against roots and the cluster name
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyAgent(cs, cluster, roots())
		},
	}
}

func verifyAgent(cs tls.ConnectionState, cluster string, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the service-proxy sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("the service-proxy's certificate: %w", err)
	}
	if got, ok := contract.ClusterOfAgentCommonName(leaf.Subject.CommonName); !ok || got != cluster {
		return fmt.Errorf("the service-proxy's certificate is not cluster %s's agent certificate (common name %q)", cluster, leaf.Subject.CommonName)
	}
	return nil
}
