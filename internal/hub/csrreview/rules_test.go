package csrreview

import (
	"crypto"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/url"
	"testing"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// expectDenial checks a rule's result: nil when wantReason is "", otherwise
// that reason and a message containing every wantMsg.
func expectDenial(g Gomega, d *denial, wantReason string, wantMsg ...string) {
	if wantReason == "" {
		g.Expect(d).To(BeNil())
		return
	}
	g.Expect(d).NotTo(BeNil())
	g.Expect(d.reason).To(Equal(wantReason))
	for _, sub := range wantMsg {
		g.Expect(d.message).To(ContainSubstring(sub))
	}
}

func TestDecided(t *testing.T) {
	tests := []struct {
		name       string
		conditions []certificatesv1.RequestConditionType
		want       certificatesv1.RequestConditionType
	}{
		{name: "pending", want: ""},
		{name: "approved", conditions: []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved}, want: certificatesv1.CertificateApproved},
		{name: "denied", conditions: []certificatesv1.RequestConditionType{certificatesv1.CertificateDenied}, want: certificatesv1.CertificateDenied},
		{name: "failed", conditions: []certificatesv1.RequestConditionType{certificatesv1.CertificateFailed}, want: certificatesv1.CertificateFailed},
		{name: "other condition", conditions: []certificatesv1.RequestConditionType{"Custom"}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			csr := &csrObject{}
			for _, c := range tt.conditions {
				withCondition(c)(csr)
			}
			got, ok := decided(csr)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(ok).To(Equal(tt.want != ""))
		})
	}
}

func TestHandledSigner(t *testing.T) {
	g := NewWithT(t)
	g.Expect(handledSigner(certificatesv1.KubeAPIServerClientSignerName)).To(BeTrue())
	g.Expect(handledSigner(AgentSignerName)).To(BeTrue())
	g.Expect(handledSigner(certificatesv1.KubeAPIServerClientKubeletSignerName)).To(BeFalse())
	g.Expect(handledSigner(certificatesv1.KubeletServingSignerName)).To(BeFalse())
	g.Expect(handledSigner("")).To(BeFalse())
}

func TestClusterOf(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		wantCluster string
		wantOK      bool
	}{
		{name: "ours", labels: map[string]string{ClusterNameLabel: "c1", AddonNameLabel: AddonName}, wantCluster: "c1", wantOK: true},
		{name: "no labels", labels: nil},
		{name: "other add-on", labels: map[string]string{ClusterNameLabel: "c1", AddonNameLabel: "work-manager"}},
		{name: "no add-on label", labels: map[string]string{ClusterNameLabel: "c1"}},
		{name: "no cluster label", labels: map[string]string{AddonNameLabel: AddonName}},
		{name: "empty cluster label", labels: map[string]string{ClusterNameLabel: "", AddonNameLabel: AddonName}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cluster, ok := clusterOf(tt.labels)
			g.Expect(ok).To(Equal(tt.wantOK))
			if ok {
				g.Expect(cluster).To(Equal(tt.wantCluster))
			}
		})
	}
}

func TestCheckClusterLabel(t *testing.T) {
	g := NewWithT(t)
	expectDenial(g, checkClusterLabel("c1", "c1"), "")
	expectDenial(g, checkClusterLabel("c1", "c2"), proxyv1alpha1.ReasonClusterLabelMismatch, "metadata.labels[open-cluster-management.io/cluster-name]", `want "c2"`, `got "c1"`)
	expectDenial(g, checkClusterLabel("c1", ""), proxyv1alpha1.ReasonClusterLabelMismatch, `want ""`)
}

func TestCheckAccepted(t *testing.T) {
	g := NewWithT(t)
	expectDenial(g, checkAccepted("c1", true), "")
	expectDenial(g, checkAccepted("c1", false), proxyv1alpha1.ReasonClusterNotAccepted, `cluster "c1"`, "spec.hubAcceptsClient true")
}

func TestCheckRequestor(t *testing.T) {
	groups := []string{"system:open-cluster-management:c1", "system:open-cluster-management:managed-clusters", "system:authenticated"}
	tests := []struct {
		name       string
		username   string
		groups     []string
		wantReason string
		wantMsg    []string
	}{
		{name: "cluster identity", username: "system:open-cluster-management:c1:abc12", groups: groups},
		{name: "other cluster", username: "system:open-cluster-management:c2:abc12", groups: groups,
			wantReason: proxyv1alpha1.ReasonUnexpectedRequestor, wantMsg: []string{"spec.username", `"system:open-cluster-management:c1:"`, `got "system:open-cluster-management:c2:abc12"`}},
		{name: "cluster whose name extends ours", username: "system:open-cluster-management:c10:abc12", groups: groups,
			wantReason: proxyv1alpha1.ReasonUnexpectedRequestor, wantMsg: []string{"spec.username"}},
		{name: "no agent ID", username: "system:open-cluster-management:c1:", groups: groups,
			wantReason: proxyv1alpha1.ReasonUnexpectedRequestor, wantMsg: []string{"spec.username", "agent ID"}},
		{name: "bootstrap service account", username: "system:serviceaccount:open-cluster-management:cluster-bootstrap", groups: groups,
			wantReason: proxyv1alpha1.ReasonUnexpectedRequestor, wantMsg: []string{"spec.username"}},
		{name: "missing cluster group", username: "system:open-cluster-management:c1:abc12", groups: groups[1:],
			wantReason: proxyv1alpha1.ReasonUnexpectedRequestor, wantMsg: []string{"spec.groups", `want to include "system:open-cluster-management:c1"`}},
		{name: "other cluster's group", username: "system:open-cluster-management:c1:abc12", groups: []string{"system:open-cluster-management:c2"},
			wantReason: proxyv1alpha1.ReasonUnexpectedRequestor, wantMsg: []string{"spec.groups"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectDenial(NewWithT(t), checkRequestor("c1", tt.username, tt.groups), tt.wantReason, tt.wantMsg...)
		})
	}
}

func TestCheckUsages(t *testing.T) {
	const (
		ds = certificatesv1.UsageDigitalSignature
		ke = certificatesv1.UsageKeyEncipherment
		ca = certificatesv1.UsageClientAuth
	)
	tests := []struct {
		name       string
		usages     []certificatesv1.KeyUsage
		wantReason string
		wantMsg    []string
	}{
		{name: "all allowed", usages: []certificatesv1.KeyUsage{ds, ke, ca}},
		{name: "client auth only", usages: []certificatesv1.KeyUsage{ca}},
		{name: "any order, duplicates", usages: []certificatesv1.KeyUsage{ca, ds, ca}},
		{name: "none", usages: nil, wantReason: proxyv1alpha1.ReasonUnexpectedUsages, wantMsg: []string{"spec.usages", `want "client auth"`}},
		{name: "no client auth", usages: []certificatesv1.KeyUsage{ds, ke}, wantReason: proxyv1alpha1.ReasonUnexpectedUsages, wantMsg: []string{"spec.usages", `"client auth"`}},
		{name: "server auth", usages: []certificatesv1.KeyUsage{ds, ke, ca, certificatesv1.UsageServerAuth}, wantReason: proxyv1alpha1.ReasonUnexpectedUsages,
			wantMsg: []string{"spec.usages", `"server auth" is not allowed`, `["digital signature" "key encipherment" "client auth"]`}},
		{name: "cert sign", usages: []certificatesv1.KeyUsage{ca, certificatesv1.UsageCertSign}, wantReason: proxyv1alpha1.ReasonUnexpectedUsages,
			wantMsg: []string{`"cert sign" is not allowed`}},
		{name: "any", usages: []certificatesv1.KeyUsage{ca, certificatesv1.UsageAny}, wantReason: proxyv1alpha1.ReasonUnexpectedUsages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectDenial(NewWithT(t), checkUsages(tt.usages), tt.wantReason, tt.wantMsg...)
		})
	}
}

func TestParseRequest(t *testing.T) {
	good := requestPEM(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}})
	tests := []struct {
		name       string
		request    []byte
		wantReason string
		wantMsg    []string
	}{
		{name: "PEM request", request: good},
		{name: "empty", request: nil, wantReason: proxyv1alpha1.ReasonInvalidRequest, wantMsg: []string{"spec.request", "no PEM block found"}},
		{name: "garbage", request: []byte("garbage"), wantReason: proxyv1alpha1.ReasonInvalidRequest, wantMsg: []string{"spec.request"}},
		{name: "wrong block type", request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")}),
			wantReason: proxyv1alpha1.ReasonInvalidRequest, wantMsg: []string{"spec.request", `"CERTIFICATE"`}},
		{name: "corrupt DER", request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("junk")}),
			wantReason: proxyv1alpha1.ReasonInvalidRequest, wantMsg: []string{"spec.request", "parse certificate request"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			req, d := parseRequest(tt.request)
			expectDenial(g, d, tt.wantReason, tt.wantMsg...)
			if tt.wantReason == "" {
				g.Expect(req.Subject.CommonName).To(Equal("x"))
			} else {
				g.Expect(req).To(BeNil())
			}
		})
	}
}

func TestCheckKey(t *testing.T) {
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	tests := []struct {
		name       string
		key        crypto.Signer
		wantReason string
		wantMsg    []string
	}{
		{name: "ECDSA P-256", key: ecKey(t, elliptic.P256())},
		{name: "ECDSA P-384", key: ecKey(t, elliptic.P384())},
		{name: "RSA 2048", key: rsaKey(t, 2048)},
		{name: "RSA 3072", key: rsaKey(t, 3072)},
		{name: "Ed25519", key: edKey},
		{name: "RSA 1024", key: rsaKey(t, 1024), wantReason: proxyv1alpha1.ReasonWeakKey, wantMsg: []string{"spec.request public key", "RSA of 1024 bits"}},
		{name: "ECDSA P-224", key: ecKey(t, elliptic.P224()), wantReason: proxyv1alpha1.ReasonWeakKey, wantMsg: []string{"ECDSA P-224"}},
		{name: "ECDSA P-521", key: ecKey(t, elliptic.P521()), wantReason: proxyv1alpha1.ReasonWeakKey, wantMsg: []string{"ECDSA P-521", "P-256 or P-384"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Go through a real request so the key is what parsing yields.
			req := parsedRequest(t, tt.key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}})
			expectDenial(NewWithT(t), checkKey(req.PublicKey), tt.wantReason, tt.wantMsg...)
		})
	}
	expectDenial(NewWithT(t), checkKey(nil), proxyv1alpha1.ReasonWeakKey, "got <nil>")
}

func TestCheckSignature(t *testing.T) {
	g := NewWithT(t)
	key := ecKey(t, elliptic.P256())
	req := parsedRequest(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}})
	expectDenial(g, checkSignature(req), "")

	// The signature of another key over the same content.
	other := parsedRequest(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}})
	forged := *req
	forged.Signature = other.Signature
	expectDenial(g, checkSignature(&forged), proxyv1alpha1.ReasonInvalidRequest, "spec.request signature")
}

func TestCheckSANs(t *testing.T) {
	key := ecKey(t, elliptic.P256())
	spiffe, err := url.Parse("spiffe://cluster.local/ns/x/sa/y")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	tests := []struct {
		name       string
		template   x509.CertificateRequest
		wantReason string
		wantMsg    []string
	}{
		{name: "none", template: x509.CertificateRequest{}},
		{name: "the klusterlet's add-on DNS name", template: x509.CertificateRequest{DNSNames: []string{"cluster-proxy.addon.open-cluster-management.io"}}},
		{name: "another add-on's DNS name", template: x509.CertificateRequest{DNSNames: []string{"other.addon.open-cluster-management.io"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs},
		{name: "the klusterlet's name and another", template: x509.CertificateRequest{DNSNames: []string{"cluster-proxy.addon.open-cluster-management.io", "evil.example.com"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs},
		{name: "DNS", template: x509.CertificateRequest{DNSNames: []string{"a.example.com"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs, wantMsg: []string{"spec.request subject alternative names", "want none", `DNS names ["a.example.com"]`}},
		{name: "IP", template: x509.CertificateRequest{IPAddresses: []net.IP{net.ParseIP("10.0.0.1")}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs, wantMsg: []string{`IP addresses ["10.0.0.1"]`}},
		{name: "email", template: x509.CertificateRequest{EmailAddresses: []string{"a@example.com"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs, wantMsg: []string{`email addresses ["a@example.com"]`}},
		{name: "URI", template: x509.CertificateRequest{URIs: []*url.URL{spiffe}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs, wantMsg: []string{`URIs ["spiffe://cluster.local/ns/x/sa/y"]`}},
		{name: "several", template: x509.CertificateRequest{DNSNames: []string{"a"}, IPAddresses: []net.IP{net.ParseIP("::1")}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSANs, wantMsg: []string{`DNS names ["a"], IP addresses ["::1"]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.template.Subject = pkix.Name{CommonName: "x"}
			req := parsedRequest(t, key, &tt.template)
			expectDenial(NewWithT(t), checkSANs(req), tt.wantReason, tt.wantMsg...)
		})
	}
}

func TestCheckHubKubeconfigSubject(t *testing.T) {
	const (
		cn    = "system:open-cluster-management:cluster:c1:addon:cluster-proxy:agent:agent-x"
		group = "system:open-cluster-management:cluster:c1:addon:cluster-proxy"
	)
	tests := []struct {
		name       string
		subject    pkix.Name
		wantReason string
		wantMsg    []string
	}{
		{name: "OCM subject", subject: pkix.Name{CommonName: cn, Organization: []string{group}}},
		{name: "the advertised subject, with the all-agents group", subject: pkix.Name{CommonName: HubKubeconfigUser("c1"),
			Organization: []string{"system:open-cluster-management:addon:cluster-proxy", group}}},
		{name: "the all-agents group alone", subject: pkix.Name{CommonName: cn, Organization: []string{"system:open-cluster-management:addon:cluster-proxy"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O"}},
		{name: "other attributes are not used by the API server", subject: pkix.Name{CommonName: cn, Organization: []string{group}, Country: []string{"DE"}}},
		{name: "no agent name", subject: pkix.Name{CommonName: "system:open-cluster-management:cluster:c1:addon:cluster-proxy:agent:", Organization: []string{group}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject CN", "agent name"}},
		{name: "other add-on", subject: pkix.Name{CommonName: "system:open-cluster-management:cluster:c1:addon:work-manager:agent:x", Organization: []string{group}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject CN", `want "system:open-cluster-management:cluster:c1:addon:cluster-proxy:agent:"`}},
		{name: "other cluster", subject: pkix.Name{CommonName: "system:open-cluster-management:cluster:c2:addon:cluster-proxy:agent:x", Organization: []string{group}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject CN"}},
		{name: "no group", subject: pkix.Name{CommonName: cn},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O", `want exactly ["` + group + `"]`, "got []"}},
		{name: "other cluster's group", subject: pkix.Name{CommonName: cn, Organization: []string{"system:open-cluster-management:cluster:c2:addon:cluster-proxy"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O"}},
		{name: "extra group", subject: pkix.Name{CommonName: cn, Organization: []string{group, "system:masters"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O", `"system:masters"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Parsed from a real request, as Review sees it.
			req := parsedRequest(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{Subject: tt.subject})
			expectDenial(NewWithT(t), checkHubKubeconfigSubject("c1", req.Subject), tt.wantReason, tt.wantMsg...)
		})
	}
}

func TestCheckAgentSubject(t *testing.T) {
	want := Subject{CommonName: "agent:c1", Organizations: []string{"o1", "o2"}, OrganizationalUnits: []string{"signer-abc"}}
	cnAttr := pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "agent:c1"}
	tests := []struct {
		name       string
		want       Subject
		subject    pkix.Name
		wantReason string
		wantMsg    []string
	}{
		{name: "exact", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1", "o2"}, OrganizationalUnit: []string{"signer-abc"}}},
		{name: "O in another order", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o2", "o1"}, OrganizationalUnit: []string{"signer-abc"}}},
		{name: "no O or OU expected or given", want: Subject{CommonName: "agent:c1"}, subject: pkix.Name{CommonName: "agent:c1"}},
		{name: "nothing advertised", want: Subject{}, subject: pkix.Name{},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject CN", "no proxy-agent subject is advertised"}},
		{name: "other CN", want: want, subject: pkix.Name{CommonName: "agent:c2", Organization: []string{"o1", "o2"}, OrganizationalUnit: []string{"signer-abc"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject CN", `want "agent:c1"`, `got "agent:c2"`}},
		// ExtraNames replace the CommonName field, so both CNs go there.
		{name: "two CNs", want: want, subject: pkix.Name{Organization: []string{"o1", "o2"}, OrganizationalUnit: []string{"signer-abc"},
			ExtraNames: []pkix.AttributeTypeAndValue{cnAttr, cnAttr}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject CN", "exactly one", "got 2"}},
		{name: "missing O", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1"}, OrganizationalUnit: []string{"signer-abc"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O", `want ["o1" "o2"]`, `got ["o1"]`}},
		{name: "duplicated O", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1", "o2", "o2"}, OrganizationalUnit: []string{"signer-abc"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O"}},
		{name: "extra O", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1", "o2", "system:masters"}, OrganizationalUnit: []string{"signer-abc"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject O", `"system:masters"`}},
		{name: "OU of another CA", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1", "o2"}, OrganizationalUnit: []string{"signer-def"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject OU", `want ["signer-abc"]`, `got ["signer-def"]`}},
		{name: "no OU", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1", "o2"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject OU"}},
		{name: "other attribute", want: want, subject: pkix.Name{CommonName: "agent:c1", Organization: []string{"o1", "o2"}, OrganizationalUnit: []string{"signer-abc"},
			Country: []string{"DE"}},
			wantReason: proxyv1alpha1.ReasonUnexpectedSubject, wantMsg: []string{"subject:", "only CN, O and OU", "2.5.4.6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := parsedRequest(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{Subject: tt.subject})
			expectDenial(NewWithT(t), checkAgentSubject(tt.want, req.Subject), tt.wantReason, tt.wantMsg...)
		})
	}
}

func TestSameMultiset(t *testing.T) {
	g := NewWithT(t)
	g.Expect(sameMultiset(nil, []string{})).To(BeTrue())
	g.Expect(sameMultiset([]string{"a", "b"}, []string{"b", "a"})).To(BeTrue())
	g.Expect(sameMultiset([]string{"a", "a"}, []string{"a"})).To(BeFalse())
	g.Expect(sameMultiset([]string{"a", "a", "b"}, []string{"a", "b", "b"})).To(BeFalse())
	g.Expect(sameMultiset([]string{"a"}, []string{"b"})).To(BeFalse())
}
