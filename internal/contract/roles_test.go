package contract

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"

	. "github.com/onsi/gomega"
)

func TestVerifiedLeafIsTheVerifiedChainsLeafNeverASentCertificate(t *testing.T) {
	g := NewWithT(t)
	sent := &x509.Certificate{Subject: pkix.Name{CommonName: ImpersonatorCommonName}, URIs: []*url.URL{SANURL(ImpersonatorRoleURI)}}
	g.Expect(VerifiedLeaf(nil)).To(BeNil(), "not TLS")
	g.Expect(VerifiedLeaf(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{sent}})).To(BeNil(),
		"a certificate that was sent but not verified counts for nothing")
	g.Expect(IsImpersonator(VerifiedLeaf(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{sent}}))).To(BeFalse())
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{sent}, VerifiedChains: [][]*x509.Certificate{{sent}}}
	g.Expect(VerifiedLeaf(verified)).To(BeIdenticalTo(sent))
	g.Expect(IsImpersonator(VerifiedLeaf(verified))).To(BeTrue())
	sent.URIs = nil
	g.Expect(IsImpersonator(VerifiedLeaf(verified))).To(BeFalse(), "the name without the role")
}
