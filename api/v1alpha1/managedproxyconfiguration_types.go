package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ManagedProxyConfigurationSpec is the desired state of the hub proxy servers and of the agents they serve.
// Field names and defaults match the existing OCM cluster-proxy addon so its manifests apply unchanged.
type ManagedProxyConfigurationSpec struct {
	// authentication says how the certificates between proxy servers, agents and clients are signed and stored.
	// +required
	Authentication ManagedProxyConfigurationAuthentication `json:"authentication"`
	// proxyServer describes the proxy-server Deployment on the hub.
	// +required
	ProxyServer ManagedProxyConfigurationProxyServer `json:"proxyServer"`
	// proxyAgent describes the proxy-agent Deployment installed on every managed cluster.
	// +required
	ProxyAgent ManagedProxyConfigurationProxyAgent `json:"proxyAgent"`
	// deploy overrides details shared by servers and agents, such as ports.
	// +optional
	// +kubebuilder:default={ports:{}}
	Deploy *ManagedProxyConfigurationDeploy `json:"deploy,omitempty"`
	// userServer configures the HTTPS user-server that routes https://<user-server>/<cluster>/... to managed clusters.
	// +optional
	UserServer *ManagedProxyConfigurationUserServer `json:"userServer,omitempty"`
	// hubUsers says how hub users are named on the managed clusters they reach through the hub's aggregated API or
	// the user-server. They arrive there as impersonation, never with their hub credential.
	// +optional
	HubUsers *HubUsers `json:"hubUsers,omitempty"`
	// networkPolicies, when enabled, adds NetworkPolicies that admit to the proxy-server pods only the ports they serve,
	// and to each agent only its health port, with egress limited to DNS, the kube-apiserver, the entrypoint and the
	// forward proxy (any egress while the user-server is on: the service-proxy reaches the allowed services). They take
	// effect where the network plugin enforces NetworkPolicies.
	// +optional
	NetworkPolicies *ManagedProxyConfigurationNetworkPolicies `json:"networkPolicies,omitempty"`
	// tlsProfile is the lowest TLS version and the TLS 1.2 cipher suites of every TLS listener of the proxy-servers
	// (gRPC frontend, agent endpoint, HTTP CONNECT, user-server). A change applies to new handshakes without a
	// restart; open tunnels stay. The hub's aggregated API takes the profile its pod finds when it starts. Unset: OCM's ocm-tls-profile ConfigMap in the manager's namespace (the manager's
	// --tls-profile-namespace), else TLS 1.2 and Go's secure cipher suites.
	// +optional
	TLSProfile *ManagedProxyConfigurationTLSProfile `json:"tlsProfile,omitempty"`
	// audit records every request the proxy-servers send to a managed cluster, through the hub's aggregated API and
	// the user-server, as audit.k8s.io/v1 events: to a rotated file, to a webhook, or both. Unset: no audit events
	// (the access log line per request stays).
	// +optional
	Audit *ManagedProxyConfigurationAudit `json:"audit,omitempty"`
	// sessionRecording records exec and attach sessions (kubectl exec, attach and debug) through the proxy-servers as
	// asciicast v2 files. Unset: sessions are not recorded.
	// +optional
	SessionRecording *ManagedProxyConfigurationSessionRecording `json:"sessionRecording,omitempty"`
}

// ManagedProxyConfigurationTLSProfile is a TLS security profile.
type ManagedProxyConfigurationTLSProfile struct {
	// minTLSVersion is the lowest TLS version a server accepts.
	// +optional
	// +kubebuilder:validation:Enum=VersionTLS12;VersionTLS13
	MinTLSVersion string `json:"minTLSVersion,omitempty"`
	// cipherSuites are the IANA names of the TLS 1.2 cipher suites a server accepts (Go's secure ones, e.g.
	// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256); TLS 1.3 suites are fixed. Empty: Go's defaults.
	// +optional
	// +listType=atomic
	CipherSuites []string `json:"cipherSuites,omitempty"`
}

// ManagedProxyConfigurationNetworkPolicies turns the product's NetworkPolicies on.
type ManagedProxyConfigurationNetworkPolicies struct {
	// enabled adds the NetworkPolicies; turning it off removes them.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
}

// AuthenticationSignerType is the source of the CA that signs every proxy certificate.
// +kubebuilder:validation:Enum=SelfSigned;Provided
type AuthenticationSignerType string

const (
	// SelfSigned generates the CA into the secret cluster-proxy-signer and rotates it before it expires.
	SelfSigned AuthenticationSignerType = "SelfSigned"
	// Provided uses the CA in a user's secret (keys ca.crt and ca.key).
	Provided AuthenticationSignerType = "Provided"
)

// ManagedProxyConfigurationAuthentication prescribes the signing and storing of the managed certificates.
type ManagedProxyConfigurationAuthentication struct {
	// signer says how server and client certificates are signed.
	// +optional
	// +kubebuilder:default={type:SelfSigned}
	Signer ManagedProxyConfigurationCertificateSigner `json:"signer"`
	// dump names the secrets the signed certificates are stored in.
	// +optional
	// +kubebuilder:default={secrets:{}}
	Dump ManagedProxyConfigurationCertificateDump `json:"dump"`
}

// ManagedProxyConfigurationCertificateSigner prescribes how to sign certificates for proxy servers and agents.
// +kubebuilder:validation:XValidation:rule="self.type != 'Provided' || (has(self.provided) && has(self.provided.secretRef) && size(self.provided.secretRef.name) > 0)",message="signer.provided.secretRef is required when signer.type is Provided"
type ManagedProxyConfigurationCertificateSigner struct {
	// type is SelfSigned (the operator generates and rotates the CA) or Provided (the CA comes from a secret).
	// +optional
	// +kubebuilder:default=SelfSigned
	Type AuthenticationSignerType `json:"type,omitempty"`
	// selfSigned details the self-signed CA.
	// +optional
	SelfSigned *AuthenticationSelfSigned `json:"selfSigned,omitempty"`
	// provided points to the secret holding the CA when type is Provided.
	// +optional
	Provided *AuthenticationProvided `json:"provided,omitempty"`
}

// AuthenticationSelfSigned prescribes how to self-sign the certificates.
type AuthenticationSelfSigned struct {
	// additionalSANs adds hostnames or IPs to the proxy-server, agent-server and proxy-client certificates.
	// +optional
	AdditionalSANs []string `json:"additionalSANs,omitempty"`
}

// AuthenticationProvided references a user-provided CA.
type AuthenticationProvided struct {
	// secretRef is the secret with keys ca.crt and ca.key (PEM). The namespace defaults to proxyServer.namespace.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
}

// SecretReference names a secret.
type SecretReference struct {
	// name of the secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// namespace of the secret; defaults to proxyServer.namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ManagedProxyConfigurationCertificateDump prescribes where the signed certificates are stored.
type ManagedProxyConfigurationCertificateDump struct {
	// secrets names the secrets for the signed certificates.
	// +optional
	// +kubebuilder:default={}
	Secrets CertificateSigningSecrets `json:"secrets"`
}

// CertificateSigningSecrets names the secrets mounted by the proxy servers.
type CertificateSigningSecrets struct {
	// signingProxyServerSecretName is the secret of the proxy server's frontend serving certificate.
	// +kubebuilder:default=proxy-server
	// +optional
	SigningProxyServerSecretName string `json:"signingProxyServerSecretName,omitempty"`
	// signingProxyClientSecretName is the secret of the client certificate for the proxy server's frontend.
	// +kubebuilder:default=proxy-client
	// +optional
	SigningProxyClientSecretName string `json:"signingProxyClientSecretName,omitempty"`
	// signingAgentServerSecretName is the secret of the serving certificate agents connect to.
	// +kubebuilder:default=agent-server
	// +optional
	SigningAgentServerSecretName string `json:"signingAgentServerSecretName,omitempty"`
}

// ManagedProxyConfigurationDeploy prescribes common details for running components.
type ManagedProxyConfigurationDeploy struct {
	// ports are the listening ports of the proxy servers.
	// +optional
	// +kubebuilder:default={}
	Ports ManagedProxyConfigurationDeployPorts `json:"ports"`
}

// ManagedProxyConfigurationDeployPorts are the ports of the proxy servers.
// +kubebuilder:validation:XValidation:rule="[has(self.proxyServer) ? self.proxyServer : 8090, has(self.agentServer) ? self.agentServer : 8091, has(self.healthServer) ? self.healthServer : 8092, has(self.adminServer) ? self.adminServer : 8095, has(self.httpConnectServer) ? self.httpConnectServer : 8094].all(p, [has(self.proxyServer) ? self.proxyServer : 8090, has(self.agentServer) ? self.agentServer : 8091, has(self.healthServer) ? self.healthServer : 8092, has(self.adminServer) ? self.adminServer : 8095, has(self.httpConnectServer) ? self.httpConnectServer : 8094].filter(q, q == p).size() == 1)",message="deploy.ports must be five different ports"
type ManagedProxyConfigurationDeployPorts struct {
	// proxyServer is the port of the frontend that serves proxy requests (gRPC).
	// +optional
	// +kubebuilder:default=8090
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ProxyServer int32 `json:"proxyServer,omitempty"`
	// agentServer is the port agents open tunnels to.
	// +optional
	// +kubebuilder:default=8091
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	AgentServer int32 `json:"agentServer,omitempty"`
	// healthServer serves /healthz, /readyz and /metrics.
	// +optional
	// +kubebuilder:default=8092
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HealthServer int32 `json:"healthServer,omitempty"`
	// adminServer is the port for debugging and operating (bound to loopback).
	// +optional
	// +kubebuilder:default=8095
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	AdminServer int32 `json:"adminServer,omitempty"`
	// httpConnectServer is the frontend for HTTP CONNECT clients (curl --proxytunnel and other non-gRPC clients),
	// served beside the gRPC frontend with the same mutual TLS.
	// +optional
	// +kubebuilder:default=8094
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HTTPConnectServer int32 `json:"httpConnectServer,omitempty"`
}

// NodePlacement describes node scheduling for pods.
type NodePlacement struct {
	// nodeSelector selects the nodes the pods run on.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations let the pods run on tainted nodes.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ManagedProxyConfigurationProxyServer prescribes how to deploy proxy servers on the hub.
type ManagedProxyConfigurationProxyServer struct {
	// image is the container image of the proxy servers.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// replicas of the proxy servers; also passed as --server-count so agents connect to every server.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas int32 `json:"replicas"`
	// inClusterServiceName is the in-cluster Service that hub clients use to reach the proxy servers.
	// +optional
	// +kubebuilder:default=proxy-entrypoint
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	InClusterServiceName string `json:"inClusterServiceName,omitempty"`
	// namespace the proxy servers and their secrets live in: one the manager is given (its
	// --proxy-server-namespaces, by default its own namespace), else the configuration is refused (Ready=False,
	// NamespaceNotManaged).
	// +optional
	// +kubebuilder:default=open-cluster-management-cluster-proxy
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// entrypoint says how agents reach the proxy servers.
	// +optional
	// +kubebuilder:default={type:PortForward}
	Entrypoint *ManagedProxyConfigurationProxyServerEntrypoint `json:"entrypoint"`
	// additionalArgs are appended to the proxy-server command line.
	// +optional
	AdditionalArgs []string `json:"additionalArgs,omitempty"`
	// nodePlacement places the proxy-server pods.
	// +optional
	NodePlacement NodePlacement `json:"nodePlacement,omitempty"`
	// resources of the proxy-server container. Unset: requests of cpu 50m and memory 64Mi and no limits, since a
	// CPU limit throttles every tunnel of a replica and memory grows with the agents a replica holds, whose
	// OOM-kill would drop them all. Set, it replaces that default as a whole; {} sets none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory', 'ephemeral-storage'].all(r, !(r in self.requests) || !(r in self.limits) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",message="spec.proxyServer.resources: a request may not exceed the limit of the same resource"
	// +kubebuilder:validation:XValidation:rule="!has(self.claims)",message="spec.proxyServer.resources.claims is not supported: the proxy-server pods have no resource claims"
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// EntryPointType is how agents reach the proxy servers.
// +kubebuilder:validation:Enum=Hostname;LoadBalancerService;PortForward
type EntryPointType string

const (
	// EntryPointTypeHostname makes agents dial a fixed hostname.
	EntryPointTypeHostname EntryPointType = "Hostname"
	// EntryPointTypeLoadBalancerService makes agents dial the ingress hostname or IP of a LoadBalancer Service.
	EntryPointTypeLoadBalancerService EntryPointType = "LoadBalancerService"
	// EntryPointTypePortForward makes agents dial a local port forwarded to a proxy-server pod.
	EntryPointTypePortForward EntryPointType = "PortForward"
)

// ManagedProxyConfigurationProxyServerEntrypoint is the ingress for agents' tunnels.
// +kubebuilder:validation:XValidation:rule="self.type != 'Hostname' || (has(self.hostname) && size(self.hostname.value) > 0)",message="entrypoint.hostname.value is required when entrypoint.type is Hostname"
type ManagedProxyConfigurationProxyServerEntrypoint struct {
	// type is Hostname, LoadBalancerService or PortForward.
	Type EntryPointType `json:"type"`
	// loadBalancerService configures the LoadBalancer Service (type LoadBalancerService).
	// +optional
	LoadBalancerService *EntryPointLoadBalancerService `json:"loadBalancerService,omitempty"`
	// hostname is the fixed address agents dial (type Hostname).
	// +optional
	Hostname *EntryPointHostname `json:"hostname,omitempty"`
	// port agents dial.
	// +optional
	// +kubebuilder:default=8091
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// EntryPointLoadBalancerService configures the LoadBalancer Service in the proxy-server namespace.
type EntryPointLoadBalancerService struct {
	// name of the Service.
	// +optional
	// +kubebuilder:default=proxy-agent-entrypoint
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`
	// annotations of the Service, e.g. service.beta.kubernetes.io/azure-load-balancer-internal: "true".
	// +optional
	// +listType=map
	// +listMapKey=key
	Annotations []AnnotationVar `json:"annotations,omitempty"`
}

// AnnotationVar is one annotation of the LoadBalancer Service.
type AnnotationVar struct {
	// key of the annotation (a qualified name).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Key string `json:"key"`
	// value of the annotation.
	// +optional
	Value string `json:"value,omitempty"`
}

// EntryPointHostname is a fixed hostname for agents' tunnels.
type EntryPointHostname struct {
	// value is the hostname or IP.
	Value string `json:"value"`
}

// ManagedProxyConfigurationProxyAgent prescribes how to deploy agents to managed clusters.
type ManagedProxyConfigurationProxyAgent struct {
	// image is the container image of the proxy agent.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// replicas of the agent on each managed cluster.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`
	// additionalArgs are appended to the proxy-agent command line.
	// +optional
	AdditionalArgs []string `json:"additionalArgs,omitempty"`
	// additionalServiceProxyArgs are flags of the service-proxy, which runs inside the proxy-agent: they are appended
	// to the proxy-agent command line after the service-proxy's own flags (and before additionalArgs), only while
	// the service-proxy runs (spec.userServer is set). Each entry is one of --allowed-service=<namespace>/<name>[:<port>],
	// --service-domain=<domain>, --service-ca-file=<absolute path> or -v=<level> (--v=<level>).
	// Impersonation is set with the AddOnDeploymentConfig customizedVariable enableImpersonation, not here.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:XValidation:rule="!self.matches('^--?enable-impersonation(=|$)')",message="--enable-impersonation is not accepted in spec.proxyAgent.additionalServiceProxyArgs: set the AddOnDeploymentConfig customizedVariable enableImpersonation (true or false) instead"
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^--?enable-impersonation(=|$)') || self.matches('^(--allowed-service=[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z]([-a-z0-9]{0,61}[a-z0-9])?(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?|--service-domain=[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*[.]?|--service-ca-file=/.+|--?v=[0-9]{1,2})$')",message="spec.proxyAgent.additionalServiceProxyArgs takes only service-proxy flags, each written --name=value: --allowed-service=<namespace>/<name>[:<port>], --service-domain=<domain>, --service-ca-file=<absolute path>, -v=<level> or --v=<level>"
	AdditionalServiceProxyArgs []string `json:"additionalServiceProxyArgs,omitempty"`
	// imagePullSecrets are secret names in the agent namespace used to pull the agent image.
	// +optional
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// additionalServiceCAConfigMap names a ConfigMap in the agent's namespace on each managed cluster whose key
	// service-ca.crt holds PEM CAs the service-proxy trusts for https services besides the system roots, followed as
	// it changes; it takes effect while the service-proxy runs (spec.userServer is set), and a missing ConfigMap leaves
	// the system roots alone.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	AdditionalServiceCAConfigMap string `json:"additionalServiceCAConfigMap,omitempty"`
	// agentNodePlacements places the agent pods, by managed cluster name.
	// +optional
	AgentNodePlacements map[string]NodePlacement `json:"agentNodePlacements,omitempty"`
	// resources of the proxy-agent container on every managed cluster, unless the cluster's AddOnDeploymentConfig
	// has a resourceRequirements entry that matches the container (deployments:cluster-proxy-proxy-agent:proxy-agent,
	// or one with "*"), which then replaces it as a whole. Unset: none, as with the existing add-on.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory', 'ephemeral-storage'].all(r, !(r in self.requests) || !(r in self.limits) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",message="spec.proxyAgent.resources: a request may not exceed the limit of the same resource"
	// +kubebuilder:validation:XValidation:rule="!has(self.claims)",message="spec.proxyAgent.resources.claims is not supported: the proxy-agent pods have no resource claims"
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ManagedProxyConfigurationUserServer configures the user-server.
type ManagedProxyConfigurationUserServer struct {
	// additionalSANs adds hostnames or IPs to the user-server serving certificate.
	// +optional
	AdditionalSANs []string `json:"additionalSANs,omitempty"`
	// allowedServices are the managed-cluster services the user-server may reach
	// (/<cluster>/api/v1/namespaces/<ns>/services/<[proto:]name[:port]>/proxy-service/<path>). Nothing else is
	// reachable that way; the kube-apiserver is always reachable to callers with a valid token.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	AllowedServices []AllowedService `json:"allowedServices,omitempty"`
	// hubAuthorization decides whether the hub's RBAC is asked before a hub user's request goes on to a cluster:
	// SubjectAccessReview (the default) requires the verb (from the HTTP method) on clusters/proxy of group
	// gateway.proxy.open-cluster-management.io with the cluster's name, as the hub's aggregated API does; None
	// leaves the decision to the managed cluster's RBAC alone, as the existing add-on did. Tokens of the managed
	// cluster itself are never checked on the hub.
	// +optional
	// +kubebuilder:default=SubjectAccessReview
	HubAuthorization HubAuthorization `json:"hubAuthorization,omitempty"`
}

// HubAuthorization is how the user-server checks a hub user's right to reach a cluster.
// +kubebuilder:validation:Enum=SubjectAccessReview;None
type HubAuthorization string

const (
	HubAuthorizationSubjectAccessReview HubAuthorization = "SubjectAccessReview"
	HubAuthorizationNone                HubAuthorization = "None"
)

// HubUsers says how hub users and groups are named on the managed clusters.
type HubUsers struct {
	// prefix, when set, goes in front of every hub user and group name on the managed clusters (for example "hub:"
	// makes hub user alice hub:alice and group team hub:team), so no hub identity can be taken for one of the
	// cluster's own. Unset, the existing add-on's names apply: a hub ServiceAccount becomes
	// cluster:hub:system:serviceaccount:<namespace>:<name>, every other user and every group keeps its name.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._:-]*:$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('system:')",message="prefix must not start with system:, which would name the managed cluster's own system users and groups"
	Prefix string `json:"prefix,omitempty"`
	// serviceAccountGroups, without a prefix, names the groups of hub ServiceAccounts (system:serviceaccounts and
	// system:serviceaccounts:<namespace>) on the managed clusters. Prefixed, the default: like the ServiceAccount,
	// cluster:hub:system:serviceaccounts:<namespace>, so that a hub ServiceAccount never takes a binding the cluster made
	// for its own ServiceAccounts of that namespace. Unprefixed: as they are, as the existing add-on sends them.
	// +optional
	// +kubebuilder:default=Prefixed
	ServiceAccountGroups ServiceAccountGroups `json:"serviceAccountGroups,omitempty"`
}

// ServiceAccountGroups is how the groups of hub ServiceAccounts are named on the managed clusters.
// +kubebuilder:validation:Enum=Prefixed;Unprefixed
type ServiceAccountGroups string

const (
	ServiceAccountGroupsPrefixed   ServiceAccountGroups = "Prefixed"
	ServiceAccountGroupsUnprefixed ServiceAccountGroups = "Unprefixed"
)

// AllowedService is a managed-cluster service the user-server may reach.
type AllowedService struct {
	// namespace of the service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// name of the service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// port of the service; every port when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// callerAuthentication is who authenticates the service's callers. BearerToken, the default: the user-server
	// answers 401 to a request without a bearer token before it leaves the hub. Service: such a request goes on to
	// the service, which authenticates its callers itself, as the existing add-on serves every allowed service.
	// +optional
	// +kubebuilder:default=BearerToken
	CallerAuthentication CallerAuthentication `json:"callerAuthentication,omitempty"`
}

// CallerAuthentication is who authenticates the callers of an allowed service.
// +kubebuilder:validation:Enum=BearerToken;Service
type CallerAuthentication string

const (
	// CallerAuthenticationBearerToken requires a bearer token at the user-server.
	CallerAuthenticationBearerToken CallerAuthentication = "BearerToken"
	// CallerAuthenticationService lets requests without a bearer token through to the service.
	CallerAuthenticationService CallerAuthentication = "Service"
)

// ManagedProxyConfigurationStatus is the observed state of the hub proxy servers.
type ManagedProxyConfigurationStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// lastObservedGeneration mirrors observedGeneration for clients of the existing addon.
	// +optional
	LastObservedGeneration int64 `json:"lastObservedGeneration,omitempty"`
	// entrypoint is the address agents dial, host:port, once known.
	// +optional
	Entrypoint string `json:"entrypoint,omitempty"`
	// signer describes the CA in use and, during a rollover, the previous one.
	// +optional
	Signer *SignerStatus `json:"signer,omitempty"`
	// clustersInstalled counts the managed clusters whose agent is rendered from this configuration and installed
	// (their ClusterProxyStatus says installed). Recounted a few seconds after a change; present even when 0.
	// +optional
	ClustersInstalled int32 `json:"clustersInstalled"`
	// clustersConnected counts the managed clusters whose agent is rendered from this configuration and connected to
	// the proxy-servers (AgentConnected True). Recounted a few seconds after a change; present even when 0.
	// +optional
	ClustersConnected int32 `json:"clustersConnected"`
	// conditions: ProxyServerDeployed, ProxyServerSecretSigned, AgentServerSecretSigned, ProxyClientSecretSigned,
	// UserServerSecretSigned, ImpersonatorSecretSigned, SignerReady and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SignerStatus describes the signing CA.
type SignerStatus struct {
	// caFingerprint is the SHA-256 fingerprint of the current CA.
	CAFingerprint string `json:"caFingerprint,omitempty"`
	// caNotAfter is when the current CA expires.
	CANotAfter *metav1.Time `json:"caNotAfter,omitempty"`
	// bundleFingerprints lists the CAs in the published bundle (proxy-server-ca), current first.
	// +optional
	BundleFingerprints []string `json:"bundleFingerprints,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mpc
// +kubebuilder:printcolumn:name="Entrypoint Type",type=string,JSONPath=`.spec.proxyServer.entrypoint.type`
// +kubebuilder:printcolumn:name="Entrypoint",type=string,JSONPath=`.status.entrypoint`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.proxyServer.replicas`
// +kubebuilder:printcolumn:name="Installed",type=integer,JSONPath=`.status.clustersInstalled`
// +kubebuilder:printcolumn:name="Connected",type=integer,JSONPath=`.status.clustersConnected`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ManagedProxyConfiguration configures the hub proxy servers, their certificates and the agents of every
// managed cluster. The default instance is named cluster-proxy.
type ManagedProxyConfiguration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ManagedProxyConfigurationSpec   `json:"spec,omitempty"`
	Status ManagedProxyConfigurationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ManagedProxyConfigurationList is a list of ManagedProxyConfiguration.
type ManagedProxyConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ManagedProxyConfiguration `json:"items"`
}
