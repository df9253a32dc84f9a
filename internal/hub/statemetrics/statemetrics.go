// Package statemetrics turns what the operator reports in status (each cluster's ClusterProxyStatus, each
// ProxyCertificate, each ManagedProxyConfiguration and its CA) into Prometheus series, read from the manager's cache
// at scrape time as kube-state-metrics does: a cluster or certificate that goes away leaves no stale series, and a
// scrape costs one list of cached objects per kind, no API request.
package statemetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// conditionStatuses are the values of the status label; each condition is reported once per value, 1 for the one it
// has and 0 for the others, so an alert can select `status="False"` without missing the series when it flips.
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

var (
	clusterCondition = prometheus.NewDesc("cluster_proxy_cluster_status_condition",
		"A condition of a managed cluster's ClusterProxyStatus (AgentDeployed, AgentConnected, TunnelHealthy, "+
			"ProxySettingsApplied, CertificateReady, Available): 1 for the status it has, 0 for the others.",
		[]string{"cluster", "condition", "status"}, nil)
	clusterConnectedAgents = prometheus.NewDesc("cluster_proxy_cluster_connected_agents",
		"Agents of a managed cluster that every proxy-server replica holds (the count of the replica holding the fewest).",
		[]string{"cluster"}, nil)
	clusterInstalled = prometheus.NewDesc("cluster_proxy_cluster_installed",
		"1 when a managed cluster's agent is installed (its ManifestWork applied), else 0.",
		[]string{"cluster"}, nil)
	clusterProbeLatency = prometheus.NewDesc("cluster_proxy_cluster_probe_latency_seconds",
		"Latency of the last reported GET /healthz through a managed cluster's tunnel, as its ClusterProxyStatus shows "+
			"it (updated when it halves or doubles).",
		[]string{"cluster"}, nil)
	clusterAgentCertExpiry = prometheus.NewDesc("cluster_proxy_cluster_agent_certificate_expiry_timestamp_seconds",
		"When the client certificate of a managed cluster's agent expires, as Unix time.",
		[]string{"cluster"}, nil)
	certificateExpiry = prometheus.NewDesc("cluster_proxy_certificate_expiry_timestamp_seconds",
		"When the certificate a ProxyCertificate issued expires, as Unix time.",
		[]string{"namespace", "name"}, nil)
	certificateRenewal = prometheus.NewDesc("cluster_proxy_certificate_renewal_timestamp_seconds",
		"When a ProxyCertificate's certificate is due for renewal, as Unix time.",
		[]string{"namespace", "name"}, nil)
	certificateReady = prometheus.NewDesc("cluster_proxy_certificate_ready",
		"1 when a ProxyCertificate's condition Ready is True, else 0.",
		[]string{"namespace", "name"}, nil)
	configurationCondition = prometheus.NewDesc("cluster_proxy_configuration_status_condition",
		"A condition of a ManagedProxyConfiguration: 1 for the status it has, 0 for the others.",
		[]string{"configuration", "condition", "status"}, nil)
	caExpiry = prometheus.NewDesc("cluster_proxy_ca_expiry_timestamp_seconds",
		"When the CA that signs a ManagedProxyConfiguration's certificates expires, as Unix time.",
		[]string{"configuration"}, nil)
	caBundleSize = prometheus.NewDesc("cluster_proxy_ca_bundle_certificates",
		"CAs in a ManagedProxyConfiguration's published bundle (proxy-server-ca): 1, or more while a CA rollover "+
			"waits for every certificate of the earlier CA to be re-issued.",
		[]string{"configuration"}, nil)
	configurationClusters = prometheus.NewDesc("cluster_proxy_configuration_clusters",
		"Managed clusters of a ManagedProxyConfiguration, by state: installed (agent installed) or connected (agent "+
			"connected to the proxy-servers).",
		[]string{"configuration", "state"}, nil)
)

// Collector reports the objects' state. It reports nothing until elected is closed: a manager that does not lead
// holds the same cache, and two replicas reporting the same series would double every sum an alert takes.
type Collector struct {
	reader  client.Reader
	elected <-chan struct{}
	timeout time.Duration
}

// New returns a collector that lists the objects from reader (the manager's cache) once elected is closed.
func New(reader client.Reader, elected <-chan struct{}) *Collector {
	return &Collector{reader: reader, elected: elected, timeout: 10 * time.Second}
}

// Describe sends every descriptor the collector may report.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterCondition, clusterConnectedAgents, clusterInstalled, clusterProbeLatency,
		clusterAgentCertExpiry, certificateExpiry, certificateRenewal, certificateReady, configurationCondition, caExpiry,
		caBundleSize, configurationClusters} {
		ch <- d
	}
}

// Collect lists the cached objects, read-only and uncopied (a scrape of a large hub would copy every cluster's status),
// and reports them. A list that fails (the cache not synced yet) reports nothing of
// that kind rather than zeros that would read as "every cluster down".
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var statuses proxyv1alpha1.ClusterProxyStatusList
	if err := c.reader.List(ctx, &statuses, client.UnsafeDisableDeepCopy); err == nil {
		for i := range statuses.Items {
			ClusterMetrics(&statuses.Items[i], ch)
		}
	}
	var certificates proxyv1alpha1.ProxyCertificateList
	if err := c.reader.List(ctx, &certificates, client.UnsafeDisableDeepCopy); err == nil {
		for i := range certificates.Items {
			CertificateMetrics(&certificates.Items[i], ch)
		}
	}
	var configurations proxyv1alpha1.ManagedProxyConfigurationList
	if err := c.reader.List(ctx, &configurations, client.UnsafeDisableDeepCopy); err == nil {
		for i := range configurations.Items {
			ConfigurationMetrics(&configurations.Items[i], ch)
		}
	}
}

// ClusterMetrics reports one ClusterProxyStatus.
func ClusterMetrics(s *proxyv1alpha1.ClusterProxyStatus, ch chan<- prometheus.Metric) {
	cluster := s.Spec.ClusterName
	if cluster == "" {
		cluster = s.Namespace
	}
	conditions(clusterCondition, cluster, s.Status.Conditions, ch)
	ch <- prometheus.MustNewConstMetric(clusterInstalled, prometheus.GaugeValue, boolValue(s.Status.Installed), cluster)
	ch <- prometheus.MustNewConstMetric(clusterConnectedAgents, prometheus.GaugeValue, float64(s.Status.ConnectedAgents), cluster)
	if p := s.Status.Probe; p != nil && p.Latency != "" {
		if d, err := time.ParseDuration(p.Latency); err == nil {
			ch <- prometheus.MustNewConstMetric(clusterProbeLatency, prometheus.GaugeValue, d.Seconds(), cluster)
		}
	}
	if t := s.Status.AgentCertificateNotAfter; t != nil {
		ch <- prometheus.MustNewConstMetric(clusterAgentCertExpiry, prometheus.GaugeValue, unix(t), cluster)
	}
}

// CertificateMetrics reports one ProxyCertificate.
func CertificateMetrics(pc *proxyv1alpha1.ProxyCertificate, ch chan<- prometheus.Metric) {
	ready := false
	for _, c := range pc.Status.Conditions {
		if c.Type == proxyv1alpha1.ConditionReady {
			ready = c.Status == metav1.ConditionTrue
		}
	}
	ch <- prometheus.MustNewConstMetric(certificateReady, prometheus.GaugeValue, boolValue(ready), pc.Namespace, pc.Name)
	if t := pc.Status.NotAfter; t != nil {
		ch <- prometheus.MustNewConstMetric(certificateExpiry, prometheus.GaugeValue, unix(t), pc.Namespace, pc.Name)
	}
	if t := pc.Status.RenewalTime; t != nil {
		ch <- prometheus.MustNewConstMetric(certificateRenewal, prometheus.GaugeValue, unix(t), pc.Namespace, pc.Name)
	}
}

// ConfigurationMetrics reports one ManagedProxyConfiguration and its CA.
func ConfigurationMetrics(mpc *proxyv1alpha1.ManagedProxyConfiguration, ch chan<- prometheus.Metric) {
	conditions(configurationCondition, mpc.Name, mpc.Status.Conditions, ch)
	ch <- prometheus.MustNewConstMetric(configurationClusters, prometheus.GaugeValue, float64(mpc.Status.ClustersInstalled), mpc.Name, "installed")
	ch <- prometheus.MustNewConstMetric(configurationClusters, prometheus.GaugeValue, float64(mpc.Status.ClustersConnected), mpc.Name, "connected")
	if s := mpc.Status.Signer; s != nil {
		if s.CANotAfter != nil {
			ch <- prometheus.MustNewConstMetric(caExpiry, prometheus.GaugeValue, unix(s.CANotAfter), mpc.Name)
		}
		ch <- prometheus.MustNewConstMetric(caBundleSize, prometheus.GaugeValue, float64(len(s.BundleFingerprints)), mpc.Name)
	}
}

// conditions reports each condition once per status value.
func conditions(desc *prometheus.Desc, owner string, have []metav1.Condition, ch chan<- prometheus.Metric) {
	for _, c := range have {
		for _, status := range conditionStatuses {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, boolValue(c.Status == status), owner, c.Type, string(status))
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t *metav1.Time) float64 { return float64(t.UnixNano()) / 1e9 }
