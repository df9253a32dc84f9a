package certs

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestNewCA(t *testing.T) {
	g := NewWithT(t)
	now := t0.Add(123 * time.Millisecond)

	a, err := NewCA("proxy-ca", 365*day, now)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := NewCA("proxy-ca", 365*day, now)
	g.Expect(err).NotTo(HaveOccurred())

	cert := a.Cert
	g.Expect(cert.Subject.CommonName).To(Equal("proxy-ca"))
	g.Expect(cert.IsCA).To(BeTrue())
	g.Expect(cert.BasicConstraintsValid).To(BeTrue())
	g.Expect(cert.KeyUsage).To(Equal(x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature))
	g.Expect(cert.NotBefore).To(BeTemporally("~", now.Add(-time.Minute), time.Second))
	g.Expect(cert.NotAfter).To(BeTemporally("~", now.Add(365*day), time.Second))
	g.Expect(cert.SerialNumber.BitLen()).To(BeNumerically("<=", 128))
	g.Expect(cert.SerialNumber.Sign()).To(Equal(1))
	g.Expect(cert.SubjectKeyId).NotTo(BeEmpty())
	g.Expect(cert.Subject.SerialNumber).To(Equal(cert.SerialNumber.Text(16)))
	g.Expect(cert.CheckSignatureFrom(cert)).To(Succeed(), "self-signed")
	g.Expect(a.Key).To(BeAssignableToTypeOf(&ecdsa.PrivateKey{}))
	g.Expect(a.Key.(*ecdsa.PrivateKey).Curve.Params().Name).To(Equal("P-256"))
	g.Expect(ParseCertificates(a.CertPEM)).To(HaveLen(1))

	// Same name and time, still two distinct CAs that peers can tell apart.
	g.Expect(b.Cert.SerialNumber).NotTo(Equal(a.Cert.SerialNumber))
	g.Expect(b.Cert.RawSubject).NotTo(Equal(a.Cert.RawSubject))
	g.Expect(b.Cert.SubjectKeyId).NotTo(Equal(a.Cert.SubjectKeyId))

	// The PEM round-trips through ParseCA.
	parsed, err := ParseCA(a.CertPEM, a.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed.Cert.Raw).To(Equal(a.Cert.Raw))
}

func TestNewCARejectsBadInput(t *testing.T) {
	g := NewWithT(t)
	_, err := NewCA("", day, t0)
	g.Expect(err).To(MatchError(ContainSubstring("common name")))
	_, err = NewCA("ca", 0, t0)
	g.Expect(err).To(MatchError(ContainSubstring("validity must be positive")))
}

func TestParseCA(t *testing.T) {
	ca := mustCA(t, "test-ca", 365*day, t0)
	other := mustCA(t, "test-ca", 365*day, t0)
	leaf := mustLeaf(t, ca, LeafSpec{CommonName: "leaf", Duration: day}, t0)
	rsaCertPEM, rsaKeyPEM := userRSACA(t)

	tests := []struct {
		name       string
		crt, key   []byte
		wantErr    string // exact message; "" means success
		wantPrefix string // message prefix, for errors that wrap a library message
	}{
		{name: "good pair", crt: ca.CertPEM, key: ca.KeyPEM},
		{name: "CA followed by other certs: first is the CA", crt: concat(ca.CertPEM, other.CertPEM, leaf.CertPEM), key: ca.KeyPEM},
		{name: "user supplied RSA CA with PKCS#8 key", crt: rsaCertPEM, key: rsaKeyPEM},
		{name: "garbage ca.crt", crt: []byte("garbage"), key: ca.KeyPEM, wantErr: "ca.crt: no PEM certificate found"},
		{name: "empty ca.crt", crt: nil, key: ca.KeyPEM, wantErr: "ca.crt: no PEM certificate found"},
		{name: "key in ca.crt", crt: ca.KeyPEM, key: ca.KeyPEM, wantErr: "ca.crt: no PEM certificate found"},
		{name: "corrupt certificate block", crt: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), key: ca.KeyPEM,
			wantPrefix: "ca.crt: parse certificate #1: "},
		{name: "non-CA certificate", crt: leaf.CertPEM, key: leaf.KeyPEM, wantErr: "ca.crt: certificate is not a CA"},
		{name: "non-CA certificate first in ca.crt", crt: concat(leaf.CertPEM, ca.CertPEM), key: ca.KeyPEM, wantErr: "ca.crt: certificate is not a CA"},
		{name: "garbage ca.key", crt: ca.CertPEM, key: []byte("garbage"), wantPrefix: "ca.key: "},
		{name: "empty ca.key", crt: ca.CertPEM, key: nil, wantPrefix: "ca.key: "},
		{name: "certificate in ca.key", crt: ca.CertPEM, key: ca.CertPEM, wantPrefix: "ca.key: "},
		{name: "mismatched key", crt: ca.CertPEM, key: other.KeyPEM, wantErr: "ca.key does not match ca.crt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			kp, err := ParseCA(tt.crt, tt.key)
			switch {
			case tt.wantErr != "":
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(kp).To(BeNil())
			case tt.wantPrefix != "":
				g.Expect(err).To(MatchError(HavePrefix(tt.wantPrefix)))
				g.Expect(err.Error()).NotTo(ContainSubstring("does not match"))
				g.Expect(kp).To(BeNil())
			default:
				g.Expect(err).NotTo(HaveOccurred())
				first, _ := ParseCertificates(tt.crt)
				g.Expect(kp.Cert.Raw).To(Equal(first[0].Raw))
				g.Expect(ParseCertificates(kp.CertPEM)).To(HaveLen(1), "CertPEM holds only the CA")
				reparsed, err := ParseCA(kp.CertPEM, kp.KeyPEM)
				g.Expect(err).NotTo(HaveOccurred(), "KeyPEM round-trips")
				g.Expect(reparsed.Cert.Raw).To(Equal(kp.Cert.Raw))
				// A parsed CA can issue verifiable leaves.
				issued := mustLeaf(t, kp, LeafSpec{CommonName: "x", Duration: day}, t0)
				g.Expect(issued.Cert.CheckSignatureFrom(kp.Cert)).To(Succeed())
			}
		})
	}
}

// userRSACASubjectKeyID stands in for a key identifier computed by other
// tooling (openssl uses SHA-1), i.e. one this package would not derive itself.
var userRSACASubjectKeyID = []byte("openssl-sha1-skid-20")

// userRSACA builds a CA the way a user might with openssl: RSA key, PKCS#8
// PEM, no subject serialNumber and a SubjectKeyId computed elsewhere.
func userRSACA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	g := NewWithT(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	g.Expect(err).NotTo(HaveOccurred())
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(42),
		Subject:               pkix.Name{CommonName: "user-ca"},
		NotBefore:             t0.Add(-day),
		NotAfter:              t0.Add(365 * day),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SubjectKeyId:          userRSACASubjectKeyID,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	g.Expect(err).NotTo(HaveOccurred())
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	g.Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
}

func TestCrossSign(t *testing.T) {
	g := NewWithT(t)
	prev := mustCA(t, "proxy-ca", 365*day, t0.Add(-300*day))
	next := mustCA(t, "proxy-ca", 365*day, t0)

	cross, crossPEM, err := CrossSign(next, prev, t0)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(cross.RawSubject).To(Equal(next.Cert.RawSubject))
	g.Expect(cross.RawIssuer).To(Equal(prev.Cert.RawSubject))
	g.Expect(cross.PublicKey).To(Equal(next.Cert.PublicKey))
	g.Expect(cross.SubjectKeyId).To(Equal(next.Cert.SubjectKeyId))
	g.Expect(cross.AuthorityKeyId).To(Equal(prev.Cert.SubjectKeyId))
	g.Expect(cross.IsCA).To(BeTrue())
	g.Expect(cross.NotBefore).To(Equal(next.Cert.NotBefore))
	g.Expect(cross.NotAfter).To(Equal(prev.Cert.NotAfter), "capped at the previous CA's expiry")
	g.Expect(cross.CheckSignatureFrom(prev.Cert)).To(Succeed())
	g.Expect(cross.SerialNumber).NotTo(Equal(next.Cert.SerialNumber))
	certs, err := ParseCertificates(crossPEM)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(certs).To(HaveLen(1))
	g.Expect(certs[0].Raw).To(Equal(cross.Raw))

	// A leaf of next verifies for a peer trusting only prev, via the cross-signed intermediate...
	leaf := mustLeaf(t, next, LeafSpec{CommonName: "svc", DNSNames: []string{"svc"}, Duration: 30 * day}, t0)
	opts := x509.VerifyOptions{
		Roots:         poolOf(prev.Cert),
		Intermediates: poolOf(cross),
		CurrentTime:   t0.Add(time.Hour),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}
	chains, err := leaf.Cert.Verify(opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(chains[0]).To(HaveLen(3))
	g.Expect(chains[0][2].Raw).To(Equal(prev.Cert.Raw))

	// ...but not without it.
	opts.Intermediates = nil
	_, err = leaf.Cert.Verify(opts)
	g.Expect(err).To(HaveOccurred())
}

func TestCrossSignUserSuppliedCA(t *testing.T) {
	g := NewWithT(t)
	prev := mustCA(t, "proxy-ca", 365*day, t0)
	next, err := ParseCA(userRSACA(t))
	g.Expect(err).NotTo(HaveOccurred())

	cross, _, err := CrossSign(next, prev, t0)
	g.Expect(err).NotTo(HaveOccurred())

	// The key identifier is copied, not recomputed, so leaves' AKID keeps
	// pointing at both next and its cross-signed twin.
	g.Expect(cross.SubjectKeyId).To(Equal(userRSACASubjectKeyID))
	g.Expect(cross.RawSubject).To(Equal(next.Cert.RawSubject))
	leaf := mustLeaf(t, next, LeafSpec{CommonName: "svc", Duration: day}, t0)
	g.Expect(leaf.Cert.AuthorityKeyId).To(Equal(userRSACASubjectKeyID))
	_, err = leaf.Cert.Verify(x509.VerifyOptions{
		Roots: poolOf(prev.Cert), Intermediates: poolOf(cross), CurrentTime: t0,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	g.Expect(err).NotTo(HaveOccurred())
}

func TestCrossSignNotAfterKeepsNextExpiryWhenEarlier(t *testing.T) {
	g := NewWithT(t)
	prev := mustCA(t, "proxy-ca", 365*day, t0)
	next := mustCA(t, "proxy-ca", 30*day, t0)
	cross, _, err := CrossSign(next, prev, t0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cross.NotAfter).To(Equal(next.Cert.NotAfter))
}

func TestCrossSignErrors(t *testing.T) {
	g := NewWithT(t)
	prev := mustCA(t, "proxy-ca", 10*day, t0)
	next := mustCA(t, "proxy-ca", 365*day, t0)
	leaf := mustLeaf(t, prev, LeafSpec{CommonName: "leaf", Duration: day}, t0)

	_, _, err := CrossSign(next, prev, t0.Add(11*day))
	g.Expect(err).To(MatchError(ContainSubstring("expired")))

	_, _, err = CrossSign(next, leaf, t0)
	g.Expect(err).To(MatchError(ContainSubstring("previous CA: certificate is not a CA")))

	_, _, err = CrossSign(leaf, prev, t0)
	g.Expect(err).To(MatchError(ContainSubstring("next CA: certificate is not a CA")))

	_, _, err = CrossSign(next, &KeyPair{Cert: prev.Cert, Key: next.Key}, t0)
	g.Expect(err).To(MatchError(ContainSubstring("key does not match")))

	_, _, err = CrossSign(nil, prev, t0)
	g.Expect(err).To(HaveOccurred())
}

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}
