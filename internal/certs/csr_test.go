package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var csrTestSubject = pkix.Name{
	CommonName:         "open-cluster-management:cluster-proxy:agent:cluster1",
	Organization:       []string{"open-cluster-management:cluster-proxy"},
	OrganizationalUnit: []string{"signer-0123456789abcdef"},
}

// csrTestPEM creates a real PEM CSR for key with the given subject and,
// optionally, SANs (which SignCSR must not copy).
func csrTestPEM(t *testing.T, key crypto.Signer, subject pkix.Name, dnsNames ...string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject, DNSNames: dnsNames}, key)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func csrTestECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return key
}

func TestSignCSR(t *testing.T) {
	ca := mustCA(t, "proxy-ca", 365*day, t0)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	tests := []struct {
		name string
		key  crypto.Signer
		sans []string
	}{
		{name: "ECDSA P-256", key: csrTestECKey(t)},
		{name: "RSA 2048", key: rsaKey},
		{name: "Ed25519", key: edKey},
		{name: "requested SANs are not copied", key: csrTestECKey(t), sans: []string{"evil.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			csrPEM := csrTestPEM(t, tt.key, csrTestSubject, tt.sans...)
			req, err := ParseCSR(csrPEM)
			g.Expect(err).NotTo(HaveOccurred())

			out, err := SignCSR(ca, csrPEM, 30*day, nil, t0)
			g.Expect(err).NotTo(HaveOccurred())
			certs, err := ParseCertificates(out)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(certs).To(HaveLen(1), "no intermediates given")
			c := certs[0]

			g.Expect(c.RawSubject).To(Equal(req.RawSubject), "subject copied verbatim")
			g.Expect(c.Subject.CommonName).To(Equal(csrTestSubject.CommonName))
			g.Expect(c.Subject.Organization).To(Equal(csrTestSubject.Organization))
			g.Expect(c.Subject.OrganizationalUnit).To(Equal(csrTestSubject.OrganizationalUnit))
			g.Expect(publicKeysEqual(c.PublicKey, tt.key.Public())).To(BeTrue(), "public key from the CSR")
			g.Expect(c.DNSNames).To(BeEmpty())
			g.Expect(c.IPAddresses).To(BeEmpty())
			g.Expect(c.IsCA).To(BeFalse())
			g.Expect(c.BasicConstraintsValid).To(BeTrue())
			g.Expect(c.KeyUsage).To(Equal(x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment))
			g.Expect(c.ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
			g.Expect(c.AuthorityKeyId).To(Equal(ca.Cert.SubjectKeyId))
			g.Expect(c.SubjectKeyId).NotTo(BeEmpty())
			g.Expect(c.SerialNumber.Sign()).To(Equal(1))
			g.Expect(c.NotBefore).To(Equal(t0.Add(-time.Minute)))
			g.Expect(c.NotAfter).To(Equal(t0.Add(30 * day)))

			_, err = c.Verify(x509.VerifyOptions{
				Roots:       poolOf(ca.Cert),
				CurrentTime: t0.Add(time.Hour),
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = c.Verify(x509.VerifyOptions{
				Roots:       poolOf(ca.Cert),
				CurrentTime: t0.Add(time.Hour),
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			g.Expect(err).To(HaveOccurred(), "client auth only")

			again, err := SignCSR(ca, csrPEM, 30*day, nil, t0)
			g.Expect(err).NotTo(HaveOccurred())
			againCerts, err := ParseCertificates(again)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(againCerts[0].SerialNumber).NotTo(Equal(c.SerialNumber), "random serial")
		})
	}
}

func TestSignCSRValidity(t *testing.T) {
	longCA := mustCA(t, "proxy-ca", 365*day, t0)
	shortCA := mustCA(t, "proxy-ca", 10*day, t0)
	csrPEM := csrTestPEM(t, csrTestECKey(t), csrTestSubject)
	now := t0.Add(time.Hour)

	tests := []struct {
		name         string
		ca           *KeyPair
		duration     time.Duration
		wantNotAfter time.Time
	}{
		{name: "explicit duration", ca: longCA, duration: 7 * day, wantNotAfter: now.Add(7 * day)},
		{name: "zero means 180 days", ca: longCA, duration: 0, wantNotAfter: now.Add(180 * day)},
		{name: "negative means 180 days", ca: longCA, duration: -time.Hour, wantNotAfter: now.Add(180 * day)},
		{name: "capped at the CA's expiry", ca: shortCA, duration: 30 * day, wantNotAfter: shortCA.Cert.NotAfter},
		{name: "default capped at the CA's expiry", ca: shortCA, duration: 0, wantNotAfter: shortCA.Cert.NotAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := SignCSR(tt.ca, csrPEM, tt.duration, nil, now)
			g.Expect(err).NotTo(HaveOccurred())
			certs, err := ParseCertificates(out)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(certs[0].NotBefore).To(Equal(now.Add(-time.Minute)))
			g.Expect(certs[0].NotAfter).To(Equal(tt.wantNotAfter))
			_, err = certs[0].Verify(x509.VerifyOptions{
				Roots:       poolOf(tt.ca.Cert),
				CurrentTime: tt.wantNotAfter.Add(-time.Second),
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

// During a CA rotation the agent certificate is signed by the next CA and
// served with the cross-signed next CA, so peers that still trust only the
// previous CA accept it.
func TestSignCSRAppendsIntermediates(t *testing.T) {
	g := NewWithT(t)
	prev := mustCA(t, "proxy-ca", 365*day, t0.Add(-300*day))
	next := mustCA(t, "proxy-ca", 365*day, t0)
	cross, crossPEM, err := CrossSign(next, prev, t0)
	g.Expect(err).NotTo(HaveOccurred())
	csrPEM := csrTestPEM(t, csrTestECKey(t), csrTestSubject)

	// A key block next to the intermediate must never end up in the chain.
	out, err := SignCSR(next, csrPEM, 30*day, concat(crossPEM, next.KeyPEM), t0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).NotTo(ContainSubstring("PRIVATE KEY"))
	certs, err := ParseCertificates(out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(certs).To(HaveLen(2))
	g.Expect(certs[1].Raw).To(Equal(cross.Raw), "leaf first, then the intermediates in order")

	leaf := certs[0]
	g.Expect(leaf.AuthorityKeyId).To(Equal(next.Cert.SubjectKeyId))
	for name, roots := range map[string]*x509.CertPool{"previous CA": poolOf(prev.Cert), "next CA": poolOf(next.Cert)} {
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: poolOf(certs[1:]...),
			CurrentTime:   t0.Add(time.Hour),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		g.Expect(err).NotTo(HaveOccurred(), name)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: poolOf(prev.Cert), CurrentTime: t0.Add(time.Hour),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).To(HaveOccurred(), "the previous CA alone needs the intermediate")
}

func TestSignCSRErrors(t *testing.T) {
	ca := mustCA(t, "proxy-ca", 365*day, t0)
	leaf := mustLeaf(t, ca, LeafSpec{CommonName: "leaf", Duration: day}, t0)
	key := csrTestECKey(t)
	good := csrTestPEM(t, key, csrTestSubject)

	block, _ := pem.Decode(good)
	tampered := append([]byte(nil), block.Bytes...)
	tampered[len(tampered)-1] ^= 0xff // last byte of the signature
	tamperedPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered})

	tests := []struct {
		name          string
		ca            *KeyPair
		csr           []byte
		intermediates []byte
		now           time.Time
		wantErr       string
	}{
		{name: "garbage CSR", ca: ca, csr: []byte("garbage"), now: t0, wantErr: "sign CSR: no PEM block found"},
		{name: "empty CSR", ca: ca, csr: nil, now: t0, wantErr: "sign CSR: no PEM block found"},
		{name: "certificate instead of CSR", ca: ca, csr: leaf.CertPEM, now: t0,
			wantErr: `sign CSR: PEM block type is "CERTIFICATE", want "CERTIFICATE REQUEST"`},
		{name: "corrupt CSR block", ca: ca, csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("junk")}), now: t0,
			wantErr: "sign CSR: parse certificate request: "},
		{name: "bad signature", ca: ca, csr: tamperedPEM, now: t0, wantErr: "sign CSR: check request signature: "},
		{name: "nil CA", ca: nil, csr: good, now: t0, wantErr: "sign CSR: CA certificate and key are required"},
		{name: "leaf is not a CA", ca: leaf, csr: good, now: t0, wantErr: "sign CSR: certificate is not a CA"},
		{name: "expired CA", ca: ca, csr: good, now: t0.Add(366 * day), wantErr: "sign CSR: CA expired at "},
		{name: "garbage intermediates", ca: ca, csr: good, intermediates: []byte("junk"), now: t0,
			wantErr: "sign CSR: intermediates: no PEM certificate found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := SignCSR(tt.ca, tt.csr, day, tt.intermediates, tt.now)
			g.Expect(err).To(MatchError(HavePrefix(tt.wantErr)))
			g.Expect(out).To(BeNil())
		})
	}
}

func TestParseCSR(t *testing.T) {
	g := NewWithT(t)
	key := csrTestECKey(t)
	csrPEM := csrTestPEM(t, key, csrTestSubject, "a.example.com")
	req, err := ParseCSR(concat(csrPEM, []byte("trailing data is ignored, as by the CSR API")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.Subject.CommonName).To(Equal(csrTestSubject.CommonName))
	g.Expect(req.DNSNames).To(Equal([]string{"a.example.com"}))
	g.Expect(publicKeysEqual(req.PublicKey, key.Public())).To(BeTrue())
	g.Expect(req.CheckSignature()).To(Succeed())

	_, err = ParseCSR([]byte("nope"))
	g.Expect(err).To(MatchError("no PEM block found"))
	_, err = ParseCSR(nil)
	g.Expect(err).To(MatchError("no PEM block found"))
}
