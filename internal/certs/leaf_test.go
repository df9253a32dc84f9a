package certs

import (
	"crypto/ecdsa"
	"crypto/x509"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestIssueLeaf(t *testing.T) {
	g := NewWithT(t)
	ca := mustCA(t, "test-ca", 365*day, t0)
	spec := LeafSpec{
		CommonName:    "proxy",
		Organizations: []string{"org"},
		DNSNames:      []string{"proxy.ns.svc", "localhost"},
		IPAddresses:   []net.IP{net.ParseIP("10.1.2.3")},
		Duration:      30 * day,
	}

	leaf, err := IssueLeaf(ca, spec, t0)
	g.Expect(err).NotTo(HaveOccurred())

	c := leaf.Cert
	g.Expect(c.Subject.CommonName).To(Equal("proxy"))
	g.Expect(c.Subject.Organization).To(Equal([]string{"org"}))
	g.Expect(c.DNSNames).To(Equal(spec.DNSNames))
	g.Expect(c.IPAddresses).To(HaveLen(1))
	g.Expect(c.IPAddresses[0].Equal(spec.IPAddresses[0])).To(BeTrue())
	g.Expect(c.IsCA).To(BeFalse())
	g.Expect(c.KeyUsage).To(Equal(x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment))
	g.Expect(c.ExtKeyUsage).To(ConsistOf(x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth), "empty usages default to both")
	g.Expect(c.AuthorityKeyId).To(Equal(ca.Cert.SubjectKeyId))
	g.Expect(c.NotBefore).To(Equal(t0.Add(-time.Minute)))
	g.Expect(c.NotAfter).To(Equal(t0.Add(30 * day)))
	g.Expect(c.SerialNumber.Sign()).To(Equal(1))
	g.Expect(leaf.Key).To(BeAssignableToTypeOf(&ecdsa.PrivateKey{}))
	g.Expect(leaf.Key.Public()).To(Equal(c.PublicKey))
	g.Expect(ParseCertificates(leaf.CertPEM)).To(HaveLen(1), "CertPEM holds only the leaf")
	g.Expect(string(leaf.KeyPEM)).To(HavePrefix("-----BEGIN EC PRIVATE KEY-----"))

	// Two leaves from one spec get distinct keys and serials.
	again := mustLeaf(t, ca, spec, t0)
	g.Expect(again.Cert.SerialNumber).NotTo(Equal(c.SerialNumber))
	g.Expect(again.Cert.PublicKey).NotTo(Equal(c.PublicKey))

	for _, name := range []string{"proxy.ns.svc", "localhost"} {
		_, err := c.Verify(x509.VerifyOptions{
			DNSName:     name,
			Roots:       poolOf(ca.Cert),
			CurrentTime: t0.Add(time.Hour),
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		})
		g.Expect(err).NotTo(HaveOccurred(), name)
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: poolOf(mustCA(t, "test-ca", day, t0).Cert), CurrentTime: t0})
	g.Expect(err).To(HaveOccurred(), "must not verify against an unrelated CA of the same name")
}

func TestIssueLeafCapsNotAfterAtCA(t *testing.T) {
	g := NewWithT(t)
	ca := mustCA(t, "test-ca", 10*day, t0)
	leaf := mustLeaf(t, ca, LeafSpec{CommonName: "proxy", Duration: 30 * day}, t0.Add(5*day))

	g.Expect(leaf.Cert.NotAfter).To(Equal(ca.Cert.NotAfter))
	_, err := leaf.Cert.Verify(x509.VerifyOptions{
		Roots:       poolOf(ca.Cert),
		CurrentTime: ca.Cert.NotAfter.Add(-time.Second),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	g.Expect(err).NotTo(HaveOccurred())
}

func TestIssueLeafExtKeyUsages(t *testing.T) {
	ca := mustCA(t, "test-ca", 365*day, t0)
	tests := []struct {
		name   string
		usages []Usage
		want   []x509.ExtKeyUsage
	}{
		{"default", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{"server only", []Usage{UsageServerAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"client only", []Usage{UsageClientAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{"both, order kept", []Usage{UsageClientAuth, UsageServerAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}},
		{"duplicates dropped", []Usage{UsageServerAuth, UsageServerAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			leaf := mustLeaf(t, ca, LeafSpec{CommonName: "proxy", Usages: tt.usages, Duration: day}, t0)
			g.Expect(leaf.Cert.ExtKeyUsage).To(Equal(tt.want))

			// x509.Verify enforces the usages: a usage not granted must be refused.
			for _, eku := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				_, err := leaf.Cert.Verify(x509.VerifyOptions{
					Roots: poolOf(ca.Cert), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{eku},
				})
				if contains(tt.want, eku) {
					g.Expect(err).NotTo(HaveOccurred())
				} else {
					g.Expect(err).To(HaveOccurred())
				}
			}
		})
	}
}

func contains(list []x509.ExtKeyUsage, eku x509.ExtKeyUsage) bool {
	for _, e := range list {
		if e == eku {
			return true
		}
	}
	return false
}

func TestIssueLeafRejectsBadInput(t *testing.T) {
	ca := mustCA(t, "test-ca", 10*day, t0)
	notCA := mustLeaf(t, ca, LeafSpec{CommonName: "leaf", Duration: day}, t0)
	ok := LeafSpec{CommonName: "proxy", Duration: day}

	tests := []struct {
		name    string
		ca      *KeyPair
		spec    LeafSpec
		now     time.Time
		wantErr string
	}{
		{"unknown usage", ca, LeafSpec{CommonName: "proxy", Usages: []Usage{"code signing"}, Duration: day}, t0, `unsupported usage "code signing"`},
		{"zero duration", ca, LeafSpec{CommonName: "proxy"}, t0, "duration must be positive"},
		{"no names at all", ca, LeafSpec{Duration: day}, t0, "common name, DNS name or IP address is required"},
		{"expired CA", ca, ok, ca.Cert.NotAfter, "CA expired"},
		{"nil CA", nil, ok, t0, "CA certificate and key are required"},
		{"CA without key", &KeyPair{Cert: ca.Cert}, ok, t0, "CA certificate and key are required"},
		{"non-CA issuer", notCA, ok, t0, "certificate is not a CA"},
		{"CA key mismatch", &KeyPair{Cert: ca.Cert, Key: notCA.Key}, ok, t0, "CA key does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			kp, err := IssueLeaf(tt.ca, tt.spec, tt.now)
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(kp).To(BeNil())
		})
	}
}
