package csrreview

import (
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestReview(t *testing.T) {
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	// A request whose signature no longer matches its content.
	tampered := func(csr *csrObject) {
		block, _ := pem.Decode(csr.Spec.Request)
		der := append([]byte(nil), block.Bytes...)
		der[len(der)-1] ^= 0xff
		csr.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der})
	}
	reordered := testAgentSubject
	reordered.Organizations = []string{"second", testAgentSubject.Organizations[0]}

	tests := []struct {
		name        string
		csr         *csrObject
		notAccepted bool
		expected    *Expected // nil: testExpected()
		want        Result    // Message is not compared; see wantMsg
		wantMsg     []string  // substrings of Message
	}{
		// Ignore: not ours, or already decided.
		{name: "nil CSR", csr: nil, want: Result{Decision: Ignore}},
		{name: "other signer", csr: hubCSR(t, func(c *csrObject) { c.Spec.SignerName = certificatesv1.KubeletServingSignerName }),
			want: Result{Decision: Ignore}, wantMsg: []string{`signer "kubernetes.io/kubelet-serving" is not handled`}},
		{name: "other custom signer with our labels", csr: agentCSR(t, func(c *csrObject) { c.Spec.SignerName = "example.com/signer" }),
			want: Result{Decision: Ignore}},
		{name: "no labels", csr: hubCSR(t, func(c *csrObject) { c.Labels = nil }), want: Result{Decision: Ignore}, wantMsg: []string{AddonNameLabel}},
		{name: "other add-on", csr: hubCSR(t, func(c *csrObject) { c.Labels[AddonNameLabel] = "managed-serviceaccount" }), want: Result{Decision: Ignore}},
		{name: "no cluster label", csr: agentCSR(t, func(c *csrObject) { delete(c.Labels, ClusterNameLabel) }), want: Result{Decision: Ignore}},
		{name: "already approved", csr: agentCSR(t, withCondition(certificatesv1.CertificateApproved)),
			want: Result{Decision: Ignore}, wantMsg: []string{"already Approved"}},
		{name: "already denied", csr: hubCSR(t, withCondition(certificatesv1.CertificateDenied)), want: Result{Decision: Ignore}},
		{name: "already failed", csr: agentCSR(t, withCondition(certificatesv1.CertificateApproved), withCondition(certificatesv1.CertificateFailed)),
			want: Result{Decision: Ignore}},
		{name: "already approved even though wrong", csr: hubCSR(t, withCondition(certificatesv1.CertificateApproved), func(c *csrObject) { c.Spec.Username = "mallory" }),
			notAccepted: true, want: Result{Decision: Ignore}},

		// Approve.
		{name: "hub kubeconfig", csr: hubCSR(t),
			want: Result{Decision: Approve, Sign: false, Reason: proxyv1alpha1.ReasonHubKubeconfigCSRApproved}, wantMsg: []string{`"cluster1"`}},
		{name: "agent certificate", csr: agentCSR(t),
			want: Result{Decision: Approve, Sign: true, Reason: proxyv1alpha1.ReasonAgentCSRApproved}, wantMsg: []string{`"cluster1"`}},
		{name: "agent certificate, RSA 2048, client auth only, O in another order",
			csr: agentCSR(t, withRequest(t, rsaKey(t, 2048), &x509.CertificateRequest{Subject: agentName(reordered)}),
				func(c *csrObject) { c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth} }),
			expected: &Expected{Cluster: testCluster, Subject: Subject{
				CommonName:          testAgentSubject.CommonName,
				Organizations:       []string{testAgentSubject.Organizations[0], "second"},
				OrganizationalUnits: testAgentSubject.OrganizationalUnits,
			}},
			want: Result{Decision: Approve, Sign: true, Reason: proxyv1alpha1.ReasonAgentCSRApproved}},
		{name: "hub kubeconfig, Ed25519", csr: hubCSR(t, withRequest(t, edKey, &x509.CertificateRequest{Subject: hubSubject()})),
			want: Result{Decision: Approve, Reason: proxyv1alpha1.ReasonHubKubeconfigCSRApproved}},
		{name: "hub kubeconfig, ECDSA P-384", csr: hubCSR(t, withRequest(t, ecKey(t, elliptic.P384()), &x509.CertificateRequest{Subject: hubSubject()})),
			want: Result{Decision: Approve, Reason: proxyv1alpha1.ReasonHubKubeconfigCSRApproved}},

		// Deny.
		{name: "expected subject of another cluster", csr: agentCSR(t), expected: &Expected{Cluster: "cluster2", Subject: testAgentSubject},
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonClusterLabelMismatch},
			wantMsg: []string{"metadata.labels[open-cluster-management.io/cluster-name]", `want "cluster2"`, `got "cluster1"`}},
		{name: "cluster not accepted", csr: hubCSR(t), notAccepted: true,
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonClusterNotAccepted}, wantMsg: []string{`"cluster1"`, "spec.hubAcceptsClient"}},
		{name: "requested by another cluster", csr: agentCSR(t, func(c *csrObject) {
			c.Spec.Username = "system:open-cluster-management:cluster2:agent-1"
		}),
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedRequestor},
			wantMsg: []string{"spec.username", `"system:open-cluster-management:cluster1:"`}},
		{name: "requestor lacks the cluster group", csr: hubCSR(t, func(c *csrObject) { c.Spec.Groups = []string{"system:authenticated"} }),
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedRequestor},
			wantMsg: []string{"spec.groups", `"system:open-cluster-management:cluster1"`}},
		{name: "server auth usage", csr: agentCSR(t, func(c *csrObject) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageServerAuth)
		}),
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedUsages},
			wantMsg: []string{"spec.usages", `"server auth"`, `"client auth"`}},
		{name: "no client auth usage", csr: hubCSR(t, func(c *csrObject) { c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature} }),
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedUsages}, wantMsg: []string{"spec.usages", `"client auth"`}},
		{name: "request is not PEM", csr: agentCSR(t, func(c *csrObject) { c.Spec.Request = []byte("garbage") }),
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonInvalidRequest}, wantMsg: []string{"spec.request", "CERTIFICATE REQUEST"}},
		{name: "request signature does not verify", csr: agentCSR(t, tampered),
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonInvalidRequest}, wantMsg: []string{"spec.request signature"}},
		{name: "RSA 1024", csr: hubCSR(t, withRequest(t, rsaKey(t, 1024), &x509.CertificateRequest{Subject: hubSubject()})),
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonWeakKey}, wantMsg: []string{"spec.request public key", "RSA of at least 2048 bits", "RSA of 1024 bits"}},
		{name: "ECDSA P-521", csr: agentCSR(t, withRequest(t, ecKey(t, elliptic.P521()), &x509.CertificateRequest{Subject: agentName(testAgentSubject)})),
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonWeakKey}, wantMsg: []string{"spec.request public key", "ECDSA P-521"}},
		{name: "DNS SAN", csr: agentCSR(t, withRequest(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{
			Subject: agentName(testAgentSubject), DNSNames: []string{"proxy.example.com"},
		})),
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedSANs},
			wantMsg: []string{"spec.request subject alternative names", "want none", `"proxy.example.com"`}},
		{name: "hub kubeconfig for another cluster's add-on", csr: hubCSR(t, withRequest(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{
			Subject: pkix.Name{
				CommonName:   "system:open-cluster-management:cluster:cluster2:addon:cluster-proxy:agent:a",
				Organization: hubSubject().Organization,
			},
		})),
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedSubject},
			wantMsg: []string{"subject CN", `"system:open-cluster-management:cluster:cluster1:addon:cluster-proxy:agent:"`}},
		{name: "hub kubeconfig with an extra group", csr: hubCSR(t, withRequest(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: hubSubject().CommonName, Organization: append(hubSubject().Organization, "system:masters")},
		})),
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedSubject},
			wantMsg: []string{"subject O", `["system:open-cluster-management:cluster:cluster1:addon:cluster-proxy"]`, `"system:masters"`}},
		{name: "agent certificate with the hub kubeconfig subject", csr: newCSR(t, AgentSignerName, hubSubject()),
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedSubject}, wantMsg: []string{"subject CN", `want "open-cluster-management:cluster-proxy:agent:cluster1"`}},
		{name: "agent certificate for the previous CA", csr: agentCSR(t),
			expected: &Expected{Cluster: testCluster, Subject: Subject{
				CommonName:          testAgentSubject.CommonName,
				Organizations:       testAgentSubject.Organizations,
				OrganizationalUnits: []string{"signer-fedcba9876543210"},
			}},
			want:    Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedSubject},
			wantMsg: []string{"subject OU", `want ["signer-fedcba9876543210"]`}},
		{name: "agent subject not advertised yet", csr: agentCSR(t), expected: &Expected{Cluster: testCluster},
			want: Result{Decision: Deny, Reason: proxyv1alpha1.ReasonUnexpectedSubject}, wantMsg: []string{"subject CN", "advertised"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			expected := testExpected()
			if tt.expected != nil {
				expected = *tt.expected
			}
			got := Review(tt.csr, !tt.notAccepted, expected)
			g.Expect(got.Decision).To(Equal(tt.want.Decision))
			g.Expect(got.Sign).To(Equal(tt.want.Sign))
			g.Expect(got.Reason).To(Equal(tt.want.Reason))
			g.Expect(got.Message).NotTo(BeEmpty())
			for _, sub := range tt.wantMsg {
				g.Expect(got.Message).To(ContainSubstring(sub))
			}
		})
	}
}

// The checks run in a fixed order, so a CSR with several problems is denied
// for the first one: identity problems before request problems.
func TestReviewReportsFirstProblem(t *testing.T) {
	g := NewWithT(t)
	csr := agentCSR(t,
		func(c *csrObject) { c.Spec.Username = "system:serviceaccount:default:mallory" },
		func(c *csrObject) { c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth} },
		func(c *csrObject) { c.Spec.Request = []byte("garbage") },
	)
	g.Expect(Review(csr, false, testExpected()).Reason).To(Equal(proxyv1alpha1.ReasonClusterNotAccepted))
	g.Expect(Review(csr, true, testExpected()).Reason).To(Equal(proxyv1alpha1.ReasonUnexpectedRequestor))
	csr.Spec.Username = testUsername
	g.Expect(Review(csr, true, testExpected()).Reason).To(Equal(proxyv1alpha1.ReasonUnexpectedUsages))
	csr.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}
	g.Expect(Review(csr, true, testExpected()).Reason).To(Equal(proxyv1alpha1.ReasonInvalidRequest))
}

// Review must not change the CSR it is given.
func TestReviewDoesNotModifyTheCSR(t *testing.T) {
	g := NewWithT(t)
	csr := agentCSR(t)
	before := csr.DeepCopy()
	reordered := testExpected()
	reordered.Subject.Organizations = []string{"b", "a"}
	Review(csr, true, reordered)
	Review(csr, true, testExpected())
	g.Expect(csr).To(Equal(before))
	g.Expect(reordered.Subject.Organizations).To(Equal([]string{"b", "a"}), "expected subject lists are not sorted in place")
}
