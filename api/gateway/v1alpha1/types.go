package v1alpha1

import (
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the aggregated API.
var GroupVersion = schema.GroupVersion{Group: "gateway.proxy.open-cluster-management.io", Version: "v1alpha1"}

// Resource names of the API, and the subresource whose verbs (from the HTTP method) hub RBAC grants per cluster.
const (
	Resource         = "clusters"
	ProxySubresource = "proxy"
)

// +kubebuilder:object:root=true

// Cluster is a managed cluster with the cluster-proxy add-on, as a hub user choosing one sees it. Its name is the
// cluster's; clusters/<name>/proxy/<path> reaches its kube-apiserver.
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterStatus is what the operator knows of the cluster's tunnel (its ClusterProxyStatus).
type ClusterStatus struct {
	// installed is true when the agent is deployed to the cluster.
	Installed bool `json:"installed,omitempty"`
	// available is true when the cluster is reachable through its tunnel.
	Available bool `json:"available,omitempty"`
	// connectedAgents is the number of the cluster's agent replicas every proxy-server replica holds.
	ConnectedAgents int32 `json:"connectedAgents,omitempty"`
	// probedHealth is the result of the last GET /healthz through the tunnel.
	ProbedHealth string `json:"probedHealth,omitempty"`
	// latency is the round trip of that probe.
	Latency string `json:"latency,omitempty"`
	// lastProbeTime is when that probe was made.
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// agentNamespace is the namespace the agent runs in on the cluster.
	AgentNamespace string `json:"agentNamespace,omitempty"`
	// conditions are the ClusterProxyStatus conditions: AgentDeployed, AgentConnected, TunnelHealthy,
	// ProxySettingsApplied, CertificateReady, Available.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterList is a list of Clusters.
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

// +kubebuilder:object:root=true

// ClusterProxyOptions are the options of a clusters/proxy request: the path on the cluster's kube-apiserver.
type ClusterProxyOptions struct {
	metav1.TypeMeta `json:",inline"`
	// path is what follows proxy/ in the request's path.
	Path string `json:"path,omitempty"`
}

// AddToScheme registers the kinds under GroupVersion and, for the API server's handlers, under the group's internal
// version: the served version is the only one, so the same types stand for both and nothing is converted.
func AddToScheme(s *runtime.Scheme) error {
	for _, gv := range []schema.GroupVersion{GroupVersion, {Group: GroupVersion.Group, Version: runtime.APIVersionInternal}} {
		s.AddKnownTypes(gv, &Cluster{}, &ClusterList{}, &ClusterProxyOptions{})
	}
	metav1.AddToGroupVersion(s, GroupVersion)
	// A connect request's query (with the path after proxy/ added as "path") becomes its options.
	return s.AddConversionFunc((*url.Values)(nil), (*ClusterProxyOptions)(nil), func(a, b any, _ conversion.Scope) error {
		b.(*ClusterProxyOptions).Path = a.(*url.Values).Get("path")
		return nil
	})
}
