package serviceproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

// newServiceTransport verifies https services against roots (nil: the system roots) and the name it dialed.
func newServiceTransport(dial dialFunc, roots *x509.CertPool) *http.Transport {
	return newHTTPTransport(dial, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots})
}
