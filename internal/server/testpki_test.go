package server

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// testPKI is a throw-away CA that issues the certificates a test needs, written to files as the Secrets would be.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  crypto.Signer
	caFile string
	rsa    bool
}

type leafSpec struct {
	cn     string
	orgs   []string
	ous    []string
	uris   []string // URI SANs (an operator role)
	server bool     // server auth with 127.0.0.1 and localhost; client auth otherwise
}

func newTestPKI(t testing.TB, useRSA bool) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), rsa: useRSA}
	p.caKey = p.newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, p.caKey.Public(), p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caFile = filepath.Join(p.dir, "ca.crt")
	writePEM(t, p.caFile, "CERTIFICATE", der)
	return p
}

func (p *testPKI) newKey(t testing.TB) crypto.Signer {
	t.Helper()
	var (
		k   crypto.Signer
		err error
	)
	if p.rsa {
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue writes name.crt and name.key, replacing earlier files of that name.
func (p *testPKI) issue(t testing.TB, name string, spec leafSpec) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key := p.newKey(t)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.cn, Organization: spec.orgs, OrganizationalUnit: spec.ous},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, u := range spec.uris {
		tmpl.URIs = append(tmpl.URIs, contract.SANURL(u))
	}
	if spec.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, key.Public(), p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	writePEM(t, certFile, "CERTIFICATE", der)
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// clientTLS presents the certificate in certFile/keyFile (none when empty) and trusts the test CA.
func (p *testPKI) clientTLS(t testing.TB, certFile, keyFile string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// agentCert issues an agent client certificate for cluster with the subject the operator's signer issues (without
// the agent namespace OU when namespace is empty).
func (p *testPKI) agentCert(t testing.TB, name, cluster, namespace string) (certFile, keyFile string) {
	t.Helper()
	subject := contract.AgentCertificateSubject(cluster, namespace, "SHA256:0123456789abcdef0123")
	spec := leafSpec{cn: subject.CommonName, orgs: subject.Organizations, ous: subject.OrganizationalUnits}
	if namespace == "" {
		spec.ous = spec.ous[:1]
	}
	certFile, keyFile, _ = p.issue(t, name, spec)
	return certFile, keyFile
}
