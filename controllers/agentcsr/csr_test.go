package agentcsr

import (
	"context"
	"crypto/x509/pkix"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/certtest"
)

// TestAnAgentCSRIsReviewedAgainstTheAddOnAsTheAPIServerHasIt: the klusterlet asks for the agent certificate as soon as
// the add-on's status advertises it, which may be before the manager's cache has seen that status. The CSR is
// approved by what the API server holds, not denied by the cache's older copy: a denial is final, the klusterlet
// would not ask again and the cluster would wait for its agent forever.
func TestAnAgentCSRIsReviewedAgainstTheAddOnAsTheAPIServerHasIt(t *testing.T) {
	ctx := context.Background()
	const cluster, agentNamespace = "cluster1", "open-cluster-management-agent-addon"
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	mpc.Status.Signer = &proxyv1alpha1.SignerStatus{CAFingerprint: "SHA256:0123456789abcdef0123"}
	managed := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}, Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true}}
	cachedAddOn := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: proxyv1alpha1.AddonName}}
	liveAddOn := cachedAddOn.DeepCopy()
	liveAddOn.Status.Namespace = agentNamespace
	subject := contract.AgentCertificateSubject(cluster, agentNamespace, mpc.Status.Signer.CAFingerprint)
	csr := agentCSR(t, cluster, pkix.Name{CommonName: subject.CommonName, Organization: subject.Organizations, OrganizationalUnit: subject.OrganizationalUnits})

	build := func(objs ...client.Object) client.Client {
		return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
			WithStatusSubresource(&certificatesv1.CertificateSigningRequest{}).Build()
	}
	cache := build(mpc, cachedAddOn, managed, csr)
	r := &Reconciler{Client: cache, APIReader: build(liveAddOn, managed), Recorder: events.NewFakeRecorder(10),
		Clock: clocktesting.NewFakePassiveClock(time.Now())}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(csr)}); err != nil {
		t.Fatal(err)
	}
	reviewed := &certificatesv1.CertificateSigningRequest{}
	if err := cache.Get(ctx, client.ObjectKeyFromObject(csr), reviewed); err != nil {
		t.Fatal(err)
	}
	if len(reviewed.Status.Conditions) != 1 || reviewed.Status.Conditions[0].Type != certificatesv1.CertificateApproved {
		t.Fatalf("want the CSR approved by the add-on as the API server has it, got %+v", reviewed.Status.Conditions)
	}
}

// agentCSR is a proxy-agent CSR as cluster's klusterlet creates it, for subject, with a fresh P-256 key.
func agentCSR(t *testing.T, cluster string, subject pkix.Name) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	request, err := certtest.RequestPEM(subject)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "addon-" + cluster + "-cluster-proxy-x7k2p", Labels: map[string]string{
			csrreview.ClusterNameLabel: cluster, csrreview.AddonNameLabel: csrreview.AddonName}},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request,
			SignerName: csrreview.AgentSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Username:   "system:open-cluster-management:" + cluster + ":agent-7f9d2",
			Groups:     []string{"system:open-cluster-management:" + cluster, "system:authenticated"},
		},
	}
}
