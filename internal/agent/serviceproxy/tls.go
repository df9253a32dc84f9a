package serviceproxy

import (
	"crypto/tls"
	"crypto/x509"
)

// ServerTLSConfig is the TLS side of the service-proxy's tunnel port. It presents cert (the agent's own certificate,
// which the hub side checks names the cluster it dialed) and verifies a client certificate, when one is sent, against
// roots (the signer's CA bundle, read at every handshake so a CA rollover applies at once). A client certificate that
// does not verify ends the handshake; a verified one reaches the handler, which serves hub identities only from the
// impersonator's.
func ServerTLSConfig(cert func() *tls.Certificate, roots func() *x509.CertPool) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		if crt := cert(); crt != nil {
			c.Certificates = []tls.Certificate{*crt}
		}
		c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, roots()
		return c, nil
	}
	return base
}
