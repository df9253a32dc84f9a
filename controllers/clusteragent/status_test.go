package clusteragent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
)

// steadyTunnels reports the same healthy tunnel for every cluster.
type steadyTunnels struct{}

func (steadyTunnels) Tunnel(string) (tunnelhealth.State, bool) {
	return tunnelhealth.State{Time: probeAt, ConnectedAgents: 1, Probe: &tunnelhealth.Probe{Healthy: true, Latency: time.Millisecond}}, true
}

func (steadyTunnels) Changes() <-chan event.TypedGenericEvent[string] { return nil }

// TestComputeStatusRequeue: tunnel health is never polled, so the only timer is the agent certificate's expiry.
func TestComputeStatusRequeue(t *testing.T) {
	now := probeAt
	ca, err := certs.NewCA("agent", 48*time.Hour, now)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	signed := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-c1", Labels: map[string]string{csrreview.ClusterNameLabel: "c1"}},
		Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: csrreview.AgentSignerName},
		Status:     certificatesv1.CertificateSigningRequestStatus{Certificate: ca.CertPEM},
	}
	for _, tc := range []struct {
		name    string
		csrs    []client.Object
		requeue time.Duration
	}{
		{"tunnels set, no certificate: not on a timer", nil, 0},
		{"a certificate: at its expiry", []client.Object{signed}, 48 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.csrs...).
				WithIndex(&certificatesv1.CertificateSigningRequest{}, index.CSRCluster, index.ClusterOfCSR).
				Build()
			r := &Reconciler{Client: c, Tunnels: steadyTunnels{}}
			s := &scope{mca: &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: "c1", Name: proxyv1alpha1.AddonName}}}
			st := &proxyv1alpha1.ClusterProxyStatusStatus{}
			requeue, err := r.computeStatus(context.Background(), st, s, 1, now)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(requeue).To(Equal(tc.requeue))
			g.Expect(st.ConnectedAgents).To(Equal(int32(1)), "the tunnel was observed")
		})
	}
}
