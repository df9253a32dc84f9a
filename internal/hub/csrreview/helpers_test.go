package csrreview

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type csrObject = certificatesv1.CertificateSigningRequest

const (
	testCluster  = "cluster1"
	testUsername = "system:open-cluster-management:cluster1:agent-7f9d2"
)

// testAgentSubject is what the operator advertises for cluster1's agent.
var testAgentSubject = Subject{
	CommonName:          "open-cluster-management:cluster-proxy:agent:cluster1",
	Organizations:       []string{"open-cluster-management:cluster-proxy"},
	OrganizationalUnits: []string{"signer-0123456789abcdef"},
}

func testExpected() Expected {
	return Expected{Cluster: testCluster, Subject: testAgentSubject}
}

// hubSubject is the subject OCM's klusterlet requests for the add-on's hub
// kubeconfig of cluster1.
func hubSubject() pkix.Name {
	return pkix.Name{
		CommonName:   "system:open-cluster-management:cluster:cluster1:addon:cluster-proxy:agent:addon-agent-x2b7k",
		Organization: []string{"system:open-cluster-management:cluster:cluster1:addon:cluster-proxy"},
	}
}

func agentName(s Subject) pkix.Name {
	return pkix.Name{CommonName: s.CommonName, Organization: s.Organizations, OrganizationalUnit: s.OrganizationalUnits}
}

func ecKey(t *testing.T, curve elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(curve, rand.Reader)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return key
}

func rsaKey(t *testing.T, bits int) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, bits)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return key
}

// requestPEM creates a real PEM certificate request signed by key.
func requestPEM(t *testing.T, key crypto.Signer, template *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, template, key)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// parsedRequest returns the parsed form of a request made by requestPEM.
func parsedRequest(t *testing.T, key crypto.Signer, template *x509.CertificateRequest) *x509.CertificateRequest {
	t.Helper()
	req, d := parseRequest(requestPEM(t, key, template))
	NewWithT(t).Expect(d).To(BeNil())
	return req
}

// newCSR is a CSR as OCM's klusterlet creates it for cluster1's cluster-proxy
// add-on, with a request for subject signed by a fresh P-256 key.
func newCSR(t *testing.T, signer string, subject pkix.Name, mutate ...func(*csrObject)) *csrObject {
	t.Helper()
	csr := &csrObject{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "addon-cluster1-cluster-proxy-",
			Labels: map[string]string{
				ClusterNameLabel: testCluster,
				AddonNameLabel:   AddonName,
			},
		},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    requestPEM(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{Subject: subject}),
			SignerName: signer,
			Usages: []certificatesv1.KeyUsage{
				certificatesv1.UsageDigitalSignature,
				certificatesv1.UsageKeyEncipherment,
				certificatesv1.UsageClientAuth,
			},
			Username: testUsername,
			Groups: []string{
				"system:open-cluster-management:cluster1",
				"system:open-cluster-management:managed-clusters",
				"system:authenticated",
			},
		},
	}
	for _, m := range mutate {
		m(csr)
	}
	return csr
}

func hubCSR(t *testing.T, mutate ...func(*csrObject)) *csrObject {
	t.Helper()
	return newCSR(t, certificatesv1.KubeAPIServerClientSignerName, hubSubject(), mutate...)
}

func agentCSR(t *testing.T, mutate ...func(*csrObject)) *csrObject {
	t.Helper()
	return newCSR(t, AgentSignerName, agentName(testAgentSubject), mutate...)
}

// withRequest replaces spec.request with a request for template signed by key.
func withRequest(t *testing.T, key crypto.Signer, template *x509.CertificateRequest) func(*csrObject) {
	t.Helper()
	request := requestPEM(t, key, template)
	return func(csr *csrObject) { csr.Spec.Request = request }
}

func withCondition(typ certificatesv1.RequestConditionType) func(*csrObject) {
	return func(csr *csrObject) {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type:   typ,
			Status: "True",
			Reason: "Test",
		})
	}
}
