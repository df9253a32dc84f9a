package serviceproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// newHTTPTransport is the base of both transports: kept-alive connections, HTTP/1.1 only so that SPDY and websocket
// upgrades (exec, attach, port-forward) work, no transparent gzip (bodies pass through as they are), no forward proxy
// (targets are inside the cluster).
func newHTTPTransport(dial dialFunc, tlsConfig *tls.Config) *http.Transport {
	if tlsConfig != nil {
		tlsConfig.NextProtos = []string{"http/1.1"}
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		TLSClientConfig:       tlsConfig,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// newKubeTransport trusts the CA of cfg and presents no credential of its own: requests carry either the caller's
// token or, when impersonating, the agent's token in their Authorization header. A client certificate in cfg is left
// out on purpose: the apiserver would authenticate it ahead of the caller's token.
func newKubeTransport(cfg *rest.Config, dial dialFunc) (*http.Transport, error) {
	tlsOnly := &rest.Config{Host: cfg.Host, TLSClientConfig: rest.TLSClientConfig{
		Insecure:   cfg.Insecure,
		ServerName: cfg.ServerName,
		CAFile:     cfg.CAFile,
		CAData:     cfg.CAData,
	}}
	tlsConfig, err := rest.TLSConfigFor(tlsOnly)
	if err != nil {
		return nil, fmt.Errorf("serviceproxy: kube-apiserver TLS: %w", err)
	}
	return newHTTPTransport(dial, tlsConfig), nil
}

// newServiceTransport trusts the system roots and extra. crypto/tls takes a single root pool and a pool cannot be
// merged into another, so the chain is verified here against each pool in turn, with the usual host name check.
func newServiceTransport(extra *x509.CertPool, dial dialFunc) *http.Transport {
	if extra == nil {
		return newHTTPTransport(dial, &tls.Config{MinVersion: tls.VersionTLS12})
	}
	return newHTTPTransport(dial, &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is not skipped: VerifyConnection below does it, for every handshake, resumed ones included.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServerChain(cs, extra)
		},
	})
}

// verifyServerChain accepts the server's certificate if it chains to the system roots or to extra and is valid for
// the server name that was dialed.
func verifyServerChain(cs tls.ConnectionState, extra *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the service presented no certificate")
	}
	if cs.ServerName == "" {
		return errors.New("no server name to verify the service's certificate against")
	}
	intermediates := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	opts := x509.VerifyOptions{DNSName: cs.ServerName, Intermediates: intermediates}
	_, sysErr := cs.PeerCertificates[0].Verify(opts) // nil Roots: the system roots
	if sysErr == nil {
		return nil
	}
	opts.Roots = extra
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("verify the service's certificate: %w", err)
	}
	return nil
}
