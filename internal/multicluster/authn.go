package multicluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// caValidity is long because kube-controller-manager caps every certificate it signs at the CA's expiry: a short-lived
// CA would give the klusterlet a hub certificate that expires with it.
const caValidity = 10 * 365 * 24 * time.Hour

// clientCAAuthn is an envtest Authn whose client CA certificate and key are files, so kube-controller-manager can
// sign CSRs for kubernetes.io/kube-apiserver-client with the CA the hub apiserver trusts. envtest's own CertAuthn
// keeps the key in memory.
type clientCAAuthn struct {
	certFile, keyFile string
	cert              *x509.Certificate
	key               crypto.Signer
}

var _ envtest.Authn = (*clientCAAuthn)(nil)

// newClientCAAuthn creates the CA and writes ca.crt and ca.key into dir.
func newClientCAAuthn(dir string) (*clientCAAuthn, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate client CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "multicluster-hub-client-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create client CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	a := &clientCAAuthn{certFile: filepath.Join(dir, "ca.crt"), keyFile: filepath.Join(dir, "ca.key"), cert: cert, key: key}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(a.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("write client CA certificate: %w", err)
	}
	if err := os.WriteFile(a.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("write client CA key: %w", err)
	}
	return a, nil
}

func (a *clientCAAuthn) Configure(_ string, args *envtest.Arguments) error {
	args.Set("client-ca-file", a.certFile)
	return nil
}

func (a *clientCAAuthn) Start() error { return nil }

func (a *clientCAAuthn) Stop() error { return nil }

// AddUser signs a client certificate for user with the CA.
func (a *clientCAAuthn) AddUser(user envtest.User, base *rest.Config) (*rest.Config, error) {
	certPEM, keyPEM, err := a.clientCert(user.Name, user.Groups)
	if err != nil {
		return nil, fmt.Errorf("sign client certificate of %s: %w", user.Name, err)
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg, nil
}

func (a *clientCAAuthn) clientCert(name string, groups []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: groups},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}
