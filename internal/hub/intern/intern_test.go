package intern

import (
	"encoding/json"
	"fmt"
	"testing"
	"unsafe"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
)

// addOn decodes a ManagedClusterAddOn as the cache does, from JSON: every string its own copy.
func addOn(t *testing.T, cluster string) *addonv1alpha1.ManagedClusterAddOn {
	t.Helper()
	raw := fmt.Sprintf(`{"metadata": {"name": "cluster-proxy", "namespace": %q, "uid": "uid-%s",
		"labels": {"app": "cluster-proxy"}, "annotations": {"example.com/owner": "team-a"},
		"ownerReferences": [{"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ClusterManagementAddOn", "name": "cluster-proxy", "uid": "cma"}]},
		"status": {"namespace": "open-cluster-management-cluster-proxy",
		"conditions": [{"type": "Available", "status": "True", "reason": "ProbeAvailable", "message": "the tunnel answers", "lastTransitionTime": "2026-11-28T10:00:00Z"}],
		"registrations": [{"signerName": "open-cluster-management.io/proxy-agent-signer", "subject": {"user": "agent-%s", "groups": ["open-cluster-management:cluster-proxy"]}}]}}`,
		cluster, cluster, cluster)
	mca := &addonv1alpha1.ManagedClusterAddOn{}
	if err := json.Unmarshal([]byte(raw), mca); err != nil {
		t.Fatal(err)
	}
	return mca
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestObjectsOfTwoClustersShareTheirCommonStringsAndKeepTheirValues(t *testing.T) {
	g := NewWithT(t)
	pool := NewPool(DefaultSize)
	a, b := addOn(t, "cluster1"), addOn(t, "cluster2")
	wantA, wantB := a.DeepCopy(), b.DeepCopy()
	g.Expect(same(a.Status.Conditions[0].Message, b.Status.Conditions[0].Message)).To(BeFalse(), "decoded apart")

	transform := pool.Transform(nil)
	for _, o := range []*addonv1alpha1.ManagedClusterAddOn{a, b} {
		out, err := transform(o)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(BeIdenticalTo(o))
	}
	g.Expect(a).To(Equal(wantA), "nothing changed but where the bytes are")
	g.Expect(b).To(Equal(wantB))

	for _, pair := range [][2]string{
		{a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
		{a.Status.Conditions[0].Message, b.Status.Conditions[0].Message},
		{a.Status.Namespace, b.Status.Namespace},
		{a.Status.Registrations[0].SignerName, b.Status.Registrations[0].SignerName},
		{a.Status.Registrations[0].Subject.Groups[0], b.Status.Registrations[0].Subject.Groups[0]},
		{a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		{a.Labels["app"], b.Labels["app"]},
		{a.Annotations["example.com/owner"], b.Annotations["example.com/owner"]},
	} {
		g.Expect(same(pair[0], pair[1])).To(BeTrue(), "%q is shared", pair[0])
	}
	for k := range a.Labels {
		for l := range b.Labels {
			g.Expect(same(k, l)).To(BeTrue(), "label key %q is shared", k)
		}
	}
}

func TestBytesAndWhatOnlyAnInterfaceReachesAreLeftAlone(t *testing.T) {
	g := NewWithT(t)
	pool := NewPool(DefaultSize)
	request := []byte("-----BEGIN CERTIFICATE REQUEST-----")
	csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: request, SignerName: "s"}}
	pool.Object(csr)
	g.Expect(&csr.Spec.Request[0]).To(BeIdenticalTo(&request[0]))

	var notAPointer any = metav1.Condition{Type: "Available"}
	pool.Object(notAPointer) // nothing to set: no panic
	g.Expect(notAPointer.(metav1.Condition).Type).To(Equal("Available"))
}

func TestAStringSeenOnceIsForgottenAndOneThatRepeatsIsKept(t *testing.T) {
	g := NewWithT(t)
	pool := NewPool(4)
	first := pool.String(string([]byte("Available")))
	once := pool.String(string([]byte("uid-1")))
	for i := range 12 {
		g.Expect(same(pool.String(string([]byte("Available"))), first)).To(BeTrue(), "kept while it repeats, round %d", i)
		pool.String(fmt.Sprintf("rv-%d", i))
	}
	g.Expect(same(pool.String(string([]byte("uid-1"))), once)).To(BeFalse(), "forgotten after two generations")
	g.Expect(len(pool.current)+len(pool.previous)).To(BeNumerically("<=", 8), "bounded: two generations of 4")
}
