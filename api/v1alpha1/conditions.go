package v1alpha1

// Condition types of ManagedProxyConfiguration.
const (
	ConditionProxyServerDeployed     = "ProxyServerDeployed"
	ConditionProxyServerSecretSigned = "ProxyServerSecretSigned"
	ConditionAgentServerSecretSigned = "AgentServerSecretSigned"
	ConditionProxyClientSecretSigned = "ProxyClientSecretSigned"
	ConditionUserServerSecretSigned  = "UserServerSecretSigned"
	// ConditionImpersonatorSecretSigned reports the client certificate the hub side presents to the agents'
	// service-proxies when it sends a hub user's identity (ImpersonatorSecretName).
	ConditionImpersonatorSecretSigned = "ImpersonatorSecretSigned"
	ConditionSignerReady              = "SignerReady"
	ConditionEntrypointReady          = "EntrypointReady"
	ConditionTLSProfileApplied        = "TLSProfileApplied"
	// ConditionExtendedSettingsApplied is False while the settings this operator adds to the existing add-on's API
	// (spec.userServer.allowedServices, spec.tlsProfile, spec.networkPolicies, ...) were all dropped at once by an
	// update, as a client built on the add-on's Go types does: the last good ones stay in use. It does not make the
	// configuration not Ready.
	ConditionExtendedSettingsApplied = "ExtendedSettingsApplied"
	// ConditionRecordsWritable is False while a proxy-server replica cannot write the audit events or session
	// recordings spec.audit and spec.sessionRecording ask for. It does not make the configuration not Ready: the
	// failure policies decide what the requests meanwhile get.
	ConditionRecordsWritable = "RecordsWritable"
	ConditionReady           = "Ready"
)

// Condition types of ProxyCertificate (Ready is shared).
const (
	ConditionIssuing = "Issuing"
)

// Condition types of ClusterProxyStatus.
const (
	ConditionAgentDeployed        = "AgentDeployed"
	ConditionAgentConnected       = "AgentConnected"
	ConditionTunnelHealthy        = "TunnelHealthy"
	ConditionProxySettingsApplied = "ProxySettingsApplied"
	ConditionCertificateReady     = "CertificateReady"
	ConditionAvailable            = "Available"
)

// Condition reasons. They are CamelCase and stable: users and alerts match on them.
const (
	// ProxyServerDeployed.
	ReasonSuccessfullyDeployed = "SuccessfullyDeployed"
	ReasonNotYetDeployed       = "NotYetDeployed"

	// *SecretSigned.
	ReasonSuccessfullySigned = "SuccessfullySigned"
	ReasonNotYetSigned       = "NotYetSigned"

	// SignerReady.
	ReasonSignerReady         = "SignerReady"
	ReasonCARollover          = "CARolloverInProgress"
	ReasonSignerSecretMissing = "SignerSecretNotFound"
	ReasonSignerSecretInvalid = "SignerSecretInvalid"

	// EntrypointReady.
	ReasonEntrypointResolved      = "EntrypointResolved"
	ReasonLoadBalancerPending     = "LoadBalancerIngressPending"
	ReasonPortForwardEntrypoint   = "PortForward"
	ReasonEntrypointMisconfigured = "EntrypointMisconfigured"

	// TLSProfileApplied.
	ReasonTLSProfileApplied = "TLSProfileApplied"
	ReasonInvalidTLSProfile = "InvalidTLSProfile"

	// RecordsWritable.
	ReasonRecordSinksWritable    = "RecordSinksWritable"
	ReasonRecordSinkDown         = "RecordSinkDown"
	ReasonRecordSinksNotReported = "RecordSinksNotReported"

	// Ready.
	ReasonAllComponentsReady = "AllComponentsReady"
	// ReasonNamespaceNotManaged: the object names a namespace the manager was not given (its
	// --proxy-server-namespaces, or --proxy-certificate-namespaces for a ProxyCertificate), so it writes nothing there.
	ReasonNamespaceNotManaged = "NamespaceNotManaged"

	// ProxyCertificate Ready.
	ReasonCertificateIssued = "Issued"
	ReasonIssuerNotFound    = "IssuerNotFound"
	ReasonIssuerNotReady    = "IssuerNotReady"
	ReasonIssueFailed       = "IssueFailed"
	// ReasonReservedCommonName: the common name is one only the operator's own certificates may carry (an agent's or
	// the impersonator's).
	ReasonReservedCommonName = "ReservedCommonName"

	// ProxyCertificate Issuing=False.
	ReasonUpToDate = "UpToDate"

	// ExtendedSettingsApplied.
	ReasonAsSpecified     = "AsSpecified"
	ReasonDroppedByUpdate = "DroppedByUpdate"
)

// Well-known names, labels and annotations.
const (
	// DefaultConfigurationName is the name of the default ManagedProxyConfiguration.
	DefaultConfigurationName = "cluster-proxy"
	// AddonName is the name of the ClusterManagementAddOn and of every ManagedClusterAddOn.
	AddonName = "cluster-proxy"
	// SignerSecretName is the secret that holds the self-signed CA.
	SignerSecretName = "cluster-proxy-signer"
	// CABundleSecretName is the secret in the proxy-server namespace that publishes the trusted CA bundle (ca.crt).
	CABundleSecretName = "proxy-server-ca"
	// UserServerSecretName is the serving certificate of the user-server.
	UserServerSecretName = "cluster-proxy-user-serving-cert"
	// ImpersonatorSecretName is the client certificate the proxy-servers present to the agents' service-proxies when
	// they send a hub user's identity as impersonation.
	ImpersonatorSecretName = "cluster-proxy-impersonator"
	// UserServerServiceName is the in-cluster Service of the user-server.
	UserServerServiceName = "cluster-proxy-addon-user"
	// UserServerPort is the HTTPS port of the user-server.
	UserServerPort = 9092
	// GatewayPort is the HTTPS port of the hub's aggregated API (gateway.proxy.open-cluster-management.io), on the
	// user-server's Service, which the APIService names.
	GatewayPort = 9443
	// GatewayAPIServiceName registers the aggregated API with the hub kube-apiserver.
	GatewayAPIServiceName = "v1alpha1.gateway.proxy.open-cluster-management.io"

	// ComponentLabel labels the pods of each component; its value is ComponentProxyServer for the proxy servers.
	ComponentLabel       = "proxy.open-cluster-management.io/component-name"
	ComponentProxyServer = "proxy-server"

	// RotateCAAnnotation on a ManagedProxyConfiguration requests a CA rotation: set it to a new value (for example
	// a timestamp) and the SelfSigned signer rotates once for that value.
	RotateCAAnnotation = "proxy.open-cluster-management.io/rotate-ca"
	// ConfigurationGenerationAnnotation on the proxy-servers' Deployment is the generation of the
	// ManagedProxyConfiguration it was last applied from, as the existing add-on sets it: scripts wait for it. It is
	// on the Deployment, not its pods, so a change that needs no restart restarts nothing.
	ConfigurationGenerationAnnotation = "proxy.open-cluster-management.io/configuration-generation"
)

// Reasons of the ClusterProxyStatus conditions (AgentDeployed, ProxySettingsApplied, CertificateReady,
// ConfigurationsConfigured, AgentConnected, TunnelHealthy, Available).
const (
	ReasonAgentAvailable         = "AgentAvailable"
	ReasonAgentNotAvailable      = "AgentNotAvailable"
	ReasonWorkNotFound           = "WorkNotFound"
	ReasonWorkNotApplied         = "WorkNotApplied"
	ReasonDirectConnection       = "DirectConnection"
	ReasonProxySettingsApplied   = "ProxySettingsApplied"
	ReasonAgentCertificateIssued = "CertificateIssued"
	ReasonCertificateExpired     = "CertificateExpired"
	ReasonWaitingForCSR          = "WaitingForCertificate"
	ReasonTunnelSourceMissing    = "TunnelSourceNotConfigured"
	ReasonConfigured             = "ConfigurationsConfigured"

	ReasonNotObservedYet         = "NotObservedYet"
	ReasonProxyServerUnreachable = "ProxyServerUnreachable"
	ReasonAgentConnected         = "AgentConnected"
	ReasonNoAgentConnected       = "NoAgentConnected"
	ReasonAgentNotOnEveryReplica = "AgentNotOnEveryReplica"
	ReasonProbeSucceeded         = "ProbeSucceeded"
	ReasonProbeFailed            = "ProbeFailed"
	ReasonTunnelAvailable        = "TunnelAvailable"
)

// Reasons of ProxySettingsApplied=False and AgentDeployed=False: an AddOnDeploymentConfig field, a ManagedCluster
// annotation or a referenced configuration the agent cannot be rendered from. The message names the field; the last
// good agent stays deployed.
const (
	ReasonInvalidProxyURL             = "InvalidProxyURL"
	ReasonInvalidProxyCABundle        = "InvalidProxyCABundle"
	ReasonInvalidRegistryMirror       = "InvalidRegistryMirror"
	ReasonInvalidResourceRequirements = "InvalidResourceRequirements"
	ReasonInvalidImageRegistries      = "InvalidImageRegistries"
	// ReasonInvalidCustomizedVariable: a customizedVariables entry the agent understands has a value it cannot use.
	ReasonInvalidCustomizedVariable = "InvalidCustomizedVariable"
	// ReasonConfigNotFound: a configuration the add-on references does not exist.
	ReasonConfigNotFound = "ConfigurationNotFound"
	// ReasonConfigOfAnotherNamespace: the add-on's spec.configs names an AddOnDeploymentConfig of another cluster's
	// namespace, whose settings (a proxy password among them) are not this cluster's to use.
	ReasonConfigOfAnotherNamespace = "ConfigurationOfAnotherNamespace"
)

// Reasons of the Approved and Denied conditions the manager writes on the add-on's CertificateSigningRequests, and of
// the Events that report them.
const (
	// ReasonAgentCSRApproved approves a proxy-agent client certificate request (signer
	// open-cluster-management.io/proxy-agent-signer).
	ReasonAgentCSRApproved = "AgentCSRApproved"
	// ReasonHubKubeconfigCSRApproved approves an add-on hub kubeconfig request (signer
	// kubernetes.io/kube-apiserver-client).
	ReasonHubKubeconfigCSRApproved = "HubKubeconfigCSRApproved"

	ReasonClusterLabelMismatch = "ClusterLabelMismatch" // the request is labelled with another cluster
	ReasonClusterNotAccepted   = "ClusterNotAccepted"   // the hub does not accept the cluster
	ReasonUnexpectedRequestor  = "UnexpectedRequestor"  // spec.username / spec.groups are not the cluster's identity
	ReasonUnexpectedUsages     = "UnexpectedUsages"     // spec.usages are not client-only
	ReasonInvalidRequest       = "InvalidRequest"       // spec.request does not parse or its signature is wrong
	ReasonWeakKey              = "WeakKey"              // the requested key is too weak or of an unsupported type
	ReasonUnexpectedSANs       = "UnexpectedSANs"       // the request asks for subject alternative names
	ReasonUnexpectedSubject    = "UnexpectedSubject"    // the request's subject is not the expected one
)

// Reasons of the Warning Events on OCM's ClusterProfiles.
const (
	// ReasonUnknownCluster: a ClusterProfile of OCM's names a cluster that is not a ManagedCluster.
	ReasonUnknownCluster = "UnknownCluster"
	// ReasonAccessProvidersNotStored: the hub's ClusterProfile CRD predates status.accessProviders and drops them.
	ReasonAccessProvidersNotStored = "AccessProvidersNotStored"
)
