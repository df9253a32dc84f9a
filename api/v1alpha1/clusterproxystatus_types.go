package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterProxyStatusSpec names the managed cluster the status describes.
type ClusterProxyStatusSpec struct {
	// clusterName is the ManagedCluster this status describes.
	// +kubebuilder:validation:MinLength=1
	ClusterName string `json:"clusterName"`
}

// ProbeStatus is the last GET /healthz made through the cluster's tunnel.
type ProbeStatus struct {
	// lastProbeTime is when the reported result was measured. Probes run every 30 seconds by default; those that
	// confirm the reported result (same health, latency between about half and twice the reported one) are not
	// written, so a steady state makes no API writes.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// health is the result: True when the managed kube-apiserver answered ok, False when it did not or no agent is
	// connected, Unknown when the proxy-servers cannot be asked.
	// +optional
	Health string `json:"health,omitempty"`
	// latency of the probe, as a duration string such as 3.2ms.
	// +optional
	Latency string `json:"latency,omitempty"`
	// message details a failed probe.
	// +optional
	Message string `json:"message,omitempty"`
}

// ProxySettings are the forward-proxy settings in effect for the cluster's agent.
type ProxySettings struct {
	// httpProxy in effect.
	// +optional
	HTTPProxy string `json:"httpProxy,omitempty"`
	// httpsProxy in effect.
	// +optional
	HTTPSProxy string `json:"httpsProxy,omitempty"`
	// noProxy in effect.
	// +optional
	NoProxy string `json:"noProxy,omitempty"`
	// caBundleFingerprint is the SHA-256 fingerprint of the proxy CA bundle shipped to the agent.
	// +optional
	CABundleFingerprint string `json:"caBundleFingerprint,omitempty"`
	// source is the AddOnDeploymentConfig (namespace/name) the settings came from.
	// +optional
	Source string `json:"source,omitempty"`
}

// ManifestWorkStatus summarises the agent ManifestWork.
type ManifestWorkStatus struct {
	// name of the ManifestWork in the cluster namespace.
	// +optional
	Name string `json:"name,omitempty"`
	// applied is true when the work agent applied every manifest.
	// +optional
	Applied bool `json:"applied,omitempty"`
	// available is true when every applied resource exists on the managed cluster.
	// +optional
	Available bool `json:"available,omitempty"`
}

// The operator is the status's one writer and always writes it whole, so it is atomic: its managed fields are one
// entry for the whole status instead of one per field of every condition, which made up 40% of each object, and every
// write and read of a thousand of them costs less.
// +structType=atomic

// ClusterProxyStatusStatus is the per-cluster view of the proxy, written whole by the operator.
type ClusterProxyStatusStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// installed is true when the agent is deployed to the cluster.
	// +optional
	Installed bool `json:"installed,omitempty"`
	// available is true when the cluster is reachable through its tunnel.
	// +optional
	Available bool `json:"available,omitempty"`
	// agentNamespace is the namespace the agent is installed in on the managed cluster.
	// +optional
	AgentNamespace string `json:"agentNamespace,omitempty"`
	// agentImage is the image the agent runs.
	// +optional
	AgentImage string `json:"agentImage,omitempty"`
	// connectedAgents is the number of agent replicas of the cluster that every proxy-server replica holds (the
	// replica holding the fewest counts): zero while one proxy-server has none.
	// +optional
	ConnectedAgents int32 `json:"connectedAgents,omitempty"`
	// probe is the last health probe through the tunnel.
	// +optional
	Probe *ProbeStatus `json:"probe,omitempty"`
	// proxySettings are the forward-proxy settings in effect.
	// +optional
	ProxySettings *ProxySettings `json:"proxySettings,omitempty"`
	// agentCertificateNotAfter is when the agent's client certificate expires.
	// +optional
	AgentCertificateNotAfter *metav1.Time `json:"agentCertificateNotAfter,omitempty"`
	// agentCertificateAuthorityKeyID names (hex subject key ID) the CA that signed the agent's certificate; a rotated CA
	// stays in the trust bundle while any agent certificate it signed is in use.
	// +optional
	AgentCertificateAuthorityKeyID string `json:"agentCertificateAuthorityKeyID,omitempty"`
	// manifestWork summarises the ManifestWork that installs the agent.
	// +optional
	ManifestWork *ManifestWorkStatus `json:"manifestWork,omitempty"`
	// conditions: AgentDeployed, AgentConnected, TunnelHealthy, ProxySettingsApplied, CertificateReady, Available.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cps
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Installed",type=boolean,JSONPath=`.status.installed`
// +kubebuilder:printcolumn:name="Available",type=boolean,JSONPath=`.status.available`
// +kubebuilder:printcolumn:name="Probed Health",type=string,JSONPath=`.status.probe.health`
// +kubebuilder:printcolumn:name="Latency",type=string,JSONPath=`.status.probe.latency`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterProxyStatus is the state of the proxy for one managed cluster, kept in the cluster namespace.
type ClusterProxyStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterProxyStatusSpec   `json:"spec,omitempty"`
	Status ClusterProxyStatusStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterProxyStatusList is a list of ClusterProxyStatus.
type ClusterProxyStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProxyStatus `json:"items"`
}
