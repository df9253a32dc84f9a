package statemetrics

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
)

var expiry = metav1.NewTime(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC))

func objects() []client.Object {
	return []client.Object{
		&proxyv1alpha1.ClusterProxyStatus{
			ObjectMeta: metav1.ObjectMeta{Namespace: "cluster1", Name: "cluster-proxy"},
			Spec:       proxyv1alpha1.ClusterProxyStatusSpec{ClusterName: "cluster1"},
			Status: proxyv1alpha1.ClusterProxyStatusStatus{
				Installed: true, ConnectedAgents: 2, AgentCertificateNotAfter: &expiry,
				Probe:      &proxyv1alpha1.ProbeStatus{Health: "True", Latency: "3.5ms"},
				Conditions: []metav1.Condition{{Type: proxyv1alpha1.ConditionTunnelHealthy, Status: metav1.ConditionFalse, Reason: "ProbeFailed"}},
			},
		},
		&proxyv1alpha1.ProxyCertificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "open-cluster-management-addon", Name: "proxy-client"},
			Status: proxyv1alpha1.ProxyCertificateStatus{NotAfter: &expiry, RenewalTime: &expiry,
				Conditions: []metav1.Condition{{Type: proxyv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Issued"}}},
		},
		&proxyv1alpha1.ManagedProxyConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy"},
			Status: proxyv1alpha1.ManagedProxyConfigurationStatus{ClustersInstalled: 3, ClustersConnected: 2,
				Signer: &proxyv1alpha1.SignerStatus{CANotAfter: &expiry, BundleFingerprints: []string{"a", "b"}}},
		},
	}
}

func TestCollectorReportsTheStateOfClustersCertificatesAndConfigurations(t *testing.T) {
	g := NewWithT(t)
	reader := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objects()...).Build()
	elected := make(chan struct{})
	close(elected)
	want := `
# HELP cluster_proxy_ca_bundle_certificates CAs in a ManagedProxyConfiguration's published bundle (proxy-server-ca): 1, or more while a CA rollover waits for every certificate of the earlier CA to be re-issued.
# TYPE cluster_proxy_ca_bundle_certificates gauge
cluster_proxy_ca_bundle_certificates{configuration="cluster-proxy"} 2
# HELP cluster_proxy_cluster_status_condition A condition of a managed cluster's ClusterProxyStatus (AgentDeployed, AgentConnected, TunnelHealthy, ProxySettingsApplied, CertificateReady, Available): 1 for the status it has, 0 for the others.
# TYPE cluster_proxy_cluster_status_condition gauge
cluster_proxy_cluster_status_condition{cluster="cluster1",condition="TunnelHealthy",status="False"} 1
cluster_proxy_cluster_status_condition{cluster="cluster1",condition="TunnelHealthy",status="True"} 0
cluster_proxy_cluster_status_condition{cluster="cluster1",condition="TunnelHealthy",status="Unknown"} 0
# HELP cluster_proxy_cluster_probe_latency_seconds Latency of the last reported GET /healthz through a managed cluster's tunnel, as its ClusterProxyStatus shows it (updated when it halves or doubles).
# TYPE cluster_proxy_cluster_probe_latency_seconds gauge
cluster_proxy_cluster_probe_latency_seconds{cluster="cluster1"} 0.0035
# HELP cluster_proxy_certificate_expiry_timestamp_seconds When the certificate a ProxyCertificate issued expires, as Unix time.
# TYPE cluster_proxy_certificate_expiry_timestamp_seconds gauge
cluster_proxy_certificate_expiry_timestamp_seconds{name="proxy-client",namespace="open-cluster-management-addon"} 1.8038592e+09
# HELP cluster_proxy_configuration_clusters Managed clusters of a ManagedProxyConfiguration, by state: installed (agent installed) or connected (agent connected to the proxy-servers).
# TYPE cluster_proxy_configuration_clusters gauge
cluster_proxy_configuration_clusters{configuration="cluster-proxy",state="connected"} 2
cluster_proxy_configuration_clusters{configuration="cluster-proxy",state="installed"} 3
`
	g.Expect(testutil.CollectAndCompare(New(reader, elected), strings.NewReader(want),
		"cluster_proxy_ca_bundle_certificates", "cluster_proxy_cluster_status_condition", "cluster_proxy_cluster_probe_latency_seconds",
		"cluster_proxy_certificate_expiry_timestamp_seconds", "cluster_proxy_configuration_clusters")).To(Succeed())
	g.Expect(testutil.CollectAndCount(New(reader, elected))).To(Equal(3 + 1 + 1 + 1 + 1 + 3 + 2 + 1 + 1))
}

func TestCollectorReportsNothingBeforeItLeads(t *testing.T) {
	reader := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objects()...).Build()
	NewWithT(t).Expect(testutil.CollectAndCount(New(reader, make(chan struct{})))).To(BeZero())
}

var _ prometheus.Collector = (*Collector)(nil)
