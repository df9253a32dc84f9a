package certs

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"testing"

	. "github.com/onsi/gomega"
)

func TestEncodeBundle(t *testing.T) {
	g := NewWithT(t)
	a := mustCA(t, "a", day, t0).Cert
	b := mustCA(t, "b", day, t0).Cert
	c := mustCA(t, "c", day, t0).Cert
	// A distinct *x509.Certificate with the same bytes is still a duplicate.
	aCopy, err := x509.ParseCertificate(a.Raw)
	g.Expect(err).NotTo(HaveOccurred())

	bundle := EncodeBundle(b, a, nil, b, c, aCopy)

	got, err := ParseCertificates(bundle)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rawsOf(got)).To(Equal(rawsOf([]*x509.Certificate{b, a, c})))
	g.Expect(bundle).To(Equal(concat(encodeCertPEM(b), encodeCertPEM(a), encodeCertPEM(c))))
	g.Expect(EncodeBundle()).To(BeEmpty())
}

func rawsOf(certs []*x509.Certificate) [][]byte {
	out := make([][]byte, 0, len(certs))
	for _, c := range certs {
		out = append(out, c.Raw)
	}
	return out
}

func TestFingerprint(t *testing.T) {
	g := NewWithT(t)
	cert := mustCA(t, "a", day, t0).Cert
	sum := sha256.Sum256(cert.Raw)

	fp := Fingerprint(cert)

	g.Expect(fp).To(Equal("SHA256:" + hex.EncodeToString(sum[:])))
	g.Expect(fp).To(MatchRegexp(`^SHA256:[0-9a-f]{64}$`))
	g.Expect(Fingerprint(mustCA(t, "a", day, t0).Cert)).NotTo(Equal(fp))
	g.Expect(Fingerprint(nil)).To(BeEmpty())
}

func TestParseCertificates(t *testing.T) {
	g := NewWithT(t)
	ca := mustCA(t, "a", day, t0)
	other := mustCA(t, "b", day, t0)

	// Non-certificate blocks (a key) are skipped, order is kept.
	got, err := ParseCertificates(concat(ca.KeyPEM, ca.CertPEM, []byte("\n"), other.CertPEM))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rawsOf(got)).To(Equal([][]byte{ca.Cert.Raw, other.Cert.Raw}))

	for _, in := range [][]byte{nil, []byte("garbage"), ca.KeyPEM} {
		_, err = ParseCertificates(in)
		g.Expect(err).To(MatchError("no PEM certificate found"), string(in))
	}
}
