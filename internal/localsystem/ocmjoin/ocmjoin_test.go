package ocmjoin

import (
	"testing"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAwaitsAcceptanceApprovesOnlyTheClustersOwnBootstrapRequest(t *testing.T) {
	registration := func(mutate func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{clusterNameLabel: "cluster1"}},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Username:   BootstrapUser("cluster1"),
				SignerName: certificatesv1.KubeAPIServerClientSignerName,
			},
		}
		if mutate != nil {
			mutate(csr)
		}
		return csr
	}
	tests := []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		want bool
	}{
		{name: "pending registration", csr: registration(nil), want: true},
		{name: "add-on CSR", csr: registration(func(c *certificatesv1.CertificateSigningRequest) {
			c.Labels[addonNameLabel] = "cluster-proxy"
		})},
		{name: "another cluster's bootstrap identity", csr: registration(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username = BootstrapUser("cluster2")
		})},
		{name: "labelled for another cluster", csr: registration(func(c *certificatesv1.CertificateSigningRequest) {
			c.Labels[clusterNameLabel] = "cluster2"
		})},
		{name: "another signer", csr: registration(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.SignerName = "example.io/signer"
		})},
		{name: "already approved", csr: registration(func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		})},
		{name: "denied", csr: registration(func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue}}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(AwaitsAcceptance(tt.csr, "cluster1")).To(Equal(tt.want))
		})
	}
}
