// Package render turns a ManagedProxyConfiguration into the hub objects the operator keeps in place. Every
// function is pure: no client, no clock.
package render

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/gateway/v1alpha1"
	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
)

const (
	// ManagedByLabel marks every object the operator owns; the manager's cache only watches objects with it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel.
	ManagedByValue = "cluster-proxy-operator"
	// ConfigurationLabel names the ManagedProxyConfiguration an object belongs to.
	ConfigurationLabel = "proxy.open-cluster-management.io/configuration"

	// ServerServiceAccountName is the ServiceAccount of the proxy-server pods.
	ServerServiceAccountName = "cluster-proxy"
	// PortForwardRoleName lets agents port-forward to proxy-server pods (PortForward entrypoint only).
	PortForwardRoleName = "cluster-proxy-addon-agent:portforward"

	serverContainerName = "proxy-server"
	serverCAMount       = "/etc/server-ca-pki"
	serverCertMount     = "/etc/server-pki"
	agentServerMount    = "/etc/agent-pki"
	userServerMount     = "/etc/user-server-pki"
	proxyClientMount    = "/etc/proxy-client-pki"
	impersonatorMount   = "/etc/impersonator-pki"
)

// EntrypointType returns the entrypoint type, PortForward when unset.
func EntrypointType(mpc *proxyv1alpha1.ManagedProxyConfiguration) proxyv1alpha1.EntryPointType {
	if e := mpc.Spec.ProxyServer.Entrypoint; e != nil && e.Type != "" {
		return e.Type
	}
	return proxyv1alpha1.EntryPointTypePortForward
}

// EntrypointPort is the port agents dial.
func EntrypointPort(mpc *proxyv1alpha1.ManagedProxyConfiguration) int32 {
	if e := mpc.Spec.ProxyServer.Entrypoint; e != nil && e.Port != 0 {
		return e.Port
	}
	return 8091
}

// LoadBalancerServiceName is the name of the LoadBalancer Service of a LoadBalancerService entrypoint.
func LoadBalancerServiceName(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	if e := mpc.Spec.ProxyServer.Entrypoint; e != nil && e.LoadBalancerService != nil && e.LoadBalancerService.Name != "" {
		return e.LoadBalancerService.Name
	}
	return "proxy-agent-entrypoint"
}

// Labels are the labels of every object owned by mpc.
func Labels(mpc *proxyv1alpha1.ManagedProxyConfiguration) map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue, ConfigurationLabel: mpc.Name}
}

// ServerPodLabels are the labels of mpc's proxy-server pods (what their Services and the agents select them by).
func ServerPodLabels(mpc *proxyv1alpha1.ManagedProxyConfiguration) map[string]string {
	return map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer, ConfigurationLabel: mpc.Name}
}

func objectMeta(mpc *proxyv1alpha1.ManagedProxyConfiguration, name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: namespace,
		Labels:    Labels(mpc),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         proxyv1alpha1.GroupVersion.String(),
			Kind:               "ManagedProxyConfiguration",
			Name:               mpc.Name,
			UID:                mpc.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}},
	}
}

// ServerNamespace is created when missing. It carries no owner reference: it may be shared with other workloads
// (the operator itself is often installed there), so deleting the configuration must not delete it.
func ServerNamespace(mpc *proxyv1alpha1.ManagedProxyConfiguration) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: contract.Namespace(mpc), Labels: Labels(mpc)}}
}

// ServerServiceAccount is the identity of the proxy-server pods on the hub (ServerHubRBAC); only they mount its token.
func ServerServiceAccount(mpc *proxyv1alpha1.ManagedProxyConfiguration) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   objectMeta(mpc, ServerServiceAccountName, contract.Namespace(mpc)),
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// PortForwardRBAC lets agents (the hub group every agent's add-on identity carries, csrreview.AllAgentsGroup) find
// proxy-server pods and open port-forwards to those pods only (pods, the proxy-server pods' names): a port-forward
// reaches every port of its pod, loopback included, so no other pod of the namespace (the manager's, when it shares
// it) may be a target. The manager renders it again as the pods come and go; with no pod yet, no pod may be
// forwarded to. Only the PortForward entrypoint needs it, and it grants nothing else.
func PortForwardRBAC(mpc *proxyv1alpha1.ManagedProxyConfiguration, pods []string) (*rbacv1.Role, *rbacv1.RoleBinding) {
	ns := contract.Namespace(mpc)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
	if len(pods) > 0 {
		// An empty resourceNames would be every pod: the rule is there only with names.
		names := slices.Sorted(slices.Values(pods))
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"},
			ResourceNames: slices.Compact(names), Verbs: []string{"create"}})
	}
	role := &rbacv1.Role{ObjectMeta: objectMeta(mpc, PortForwardRoleName, ns), Rules: rules}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(mpc, PortForwardRoleName, ns),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: PortForwardRoleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: csrreview.AllAgentsGroup}},
	}
	return role, binding
}

// InClusterService is how hub clients reach the proxy servers' frontend (and agents, for in-cluster entrypoints).
func InClusterService(mpc *proxyv1alpha1.ManagedProxyConfiguration) *corev1.Service {
	p := contract.PortsOf(mpc)
	return &corev1.Service{
		ObjectMeta: objectMeta(mpc, contract.ServiceName(mpc), contract.Namespace(mpc)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: ServerPodLabels(mpc),
			Ports: []corev1.ServicePort{
				servicePort("proxy-server", p.ProxyServer, p.ProxyServer),
				servicePort("agent-server", p.AgentServer, p.AgentServer),
				servicePort("http-connect", p.HTTPConnectServer, p.HTTPConnectServer),
			},
		},
	}
}

// UserServerService is how hub clients reach the user-server: https://cluster-proxy-addon-user.<ns>.svc:9092/<cluster>;
// the hub kube-apiserver reaches the aggregated API on its gateway port.
func UserServerService(mpc *proxyv1alpha1.ManagedProxyConfiguration) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(mpc, proxyv1alpha1.UserServerServiceName, contract.Namespace(mpc)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: ServerPodLabels(mpc),
			Ports: []corev1.ServicePort{
				servicePort("user-server", proxyv1alpha1.UserServerPort, proxyv1alpha1.UserServerPort),
				servicePort("gateway", proxyv1alpha1.GatewayPort, proxyv1alpha1.GatewayPort),
			},
		},
	}
}

// LoadBalancerService exposes the agent port for a LoadBalancerService entrypoint. Annotations come from the
// configuration; removing one there removes it here. It publishes replicas that are not Ready yet: a new replica
// turns Ready only once the agents have reached it (ServerArgs' peer wait), so agents must reach it before then.
func LoadBalancerService(mpc *proxyv1alpha1.ManagedProxyConfiguration) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: objectMeta(mpc, LoadBalancerServiceName(mpc), contract.Namespace(mpc)),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeLoadBalancer,
			Selector:                 ServerPodLabels(mpc),
			Ports:                    []corev1.ServicePort{servicePort("agent-server", EntrypointPort(mpc), contract.PortsOf(mpc).AgentServer)},
			PublishNotReadyAddresses: true,
		},
	}
	if e := mpc.Spec.ProxyServer.Entrypoint; e != nil && e.LoadBalancerService != nil && len(e.LoadBalancerService.Annotations) > 0 {
		svc.Annotations = map[string]string{}
		for _, a := range e.LoadBalancerService.Annotations {
			svc.Annotations[a.Key] = a.Value
		}
	}
	return svc
}

// LoadBalancerAddress is the first ingress of a LoadBalancer Service, preferring its hostname to its IP.
func LoadBalancerAddress(svc *corev1.Service) string {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.Hostname != "" {
			return in.Hostname
		}
		if in.IP != "" {
			return in.IP
		}
	}
	return ""
}

// EntrypointHost is the host agents dial, given the LoadBalancer address (when that type is used). It is ""
// when not yet known.
func EntrypointHost(mpc *proxyv1alpha1.ManagedProxyConfiguration, lbAddress string) string {
	switch EntrypointType(mpc) {
	case proxyv1alpha1.EntryPointTypeHostname:
		return mpc.Spec.ProxyServer.Entrypoint.Hostname.Value
	case proxyv1alpha1.EntryPointTypeLoadBalancerService:
		return lbAddress
	default:
		// The agent's port-forward proxy listens on loopback next to the proxy-agent.
		return "127.0.0.1"
	}
}

// PodIPEnv is the proxy-server container's variable holding the pod's IP, which its health port binds (ServerArgs).
const PodIPEnv = "POD_IP"

// ServerArgs is the proxy-server command line.
func ServerArgs(mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	p := contract.PortsOf(mpc)
	args := []string{
		"--server-count=" + strconv.Itoa(int(mpc.Spec.ProxyServer.Replicas)),
		"--proxy-strategies=destHost",
		// The health port binds the pod's IP alone. Its /metrics answers whoever reaches it, and port-forward, which
		// every agent may do to these pods for the PortForward entrypoint (RBAC names pods, not ports), connects to
		// the pod's loopback; the kubelet's probes and scrapers use the pod's IP. Every other port asks for a
		// credential an agent does not hold, but the agent port.
		"--health-bind-address=$(" + PodIPEnv + ")",
		fmt.Sprintf("--server-port=%d", p.ProxyServer),
		fmt.Sprintf("--agent-port=%d", p.AgentServer),
		fmt.Sprintf("--health-port=%d", p.HealthServer),
		fmt.Sprintf("--admin-port=%d", p.AdminServer),
		fmt.Sprintf("--http-connect-port=%d", p.HTTPConnectServer),
		"--server-ca-cert=" + serverCAMount + "/ca.crt",
		"--server-cert=" + serverCertMount + "/tls.crt",
		"--server-key=" + serverCertMount + "/tls.key",
		"--cluster-ca-cert=" + serverCAMount + "/ca.crt",
		"--cluster-cert=" + agentServerMount + "/tls.crt",
		"--cluster-key=" + agentServerMount + "/tls.key",
		"--user-server-cert=" + userServerMount + "/tls.crt",
		"--user-server-key=" + userServerMount + "/tls.key",
		"--impersonator-cert=" + impersonatorMount + "/tls.crt",
		"--impersonator-key=" + impersonatorMount + "/tls.key",
		fmt.Sprintf("--user-server-port=%d", proxyv1alpha1.UserServerPort),
		// The aggregated API serves with the user-server's certificate, which names the Service the APIService uses.
		fmt.Sprintf("--gateway-port=%d", proxyv1alpha1.GatewayPort),
		"--gateway-cert=" + userServerMount + "/tls.crt",
		"--gateway-key=" + userServerMount + "/tls.key",
		"--tls-profile-file=" + contract.TLSProfileMount + "/" + contract.TLSProfileKey,
	}
	if peerWait(mpc) {
		args = append(args,
			"--peer-address="+net.JoinHostPort(contract.ServiceHost(mpc), strconv.Itoa(int(p.HTTPConnectServer))),
			"--peer-cert="+proxyClientMount+"/tls.crt",
			"--peer-key="+proxyClientMount+"/tls.key",
		)
	}
	args = append(args, allowedServiceArgs(mpc, true)...)
	if us := mpc.Spec.UserServer; us != nil && us.HubAuthorization == proxyv1alpha1.HubAuthorizationNone {
		args = append(args, "--hub-authorization="+string(proxyv1alpha1.HubAuthorizationNone))
	}
	if hu := mpc.Spec.HubUsers; hu != nil && hu.Prefix != "" {
		args = append(args, "--hub-user-prefix="+hu.Prefix)
	}
	if hu := mpc.Spec.HubUsers; hu != nil && hu.ServiceAccountGroups == proxyv1alpha1.ServiceAccountGroupsUnprefixed {
		args = append(args, "--hub-service-account-groups=unprefixed")
	}
	args = append(args, recordArgs(mpc)...)
	return append(args, mpc.Spec.ProxyServer.AdditionalArgs...)
}

// peerWait tells whether a new proxy-server replica waits, before it turns Ready, for the agents its Ready peers
// hold. With one replica there is no peer to match: agents keep their one tunnel to the old replica until it goes, so
// a surge replica would wait out the bound for nothing.
func peerWait(mpc *proxyv1alpha1.ManagedProxyConfiguration) bool {
	return mpc.Spec.ProxyServer.Replicas > 1
}

// serverStrategy replaces replicas one at a time, a new one only after an old one has gone, when there are several:
// the agents of the replica that goes look for another server at once and reach the new one, which turns Ready once
// it holds them (peerWait); the Ready replicas meanwhile hold every agent. A surge replica would instead stay without
// agents, since each agent already holds as many tunnels as there are replicas. One replica keeps the default surge.
func serverStrategy(mpc *proxyv1alpha1.ManagedProxyConfiguration) appsv1.DeploymentStrategy {
	if !peerWait(mpc) {
		return appsv1.DeploymentStrategy{}
	}
	return appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxSurge:       ptr.To(intstr.FromInt32(0)),
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	}
}

// AllowedServiceArgs are the --allowed-service flags (namespace/name[:port]) of the configuration's user-server
// allow-list for every agent's service-proxy, which enforces it too.
func AllowedServiceArgs(mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	return allowedServiceArgs(mpc, false)
}

// allowedServiceArgs are the --allowed-service flags in the format allowlist.Parse reads back; with tokens, the
// entries whose service authenticates its callers say so (",token=optional"), for the user-server, which alone
// checks tokens. Agents get the entries without it, which agents of every release read.
func allowedServiceArgs(mpc *proxyv1alpha1.ManagedProxyConfiguration, tokens bool) []string {
	if mpc.Spec.UserServer == nil {
		return nil
	}
	args := make([]string, 0, len(mpc.Spec.UserServer.AllowedServices))
	for _, a := range mpc.Spec.UserServer.AllowedServices {
		s := allowlist.Service{Namespace: a.Namespace, Name: a.Name, Port: int(a.Port)}
		s.TokenOptional = tokens && a.CallerAuthentication == proxyv1alpha1.CallerAuthenticationService
		args = append(args, "--allowed-service="+s.String())
	}
	return args
}

// Object is a Kubernetes object as the controllers' client takes it.
type Object interface {
	metav1.Object
	runtime.Object
}

// RetiredAgentTokenReviewBinding is the binding that let every agent's hub identity create TokenReviews on the hub
// (system:auth-delegator), when service-proxies reviewed hub tokens themselves. No hub token reaches an agent any more:
// the operator deletes the binding it made.
func RetiredAgentTokenReviewBinding(mpc *proxyv1alpha1.ManagedProxyConfiguration) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: objectMeta(mpc, "open-cluster-management:cluster-proxy:agent-tokenreview", "")}
}

// ServerHubRBAC is what the proxy-server pods may do on the hub: review the tokens and check the hub RBAC of the
// users who come to the user-server, and, as an aggregated API server, read the front proxy's CA
// (kube-system/extension-apiserver-authentication, by name) and the ClusterProxyStatuses it shows as clusters. The CA
// is granted by name in a ClusterRole rather than by a RoleBinding in kube-system, so that the manager holds no right
// to write RBAC in kube-system.
func ServerHubRBAC(mpc *proxyv1alpha1.ManagedProxyConfiguration) []Object {
	name := "open-cluster-management:cluster-proxy:proxy-server:" + mpc.Name
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServerServiceAccountName, Namespace: contract.Namespace(mpc)}}
	return []Object{
		&rbacv1.ClusterRole{
			ObjectMeta: objectMeta(mpc, name, ""),
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{proxyv1alpha1.GroupVersion.Group}, Resources: []string{"clusterproxystatuses"},
					Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{FrontProxyConfigMapName},
					Verbs: []string{"get", "list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: objectMeta(mpc, name, ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   subjects,
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: objectMeta(mpc, name+":auth-delegator", ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects:   subjects,
		},
	}
}

// FrontProxyConfigMapName is the ConfigMap of kube-system in which the hub kube-apiserver publishes its client and
// front-proxy CAs for aggregated API servers.
const FrontProxyConfigMapName = "extension-apiserver-authentication"

// ServerDeployment runs the proxy servers. It mounts the certificate secrets, which are renewed in place: the
// pod template does not change on renewal, so renewal restarts nothing.
func ServerDeployment(mpc *proxyv1alpha1.ManagedProxyConfiguration) *appsv1.Deployment {
	d := serverDeployment(mpc)
	recordVolumes(mpc, &d.Spec.Template.Spec)
	return d
}

func serverDeployment(mpc *proxyv1alpha1.ManagedProxyConfiguration) *appsv1.Deployment {
	p := contract.PortsOf(mpc)
	secrets := contract.SecretNamesOf(mpc)
	np := mpc.Spec.ProxyServer.NodePlacement
	meta := objectMeta(mpc, mpc.Name, contract.Namespace(mpc))
	meta.Annotations = map[string]string{proxyv1alpha1.ConfigurationGenerationAnnotation: strconv.FormatInt(mpc.Generation, 10)}
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(mpc.Spec.ProxyServer.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: ServerPodLabels(mpc)},
			Strategy: serverStrategy(mpc),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: ServerPodLabels(mpc)},
				Spec: corev1.PodSpec{
					ServiceAccountName: ServerServiceAccountName,
					// The hub API: TokenReviews and SubjectAccessReviews of user-server callers, the aggregated API.
					AutomountServiceAccountToken: ptr.To(true),
					NodeSelector:                 np.NodeSelector,
					Tolerations:                  np.Tolerations,
					TopologySpreadConstraints:    serverTopologySpread(mpc),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            serverContainerName,
						Image:           mpc.Spec.ProxyServer.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{"/proxy-server"},
						Args:            ServerArgs(mpc),
						Env: []corev1.EnvVar{{Name: PodIPEnv, ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}}},
						Ports: []corev1.ContainerPort{
							containerPort("proxy-server", p.ProxyServer),
							containerPort("agent-server", p.AgentServer),
							containerPort("health", p.HealthServer),
							containerPort("http-connect", p.HTTPConnectServer),
							containerPort("user-server", proxyv1alpha1.UserServerPort),
							containerPort("gateway", proxyv1alpha1.GatewayPort),
						},
						LivenessProbe:   httpProbe("/healthz", p.HealthServer),
						ReadinessProbe:  readinessProbe("/readyz", p.HealthServer),
						Resources:       ServerResources(mpc),
						SecurityContext: restrictedContainer(),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "proxy-server-ca", MountPath: serverCAMount, ReadOnly: true},
							{Name: "proxy-server", MountPath: serverCertMount, ReadOnly: true},
							{Name: "agent-server", MountPath: agentServerMount, ReadOnly: true},
							{Name: "user-server", MountPath: userServerMount, ReadOnly: true},
							{Name: "impersonator", MountPath: impersonatorMount, ReadOnly: true},
							{Name: "tls-profile", MountPath: contract.TLSProfileMount, ReadOnly: true},
							// The client certificate a new replica asks its peers with (peerWait).
							{Name: "proxy-client", MountPath: proxyClientMount, ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						secretVolume("proxy-server-ca", proxyv1alpha1.CABundleSecretName),
						secretVolume("proxy-server", secrets.ProxyServer),
						secretVolume("agent-server", secrets.AgentServer),
						secretVolume("user-server", secrets.UserServer),
						secretVolume("impersonator", proxyv1alpha1.ImpersonatorSecretName),
						secretVolume("proxy-client", secrets.ProxyClient),
						{Name: "tls-profile", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: TLSProfileConfigMapName(mpc)},
							// A missing profile is the default one; the pods do not wait for it.
							Optional: ptr.To(true),
						}}},
					},
				},
			},
		},
	}
}

// DefaultServerResources are the proxy-server container's resources when spec.proxyServer.resources is unset: requests
// that reserve an idle replica's share on a node, and no limits. A CPU limit would throttle every tunnel of the replica
// at once, latency the data plane cannot afford; memory grows with the agents a replica holds, and an OOM-kill at a
// limit set without knowing the fleet would drop them all. docs/install.md says how to size them.
func DefaultServerResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("64Mi"),
	}}
}

// ServerResources are the proxy-server container's resources: spec.proxyServer.resources as a whole when set ({}
// included, which sets none), else DefaultServerResources.
func ServerResources(mpc *proxyv1alpha1.ManagedProxyConfiguration) corev1.ResourceRequirements {
	if r := mpc.Spec.ProxyServer.Resources; r != nil {
		return *r.DeepCopy()
	}
	return DefaultServerResources()
}

// serverTopologySpread spreads the proxy-server replicas over nodes, so that losing a node loses as few of them as
// possible. ScheduleAnyway: a hub with fewer nodes than replicas, one node included, still runs them all, and a
// nodePlacement that narrows the nodes is honoured (the scheduler counts only the nodes the pods may run on).
func serverTopologySpread(mpc *proxyv1alpha1.ManagedProxyConfiguration) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelHostname,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: ServerPodLabels(mpc)},
	}}
}

// ServerPodDisruptionBudget lets a voluntary disruption (a node drain, a cluster autoscaler) take one proxy-server
// replica at a time: with several, the others keep every agent's tunnel while it is gone (agents hold one to each
// replica); with one, a drain still proceeds, as minAvailable would block it for good. It selects the pods of
// ServerDeployment.
func ServerPodDisruptionBudget(mpc *proxyv1alpha1.ManagedProxyConfiguration) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: objectMeta(mpc, mpc.Name, contract.Namespace(mpc)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: ServerPodLabels(mpc)},
		},
	}
}

// TLSProfileConfigMapName names the ConfigMap of the proxy-servers' TLS profile.
func TLSProfileConfigMapName(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	return mpc.Name + "-tls-profile"
}

// TLSProfileConfigMap holds the TLS profile the proxy-servers apply (contract.TLSProfileKey, JSON). The Deployment
// mounts it, so a change reaches the running pods as the kubelet updates the volume: no rollout, no dropped tunnel.
func TLSProfileConfigMap(mpc *proxyv1alpha1.ManagedProxyConfiguration, profile contract.TLSProfile) (*corev1.ConfigMap, error) {
	raw, err := json.Marshal(profile)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta(mpc, TLSProfileConfigMapName(mpc), contract.Namespace(mpc)),
		Data:       map[string]string{contract.TLSProfileKey: string(raw)},
	}, nil
}

// GatewayAPIService registers the proxy-servers' aggregated API (gateway.proxy.open-cluster-management.io/v1alpha1)
// with the hub kube-apiserver, which checks their serving certificate (the user-server's) against caBundle: the
// published CA bundle, so during a CA rollover both CAs are trusted.
func GatewayAPIService(mpc *proxyv1alpha1.ManagedProxyConfiguration, caBundle []byte) *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: objectMeta(mpc, proxyv1alpha1.GatewayAPIServiceName, ""),
		Spec: apiregistrationv1.APIServiceSpec{
			Group:   gatewayv1alpha1.GroupVersion.Group,
			Version: gatewayv1alpha1.GroupVersion.Version,
			Service: &apiregistrationv1.ServiceReference{
				Namespace: contract.Namespace(mpc),
				Name:      proxyv1alpha1.UserServerServiceName,
				Port:      ptr.To(int32(proxyv1alpha1.GatewayPort)),
			},
			CABundle:             caBundle,
			GroupPriorityMinimum: 1000,
			VersionPriority:      15,
		},
	}
}

// CABundleSecret publishes the CA bundle every proxy client and agent trusts.
func CABundleSecret(mpc *proxyv1alpha1.ManagedProxyConfiguration, bundle []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: objectMeta(mpc, proxyv1alpha1.CABundleSecretName, contract.Namespace(mpc)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"ca.crt": bundle},
	}
}

// CMAUserOwnedFields are the ClusterManagementAddOn fields users set and the operator leaves alone.
var CMAUserOwnedFields = [][]string{{"spec", "installStrategy"}}

// SignerSecret holds the CA the operator signs with in the proxy-server namespace. It carries no owner reference:
// every agent and hub client trusts that CA, so it outlives the configuration (helm uninstall deletes it) and a
// configuration created again signs with it. Its labels keep it in the manager's cache.
func SignerSecret(mpc *proxyv1alpha1.ManagedProxyConfiguration, name string, data map[string][]byte, annotations map[string]string) *corev1.Secret {
	meta := metav1.ObjectMeta{Name: name, Namespace: contract.Namespace(mpc), Labels: Labels(mpc), Annotations: annotations}
	return &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: data}
}

// ClusterManagementAddOn registers the cluster-proxy add-on with OCM; managed clusters get agents through it. Its
// spec.installStrategy (Manual or Placements) belongs to users: see CMAUserOwnedFields.
func ClusterManagementAddOn(mpc *proxyv1alpha1.ManagedProxyConfiguration) *addonv1alpha1.ClusterManagementAddOn {
	meta := objectMeta(mpc, proxyv1alpha1.AddonName, "")
	// The add-on is often installed by Helm, whose app.kubernetes.io/managed-by value ("Helm") marks what its release
	// owns: the operator does not claim the label, so the two never take it from each other.
	delete(meta.Labels, ManagedByLabel)
	// The operator installs the add-on itself (install strategy, registrations, ManifestWork): OCM's add-on manager
	// must not do it as well.
	meta.Annotations = map[string]string{"addon.open-cluster-management.io/lifecycle": "self"}
	return &addonv1alpha1.ClusterManagementAddOn{
		ObjectMeta: meta,
		Spec: addonv1alpha1.ClusterManagementAddOnSpec{
			AddOnMeta: addonv1alpha1.AddOnMeta{
				DisplayName: "cluster-proxy",
				Description: "Reverse tunnels from the hub to every managed cluster's kube-apiserver and services",
			},
			// OCM v1.0.0 serves add-on v1alpha1 only, where supportedConfigs is how default configs are declared.
			SupportedConfigs: []addonv1alpha1.ConfigMeta{
				{ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"}},
				{
					ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: proxyv1alpha1.GroupVersion.Group, Resource: "managedproxyconfigurations"},
					DefaultConfig:       &addonv1alpha1.ConfigReferent{Name: mpc.Name},
				},
			},
		},
	}
}

// SplitSANs separates IP addresses from DNS names, dropping empties and duplicates; the result is sorted.
func SplitSANs(sans ...string) (dns []string, ips []string) {
	seen := map[string]bool{}
	for _, s := range sans {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		if net.ParseIP(s) != nil {
			ips = append(ips, s)
		} else {
			dns = append(dns, s)
		}
	}
	sort.Strings(dns)
	sort.Strings(ips)
	return dns, ips
}

// restrictedContainer is the container security context of the restricted Pod Security Standard, with a read-only
// root filesystem.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func servicePort(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}
}

func containerPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}
}

func httpProbe(path string, port int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP}}}
}

// ReadinessPeriodSeconds is how often the kubelet asks a proxy-server or an agent whether it is Ready. A rolling
// update replaces the next pod only once the new one is Ready, which it turns once it holds tunnels (a proxy-server
// every cluster its peers hold, an agent one): at Kubernetes' default of 10 s, most of a roll is spent waiting for the
// next probe. The probe is a local HTTP GET that reads a flag.
const ReadinessPeriodSeconds = 2

// readinessProbe is httpProbe, asked every ReadinessPeriodSeconds.
func readinessProbe(path string, port int32) *corev1.Probe {
	p := httpProbe(path, port)
	p.PeriodSeconds = ReadinessPeriodSeconds
	return p
}

func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

// SplitEntrypoint splits a status entrypoint "host:port" and returns the host ("" when unset).
func SplitEntrypoint(entrypoint string) (host, port string) {
	h, p, err := net.SplitHostPort(entrypoint)
	if err != nil {
		return "", ""
	}
	return h, p
}

// AcceptAdoptedProxyClients lets the proxy-servers of d take the existing add-on's proxy-client certificates, named by
// their hex SHA-256 fingerprints, as the operator's proxy-client (contract.AdoptedProxyClientFlag).
func AcceptAdoptedProxyClients(d *appsv1.Deployment, fingerprints []string) {
	c := &d.Spec.Template.Spec.Containers[0]
	for _, fp := range fingerprints {
		c.Args = append(c.Args, "--"+contract.AdoptedProxyClientFlag+"="+fp)
	}
}

// AddOnLeftovers are what the existing add-on leaves on the hub once the operator runs in its place, which the
// operator never writes and which would keep something alive no one needs: the TokenReview right its manager gave every
// agent's hub identity (the operator's agents never see a hub token), and the service-proxy serving certificate for
// "*", signed by the CA the operator adopts, whose key would otherwise stay valid for any name its holder chose.
// Everything else of the add-on either has the name of what the operator writes (and is taken over) or belongs to
// its Helm release (and goes with the upgrade).
func AddOnLeftovers(mpc *proxyv1alpha1.ManagedProxyConfiguration) []client.Object {
	const tokenReview = "cluster-proxy-addon-agent-tokenreview"
	return []client.Object{
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: tokenReview}},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: tokenReview}},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy-service-proxy-server-cert", Namespace: contract.Namespace(mpc)}},
	}
}
