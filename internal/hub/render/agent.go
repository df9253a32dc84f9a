package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	workv1 "open-cluster-management.io/api/work/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
)

// Names of the agent's objects. None is derived from the cluster name, so any valid cluster name works (names
// starting with a digit included).
const (
	// AgentWorkName is the ManifestWork, in the cluster namespace, that installs the agent.
	AgentWorkName = "addon-cluster-proxy-deploy-0"
	// DefaultAgentNamespace is where the agent runs unless the AddOnDeploymentConfig says otherwise.
	DefaultAgentNamespace = "open-cluster-management-cluster-proxy"
	// AgentDeploymentName is the agent Deployment on the managed cluster.
	AgentDeploymentName = "cluster-proxy-proxy-agent"
	// AgentContainerName is the agent container; ADC resource requirements address it as
	// deployments:cluster-proxy-proxy-agent:proxy-agent.
	AgentContainerName = "proxy-agent"
	// AgentImpersonatorPrefix, with the agent's namespace, names the ClusterRole and ClusterRoleBinding of the agent's
	// impersonation rights.
	AgentImpersonatorPrefix = "cluster-proxy-agent-impersonator:"
	// AgentServiceAccountName is the agent's identity on the managed cluster.
	AgentServiceAccountName = "cluster-proxy"
	// AgentCASecretName holds what the agent trusts, one bundle per purpose: the hub's CA bundle (AgentHubCAKey) for
	// the proxy-server and the impersonator, and the forward proxy's CA (AgentProxyCAKey) for the TLS hop to the proxy.
	AgentCASecretName = "cluster-proxy-ca"
	// AgentHubCAKey is the hub CA bundle (proxy-server-ca ca.crt), the only root that vouches for the hub.
	AgentHubCAKey = "ca.crt"
	// AgentProxyCAKey is the forward proxy's CA bundle, present only when the agent talks TLS to its proxy and the
	// AddOnDeploymentConfig names a caBundle. It never verifies the proxy-server or a hub client.
	AgentProxyCAKey = "proxy-ca.crt"
	// AgentCertSecretName is where OCM's klusterlet writes the agent certificate signed through the CSR flow.
	AgentCertSecretName = "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert"
	// AgentHubKubeconfigSecretName is where OCM's klusterlet writes the add-on's hub kubeconfig.
	AgentHubKubeconfigSecretName = "cluster-proxy-hub-kubeconfig"
	// AgentLeaseRoleName lets the agent renew the add-on Lease in its namespace.
	AgentLeaseRoleName = "cluster-proxy-addon-agent"

	// ServiceCAKey is the key of the additionalServiceCAConfigMap that holds the PEM CAs of in-cluster services.
	ServiceCAKey = "service-ca.crt"
	// ServiceCAMount is where the agent mounts the additionalServiceCAConfigMap.
	ServiceCAMount = "/etc/service-ca"

	caMount         = "/etc/ca"
	agentCertMount  = "/etc/tls"
	hubConfigMount  = "/etc/hub"
	serviceCAVolume = "service-ca"
	deletionOrphan  = "addon.open-cluster-management.io/deletion-orphan"
	addonLabel      = "open-cluster-management.io/addon"
	proxyAgentLabel = "proxy-agent"
)

// ErrEntrypointUnknown means the address agents dial is not known yet (a LoadBalancer without ingress).
var ErrEntrypointUnknown = errors.New("the proxy-server entrypoint is not known yet")

// AgentInput is everything the agent's manifests depend on.
type AgentInput struct {
	Cluster string
	MPC     *proxyv1alpha1.ManagedProxyConfiguration
	// ADC is the cluster's AddOnDeploymentConfig; nil when none applies.
	ADC *addonv1alpha1.AddOnDeploymentConfig
	// ClusterRegistries are the image mirrors of the ManagedCluster's image-registries annotation
	// (proxyenv.ClusterRegistries); the ADC's registries win over them.
	ClusterRegistries []addonv1alpha1.ImageMirror
	// EntrypointHost is the address agents dial (MPC status); "" while unknown.
	EntrypointHost string
	// CABundle is the hub CA bundle (proxy-server-ca ca.crt).
	CABundle []byte
}

// AgentSummary is what the manifests put in effect, for status reporting.
type AgentSummary struct {
	Namespace string
	Image     string
	Proxy     proxyenv.Settings
}

// AgentWork renders the ManifestWork that installs the proxy-agent on a managed cluster. An invalid
// AddOnDeploymentConfig gives a *proxyenv.FieldError naming the field.
func AgentWork(in AgentInput) (*workv1.ManifestWork, *AgentSummary, error) {
	if in.EntrypointHost == "" {
		return nil, nil, fmt.Errorf("ManagedProxyConfiguration %s: %w", in.MPC.Name, ErrEntrypointUnknown)
	}
	var spec addonv1alpha1.AddOnDeploymentConfigSpec
	if in.ADC != nil {
		spec = in.ADC.Spec
	}
	settings, err := proxyenv.FromConfig(spec.ProxyConfig)
	if err != nil {
		return nil, nil, err
	}
	image, err := proxyenv.AgentImage(in.MPC.Spec.ProxyAgent.Image, spec.Registries, in.ClusterRegistries)
	if err != nil {
		return nil, nil, err
	}
	vars, err := proxyenv.Variables(spec.CustomizedVariables)
	if err != nil {
		return nil, nil, err
	}
	resources, err := proxyenv.Resources(spec.ResourceRequirements, "deployments", AgentDeploymentName, AgentContainerName)
	if err != nil {
		return nil, nil, err
	}
	if resources == nil {
		// The configuration's resources are every agent's default; a cluster's AddOnDeploymentConfig entry replaces them.
		resources = in.MPC.Spec.ProxyAgent.Resources.DeepCopy()
	}
	ns := AgentNamespace(in.ADC)

	objects := []runtime.Object{
		agentNamespace(ns),
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: agentMeta(AgentServiceAccountName, ns),
		},
	}
	objects = append(objects, agentLeaseRBAC(ns)...)
	if ServiceProxyEnabled(in.MPC) {
		objects = append(objects, agentImpersonationRBAC(ns)...)
	}
	objects = append(objects,
		&corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: agentMeta(AgentCASecretName, ns),
			Type:       corev1.SecretTypeOpaque,
			Data:       agentTrust(in.CABundle, settings),
		},
	)
	credentials := ""
	if settings.HasCredentials() {
		secret := proxyCredentials(ns, settings)
		credentials = secret.Name
		objects = append(objects, secret)
	}
	objects = append(objects, agentDeployment(in, ns, image, settings, credentials, vars, resources, nodePlacement(in, spec)))
	if NetworkPoliciesEnabled(in.MPC) {
		objects = append(objects, agentNetworkPolicy(in, ns, settings))
	}

	manifests := make([]workv1.Manifest, 0, len(objects))
	for _, o := range objects {
		raw, err := json.Marshal(o)
		if err != nil {
			return nil, nil, fmt.Errorf("encode agent manifest: %w", err)
		}
		manifests = append(manifests, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	work := &workv1.ManifestWork{
		ObjectMeta: metav1.ObjectMeta{
			Name:      AgentWorkName,
			Namespace: in.Cluster,
			Labels:    map[string]string{ManagedByLabel: ManagedByValue, addonLabel: proxyv1alpha1.AddonName},
		},
		Spec: workv1.ManifestWorkSpec{
			Workload: workv1.ManifestsTemplate{Manifests: manifests},
			// The namespace also holds the certificate secrets OCM's klusterlet writes; removing the add-on must
			// not delete them along with unrelated content, as the existing addon does.
			DeleteOption: &workv1.DeleteOption{
				PropagationPolicy: workv1.DeletePropagationPolicyTypeSelectivelyOrphan,
				SelectivelyOrphan: &workv1.SelectivelyOrphan{OrphaningRules: []workv1.OrphaningRule{{Resource: "namespaces", Name: ns}}},
			},
			ManifestConfigs: []workv1.ManifestConfigOption{{
				ResourceIdentifier: workv1.ResourceIdentifier{Group: "apps", Resource: "deployments", Name: AgentDeploymentName, Namespace: ns},
				FeedbackRules:      []workv1.FeedbackRule{{Type: workv1.WellKnownStatusType}},
			}},
		},
	}
	return work, &AgentSummary{Namespace: ns, Image: image, Proxy: settings}, nil
}

// agentTrust is the agent CA Secret's data: the hub's bundle alone under AgentHubCAKey and, kept apart so that it can
// never vouch for the hub, the forward proxy's CA under AgentProxyCAKey when the agent needs it.
func agentTrust(hubBundle []byte, settings proxyenv.Settings) map[string][]byte {
	data := map[string][]byte{AgentHubCAKey: proxyenv.TrustBundle(hubBundle, proxyenv.Settings{})}
	if proxyCA := proxyenv.ProxyTrust(settings); len(proxyCA) > 0 {
		data[AgentProxyCAKey] = proxyCA
	}
	return data
}

// ServiceProxyEnabled reports whether agents run the service-proxy, which the user-server needs: it is on when the
// configuration enables the user-server.
func ServiceProxyEnabled(mpc *proxyv1alpha1.ManagedProxyConfiguration) bool {
	return mpc.Spec.UserServer != nil
}

const (
	// OIDCCAKey is the key of the oidcCAConfigMap that holds the OIDC issuer's CA.
	OIDCCAKey = "ca.crt"
	// OIDCCAMount is where the agent mounts the oidcCAConfigMap.
	OIDCCAMount  = "/etc/oidc-ca"
	oidcCAVolume = "oidc-ca"
)

// oidcArgs are the service-proxy's OpenID Connect flags of a cluster's customized variables.
func oidcArgs(o *proxyenv.OIDCVariables) []string {
	if o == nil {
		return nil
	}
	args := []string{"--oidc-issuer-url=" + o.IssuerURL, "--oidc-client-id=" + o.ClientID}
	for _, f := range []struct{ flag, value string }{
		{"--oidc-username-claim", o.UsernameClaim}, {"--oidc-username-prefix", o.UsernamePrefix},
		{"--oidc-groups-claim", o.GroupsClaim}, {"--oidc-groups-prefix", o.GroupsPrefix}, {"--oidc-signing-algs", o.SigningAlgs},
	} {
		if f.value != "" {
			args = append(args, f.flag+"="+f.value)
		}
	}
	if o.ReservedNamePrefixes != nil {
		args = append(args, "--oidc-reserved-name-prefixes="+*o.ReservedNamePrefixes)
	}
	if o.CAConfigMap != "" {
		args = append(args, "--oidc-ca-file="+OIDCCAMount+"/"+OIDCCAKey)
	}
	for _, kv := range o.RequiredClaims {
		args = append(args, "--oidc-required-claim="+kv)
	}
	return args
}

// serviceCAConfigMap is the managed-cluster ConfigMap whose CAs the service-proxy trusts for https services, or "".
// Only the service-proxy reads it, so without the service-proxy the agent does not mount it: setting the field alone
// does not roll the agents.
func serviceCAConfigMap(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	if !ServiceProxyEnabled(mpc) {
		return ""
	}
	return mpc.Spec.ProxyAgent.AdditionalServiceCAConfigMap
}

func agentMeta(name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{addonLabel: proxyv1alpha1.AddonName}}
}

func agentNamespace(ns string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        ns,
			Labels:      map[string]string{addonLabel: proxyv1alpha1.AddonName},
			Annotations: map[string]string{deletionOrphan: ""},
		},
	}
}

// agentLeaseRBAC lets the agent create and renew its add-on Lease, and nothing else.
func agentLeaseRBAC(ns string) []runtime.Object {
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: agentMeta(AgentLeaseRoleName, ns),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{proxyv1alpha1.AddonName}, Verbs: []string{"get", "update"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: agentMeta(AgentLeaseRoleName, ns),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentLeaseRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentServiceAccountName, Namespace: ns}},
	}
	return []runtime.Object{role, binding}
}

// agentImpersonationRBAC lets the service-proxy check the cluster's own tokens, act as the hub users the hub's
// impersonator names and as the users of OIDC tokens, and ask the cluster's RBAC whom a hub user may impersonate.
// The names are none of the existing add-on's: its ClusterRoleBinding cluster-proxy-addon-agent-impersonator:<ns>
// refers to another ClusterRole, and a binding's roleRef cannot change, so the work taking over its agent would fail
// to apply a binding of that name (OCM's work agent deletes the add-on's, which the work no longer lists).
func agentImpersonationRBAC(ns string) []runtime.Object {
	name := AgentImpersonatorPrefix + ns
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{addonLabel: proxyv1alpha1.AddonName}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			// Whether a hub user may impersonate whom it asks to act as: the cluster's RBAC decides.
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
			// A hub user's extras (userextras/<key>) and UID; RBAC has no wildcard for the part after the slash, and
			// the group has nothing else to impersonate.
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{addonLabel: proxyv1alpha1.AddonName}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentServiceAccountName, Namespace: ns}},
	}
	return []runtime.Object{role, binding}
}

// nodePlacement comes from the AddOnDeploymentConfig, else from the configuration's per-cluster placement.
func nodePlacement(in AgentInput, spec addonv1alpha1.AddOnDeploymentConfigSpec) proxyv1alpha1.NodePlacement {
	if np := spec.NodePlacement; np != nil {
		return proxyv1alpha1.NodePlacement{NodeSelector: np.NodeSelector, Tolerations: np.Tolerations}
	}
	return in.MPC.Spec.ProxyAgent.AgentNodePlacements[in.Cluster]
}

// AgentArgs is the proxy-agent command line; settings are the forward proxy's (their CA bundle adds --proxy-ca-cert).
func AgentArgs(in AgentInput, ns string, settings proxyenv.Settings, vars proxyenv.AgentVariables) []string {
	args := []string{
		"--proxy-server-host=" + in.EntrypointHost,
		"--proxy-server-port=" + strconv.Itoa(int(EntrypointPort(in.MPC))),
		"--agent-identifiers=" + contract.AgentIdentifiers(in.Cluster, ns),
		"--cluster-name=" + in.Cluster,
		"--ca-cert=" + caMount + "/" + AgentHubCAKey,
		"--agent-cert=" + agentCertMount + "/tls.crt",
		"--agent-key=" + agentCertMount + "/tls.key",
		"--hub-kubeconfig=" + hubConfigMount + "/kubeconfig",
		"--health-server-port=" + strconv.Itoa(contract.AgentHealthPort),
		"--lease-namespace=" + ns,
	}
	if len(proxyenv.ProxyTrust(settings)) > 0 {
		args = append(args, "--proxy-ca-cert="+caMount+"/"+AgentProxyCAKey)
	}
	if EntrypointType(in.MPC) == proxyv1alpha1.EntryPointTypePortForward {
		args = append(args,
			"--port-forward-namespace="+contract.Namespace(in.MPC),
			"--port-forward-selector="+labels.SelectorFromSet(ServerPodLabels(in.MPC)).String(),
			"--port-forward-port="+strconv.Itoa(int(contract.PortsOf(in.MPC).AgentServer)))
	}
	if ServiceProxyEnabled(in.MPC) {
		args = append(args, "--service-proxy-port="+strconv.Itoa(contract.ServiceProxyPort))
		args = append(args, AllowedServiceArgs(in.MPC)...)
		if vars.ServiceDomain != "" {
			args = append(args, "--service-domain="+vars.ServiceDomain)
		}
		if vars.DisableImpersonation {
			args = append(args, "--enable-impersonation=false")
		}
		if serviceCAConfigMap(in.MPC) != "" {
			args = append(args, "--service-ca-file="+ServiceCAMount+"/"+ServiceCAKey)
		}
		args = append(args, oidcArgs(vars.OIDC)...)
		// After the rendered service-proxy flags, so a user's value wins over ours; before additionalArgs, which win
		// last. Without the service-proxy they are dropped, so setting the field alone does not roll the agents.
		args = append(args, in.MPC.Spec.ProxyAgent.AdditionalServiceProxyArgs...)
	} else {
		args = append(args, "--service-proxy-port=0")
	}
	return append(args, in.MPC.Spec.ProxyAgent.AdditionalArgs...)
}

// AgentDeploymentLabels are the labels of the agent Deployment AgentWork renders, which are also its selector and its
// pods' labels; they do not depend on the configuration. The local launcher finds the Deployment by them.
func AgentDeploymentLabels() map[string]string {
	return map[string]string{addonLabel: proxyv1alpha1.AddonName, proxyv1alpha1.ComponentLabel: proxyAgentLabel}
}

// AgentProxyCredentialsPrefix starts the name of the Secret that holds the forward proxy's URLs when they carry
// credentials; a hash of its content follows, so new credentials roll the agents.
const AgentProxyCredentialsPrefix = "cluster-proxy-proxy-credentials-"

// proxyCredentials is the Secret the agent reads its proxy URLs from when they carry credentials (SecretEnv).
func proxyCredentials(ns string, settings proxyenv.Settings) *corev1.Secret {
	data := proxyenv.CredentialData(settings)
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		h.Write([]byte(k + "=" + string(data[k]) + "\n"))
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: agentMeta(AgentProxyCredentialsPrefix+hex.EncodeToString(h.Sum(nil))[:10], ns),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// agentDeployment is the agent Deployment; credentials, when set, is the Secret its proxy URLs come from.
func agentDeployment(in AgentInput, ns, image string, settings proxyenv.Settings, credentials string, vars proxyenv.AgentVariables, resources *corev1.ResourceRequirements, np proxyv1alpha1.NodePlacement) *appsv1.Deployment {
	labels := AgentDeploymentLabels()
	var pullSecrets []corev1.LocalObjectReference
	for _, s := range in.MPC.Spec.ProxyAgent.ImagePullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: s})
	}
	container := corev1.Container{
		Name:            AgentContainerName,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/proxy-agent"},
		Args:            AgentArgs(in, ns, settings, vars),
		Env:             agentEnv(settings, credentials),
		Ports:           []corev1.ContainerPort{containerPort("health", contract.AgentHealthPort)},
		LivenessProbe:   httpProbe("/healthz", contract.AgentHealthPort),
		ReadinessProbe:  readinessProbe("/readyz", contract.AgentHealthPort),
		SecurityContext: restrictedContainer(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "ca", MountPath: caMount, ReadOnly: true},
			{Name: "agent-cert", MountPath: agentCertMount, ReadOnly: true},
			{Name: "hub-kubeconfig", MountPath: hubConfigMount, ReadOnly: true},
		},
	}
	if resources != nil {
		container.Resources = *resources
	}
	volumes := []corev1.Volume{
		secretVolume("ca", AgentCASecretName),
		secretVolume("agent-cert", AgentCertSecretName),
		secretVolume("hub-kubeconfig", AgentHubKubeconfigSecretName),
	}
	if cm := serviceCAConfigMap(in.MPC); cm != "" {
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: serviceCAVolume, MountPath: ServiceCAMount, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: serviceCAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm},
			Items:                []corev1.KeyToPath{{Key: ServiceCAKey, Path: ServiceCAKey}},
			// Optional: a ConfigMap (or key) that does not exist yet must not keep agent pods from starting, which
			// would stall a rollout or, on a new cluster, leave it without a tunnel at all. The service-proxy then
			// trusts the system roots only, and the kubelet adds the file once the ConfigMap appears; the
			// service-proxy re-reads it.
			Optional: ptr.To(true),
		}}})
	}
	if o := vars.OIDC; o != nil && o.CAConfigMap != "" && ServiceProxyEnabled(in.MPC) {
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: oidcCAVolume, MountPath: OIDCCAMount, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: oidcCAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: OIDCCAKey, Path: OIDCCAKey}},
			// As the service CA: a missing ConfigMap does not keep the agent from starting; OIDC tokens get 503 until
			// it appears, and the service-proxy reads it then without a restart.
			Optional: ptr.To(true),
		}}})
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: AgentDeploymentName, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(in.MPC.Spec.ProxyAgent.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentServiceAccountName,
					ImagePullSecrets:   pullSecrets,
					NodeSelector:       np.NodeSelector,
					Tolerations:        np.Tolerations,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{container},
					Volumes:    volumes,
				},
			},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))},
			},
		},
	}
}

// agentEnv is the proxy environment: in the Deployment, or from the credentials Secret when one is set. In-cluster
// clients dial the kube-apiserver by the IP in KUBERNETES_SERVICE_HOST (the kubelet expands it), so that IP must
// bypass the forward proxy as well as the service names.
func agentEnv(settings proxyenv.Settings, credentials string) []corev1.EnvVar {
	direct := append(proxyenv.DirectHosts(), "$(KUBERNETES_SERVICE_HOST)")
	if credentials != "" {
		return proxyenv.SecretEnv(settings, direct, credentials)
	}
	return proxyenv.Env(settings, direct)
}

// AgentNamespace is where the agent of a cluster is installed: the AddOnDeploymentConfig's agentInstallNamespace, or
// the default.
func AgentNamespace(adc *addonv1alpha1.AddOnDeploymentConfig) string {
	if adc != nil && adc.Spec.AgentInstallNamespace != "" {
		return adc.Spec.AgentInstallNamespace
	}
	return DefaultAgentNamespace
}
