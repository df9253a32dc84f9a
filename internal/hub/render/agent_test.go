package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	workv1 "open-cluster-management.io/api/work/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
)

const (
	testAgentImage  = "quay.io/open-cluster-management/cluster-proxy:v0.5.0"
	testHubHost     = "hub.example.com"
	testCluster     = "cluster1"
	defaultNoProxy  = "kubernetes.default.svc,kubernetes.default.svc.cluster.local,.svc,.cluster.local,localhost,127.0.0.1,$(KUBERNETES_SERVICE_HOST)"
	impersonatorFmt = "cluster-proxy-agent-impersonator:"
)

// testCAs are generated once: the hub CA the agent trusts and the CA of a forward proxy.
var testCAs = sync.OnceValues(func() ([2]*certs.KeyPair, error) {
	now := time.Now()
	hub, err := certs.NewCA("cluster-proxy-hub-ca", time.Hour, now)
	if err != nil {
		return [2]*certs.KeyPair{}, err
	}
	proxy, err := certs.NewCA("forward-proxy-ca", time.Hour, now)
	return [2]*certs.KeyPair{hub, proxy}, err
})

func hubAndProxyCA(t *testing.T) (hub, proxy *certs.KeyPair) {
	t.Helper()
	cas, err := testCAs()
	if err != nil {
		t.Fatal(err)
	}
	return cas[0], cas[1]
}

// agentTestInput is a minimal input: a configuration with a Hostname entrypoint, no AddOnDeploymentConfig.
func agentTestInput(t *testing.T) AgentInput {
	hub, _ := hubAndProxyCA(t)
	m := &proxyv1alpha1.ManagedProxyConfiguration{}
	m.Name = "cluster-proxy"
	m.Spec.ProxyServer = proxyv1alpha1.ManagedProxyConfigurationProxyServer{
		Image: "img", Replicas: 3,
		Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
			Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: testHubHost},
		},
	}
	m.Spec.ProxyAgent = proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: testAgentImage, Replicas: 3}
	return AgentInput{Cluster: testCluster, MPC: m, EntrypointHost: testHubHost, CABundle: hub.CertPEM}
}

func withADC(in *AgentInput, spec addonv1alpha1.AddOnDeploymentConfigSpec) {
	in.ADC = &addonv1alpha1.AddOnDeploymentConfig{ObjectMeta: metav1.ObjectMeta{Name: "adc", Namespace: in.Cluster}, Spec: spec}
}

// agentObjects are the decoded manifests of the agent work, by kind.
type agentObjects struct {
	kinds              []string
	names              []string
	namespace          *corev1.Namespace
	serviceAccount     *corev1.ServiceAccount
	role               *rbacv1.Role
	roleBinding        *rbacv1.RoleBinding
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
	secret             *corev1.Secret // the CA bundle
	credentials        *corev1.Secret // the proxy URLs, when they carry credentials
	deployment         *appsv1.Deployment
	networkPolicy      *networkingv1.NetworkPolicy
}

func (o agentObjects) container() corev1.Container {
	return o.deployment.Spec.Template.Spec.Containers[0]
}

// namespaced are the metadata of every namespaced object.
func (o agentObjects) namespaced() []metav1.ObjectMeta {
	return []metav1.ObjectMeta{o.serviceAccount.ObjectMeta, o.role.ObjectMeta, o.roleBinding.ObjectMeta, o.secret.ObjectMeta, o.deployment.ObjectMeta}
}

func decodeStrict(g Gomega, raw []byte, into any) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	g.ExpectWithOffset(2, dec.Decode(into)).To(Succeed())
}

func decodeAgentWork(g Gomega, work *workv1.ManifestWork) agentObjects {
	var o agentObjects
	for i, m := range work.Spec.Workload.Manifests {
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		g.Expect(json.Unmarshal(m.Raw, &head)).To(Succeed())
		o.kinds = append(o.kinds, head.Kind)
		o.names = append(o.names, head.Metadata.Name)
		var target any
		switch head.Kind {
		case "Namespace":
			g.Expect(o.namespace).To(BeNil(), "a second Namespace")
			o.namespace = &corev1.Namespace{}
			target = o.namespace
		case "ServiceAccount":
			g.Expect(o.serviceAccount).To(BeNil(), "a second ServiceAccount")
			o.serviceAccount = &corev1.ServiceAccount{}
			target = o.serviceAccount
		case "Role":
			g.Expect(o.role).To(BeNil(), "a second Role")
			o.role = &rbacv1.Role{}
			target = o.role
		case "RoleBinding":
			g.Expect(o.roleBinding).To(BeNil(), "a second RoleBinding")
			o.roleBinding = &rbacv1.RoleBinding{}
			target = o.roleBinding
		case "ClusterRole":
			g.Expect(o.clusterRole).To(BeNil(), "a second ClusterRole")
			o.clusterRole = &rbacv1.ClusterRole{}
			target = o.clusterRole
		case "ClusterRoleBinding":
			g.Expect(o.clusterRoleBinding).To(BeNil(), "a second ClusterRoleBinding")
			o.clusterRoleBinding = &rbacv1.ClusterRoleBinding{}
			target = o.clusterRoleBinding
		case "Secret":
			if strings.HasPrefix(head.Metadata.Name, AgentProxyCredentialsPrefix) {
				g.Expect(o.credentials).To(BeNil(), "a second credentials Secret")
				o.credentials = &corev1.Secret{}
				target = o.credentials
				break
			}
			g.Expect(o.secret).To(BeNil(), "a second Secret")
			o.secret = &corev1.Secret{}
			target = o.secret
		case "Deployment":
			g.Expect(o.deployment).To(BeNil(), "a second Deployment")
			o.deployment = &appsv1.Deployment{}
			target = o.deployment
		case "NetworkPolicy":
			g.Expect(o.networkPolicy).To(BeNil(), "a second NetworkPolicy")
			o.networkPolicy = &networkingv1.NetworkPolicy{}
			target = o.networkPolicy
		default:
			g.Expect(head.Kind).To(BeEmpty(), "unexpected kind in manifest %d", i)
			continue
		}
		decodeStrict(g, m.Raw, target)
	}
	for _, required := range []any{o.namespace, o.serviceAccount, o.role, o.roleBinding, o.secret, o.deployment} {
		g.Expect(required).NotTo(BeNil(), "kinds rendered: %v", o.kinds)
	}
	g.Expect(o.deployment.Spec.Template.Spec.Containers).To(HaveLen(1))
	return o
}

func baseArgs(cluster, ns string) []string {
	return []string{
		"--proxy-server-host=" + testHubHost,
		"--proxy-server-port=8091",
		"--agent-identifiers=host=" + cluster + "&host=" + cluster + "." + ns,
		"--cluster-name=" + cluster,
		"--ca-cert=/etc/ca/ca.crt",
		"--agent-cert=/etc/tls/tls.crt",
		"--agent-key=/etc/tls/tls.key",
		"--hub-kubeconfig=/etc/hub/kubeconfig",
		"--health-server-port=8093",
		"--lease-namespace=" + ns,
	}
}

func envOf(pairs ...string) []corev1.EnvVar {
	var env []corev1.EnvVar
	for i := 0; i < len(pairs); i += 2 {
		env = append(env, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return env
}

func TestAgentWork(t *testing.T) {
	hub, proxyCA := hubAndProxyCA(t)
	addonLabels := map[string]string{"open-cluster-management.io/addon": "cluster-proxy"}
	podLabels := map[string]string{"open-cluster-management.io/addon": "cluster-proxy", proxyv1alpha1.ComponentLabel: "proxy-agent"}

	cases := []struct {
		name   string
		modify func(in *AgentInput)
		check  func(g Gomega, work *workv1.ManifestWork, summary *AgentSummary, o agentObjects)
	}{
		{
			name: "without an AddOnDeploymentConfig the agent is installed in the default namespace with lease RBAC only",
			check: func(g Gomega, work *workv1.ManifestWork, summary *AgentSummary, o agentObjects) {
				const ns = "open-cluster-management-cluster-proxy"
				g.Expect(work.Name).To(Equal("addon-cluster-proxy-deploy-0"))
				g.Expect(work.Namespace).To(Equal(testCluster))
				g.Expect(work.Labels).To(Equal(map[string]string{
					"app.kubernetes.io/managed-by":     "cluster-proxy-operator",
					"open-cluster-management.io/addon": "cluster-proxy",
				}))
				g.Expect(o.kinds).To(Equal([]string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Secret", "Deployment"}))
				g.Expect(o.clusterRole).To(BeNil())
				g.Expect(o.clusterRoleBinding).To(BeNil())

				g.Expect(o.namespace.Name).To(Equal(ns))
				g.Expect(o.namespace.Labels).To(Equal(addonLabels))
				g.Expect(o.namespace.Annotations).To(Equal(map[string]string{"addon.open-cluster-management.io/deletion-orphan": ""}))
				for _, meta := range o.namespaced() {
					g.Expect(meta.Namespace).To(Equal(ns), meta.Name)
				}

				g.Expect(o.serviceAccount.Name).To(Equal("cluster-proxy"))
				g.Expect(o.serviceAccount.Labels).To(Equal(addonLabels))

				g.Expect(o.role.Name).To(Equal("cluster-proxy-addon-agent"))
				g.Expect(o.role.Rules).To(Equal([]rbacv1.PolicyRule{
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"cluster-proxy"}, Verbs: []string{"get", "update"}},
				}))
				g.Expect(o.roleBinding.Name).To(Equal("cluster-proxy-addon-agent"))
				g.Expect(o.roleBinding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cluster-proxy-addon-agent"}))
				g.Expect(o.roleBinding.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "cluster-proxy", Namespace: ns}}))

				g.Expect(o.secret.Name).To(Equal("cluster-proxy-ca"))
				g.Expect(o.secret.Type).To(Equal(corev1.SecretTypeOpaque))
				g.Expect(o.secret.Data).To(Equal(map[string][]byte{"ca.crt": hub.CertPEM}))

				d := o.deployment
				g.Expect(d.Name).To(Equal("cluster-proxy-proxy-agent"))
				g.Expect(d.Labels).To(Equal(podLabels))
				g.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(3))))
				g.Expect(d.Spec.Selector.MatchLabels).To(Equal(podLabels))
				g.Expect(d.Spec.Template.Labels).To(Equal(podLabels))
				pod := d.Spec.Template.Spec
				g.Expect(pod.Containers[0].ReadinessProbe.PeriodSeconds).To(BeEquivalentTo(2),
					"a roll moves on soon after a new agent holds a tunnel")
				g.Expect(pod.ServiceAccountName).To(Equal("cluster-proxy"))
				g.Expect(pod.ImagePullSecrets).To(BeEmpty())
				g.Expect(pod.NodeSelector).To(BeEmpty())
				g.Expect(pod.Tolerations).To(BeEmpty())
				g.Expect(pod.Volumes).To(Equal([]corev1.Volume{
					{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cluster-proxy-ca"}}},
					{Name: "agent-cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert"}}},
					{Name: "hub-kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cluster-proxy-hub-kubeconfig"}}},
				}))
				c := o.container()
				g.Expect(c.Name).To(Equal("proxy-agent"))
				g.Expect(c.Image).To(Equal(testAgentImage))
				g.Expect(c.Command).To(Equal([]string{"/proxy-agent"}))
				g.Expect(c.Args).To(Equal(append(baseArgs(testCluster, ns), "--service-proxy-port=0")), "no user-server, no service-proxy")
				g.Expect(c.Args).To(ContainElement("--agent-identifiers=host=cluster1&host=cluster1.open-cluster-management-cluster-proxy"))
				g.Expect(c.Env).To(BeEmpty())
				g.Expect(c.Resources).To(Equal(corev1.ResourceRequirements{}))
				g.Expect(c.Ports).To(HaveLen(1))
				g.Expect(c.Ports[0].ContainerPort).To(Equal(int32(8093)))
				g.Expect(c.VolumeMounts).To(Equal([]corev1.VolumeMount{
					{Name: "ca", MountPath: "/etc/ca", ReadOnly: true},
					{Name: "agent-cert", MountPath: "/etc/tls", ReadOnly: true},
					{Name: "hub-kubeconfig", MountPath: "/etc/hub", ReadOnly: true},
				}))

				g.Expect(work.Spec.DeleteOption).To(Equal(&workv1.DeleteOption{
					PropagationPolicy: workv1.DeletePropagationPolicyTypeSelectivelyOrphan,
					SelectivelyOrphan: &workv1.SelectivelyOrphan{OrphaningRules: []workv1.OrphaningRule{{Resource: "namespaces", Name: ns}}},
				}))
				g.Expect(work.Spec.ManifestConfigs).To(Equal([]workv1.ManifestConfigOption{{
					ResourceIdentifier: workv1.ResourceIdentifier{Group: "apps", Resource: "deployments", Name: "cluster-proxy-proxy-agent", Namespace: ns},
					FeedbackRules:      []workv1.FeedbackRule{{Type: workv1.WellKnownStatusType}},
				}}))

				g.Expect(summary).To(Equal(&AgentSummary{Namespace: ns, Image: testAgentImage}))
			},
		},
		{
			name: "a user-server on the configuration adds impersonation RBAC, the service-proxy port and the allow-list",
			modify: func(in *AgentInput) {
				in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{
					AllowedServices: []proxyv1alpha1.AllowedService{{Namespace: "default", Name: "web", Port: 8080}},
				}
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				const ns = "open-cluster-management-cluster-proxy"
				const name = impersonatorFmt + ns
				g.Expect(o.kinds).To(Equal([]string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Secret", "Deployment"}))
				g.Expect(o.clusterRole.Name).To(Equal(name))
				g.Expect(o.clusterRole.Namespace).To(BeEmpty())
				g.Expect(o.clusterRole.Labels).To(Equal(addonLabels))
				g.Expect(o.clusterRole.Rules).To(Equal([]rbacv1.PolicyRule{
					{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
					{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
					{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
					{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
				}))
				g.Expect(o.clusterRoleBinding.Name).To(Equal(name))
				g.Expect(o.clusterRoleBinding.Namespace).To(BeEmpty())
				g.Expect(o.clusterRoleBinding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}))
				g.Expect(o.clusterRoleBinding.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "cluster-proxy", Namespace: ns}}))
				c := o.container()
				g.Expect(c.Args).To(Equal(append(baseArgs(testCluster, ns), "--service-proxy-port=7443", "--allowed-service=default/web:8080")))
				g.Expect(c.Ports).To(HaveLen(1), "the service-proxy is reached only through the tunnel: no container port")
			},
		},
		{
			name: "customizedVariables serviceDomain and enableImpersonation reach the service-proxy's flags",
			modify: func(in *AgentInput) {
				in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{CustomizedVariables: []addonv1alpha1.CustomizedVariable{
					{Name: "serviceDomain", Value: "svc.corp.example"}, {Name: "enableImpersonation", Value: "false"}, {Name: "unrelated", Value: "x"},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Args).To(Equal(append(baseArgs(testCluster, DefaultAgentNamespace),
					"--service-proxy-port=7443", "--service-domain=svc.corp.example", "--enable-impersonation=false")))
			},
		},
		{
			name: "an http proxy sets HTTP_PROXY and NO_PROXY with upper and lower case twins and leaves the trust bundle alone",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPProxy: " http://proxy.example.com:3128 "}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, summary *AgentSummary, o agentObjects) {
				g.Expect(o.container().Env).To(Equal(envOf(
					"HTTP_PROXY", "http://proxy.example.com:3128", "http_proxy", "http://proxy.example.com:3128",
					"NO_PROXY", defaultNoProxy, "no_proxy", defaultNoProxy,
				)))
				g.Expect(o.secret.Data["ca.crt"]).To(Equal(hub.CertPEM))
				g.Expect(summary.Proxy).To(Equal(proxyenv.Settings{HTTPProxy: "http://proxy.example.com:3128"}))
			},
		},
		{
			name: "an https proxy with a caBundle ships the proxy CA apart from the hub's, for the proxy hop only",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
					HTTPSProxy: "https://proxy.example.com:3129", CABundle: proxyCA.CertPEM,
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Env).To(Equal(envOf(
					"HTTPS_PROXY", "https://proxy.example.com:3129", "https_proxy", "https://proxy.example.com:3129",
					"NO_PROXY", defaultNoProxy, "no_proxy", defaultNoProxy,
				)))
				g.Expect(o.secret.Data).To(Equal(map[string][]byte{"ca.crt": hub.CertPEM, "proxy-ca.crt": proxyCA.CertPEM}),
					"the proxy's CA must never vouch for the proxy-server or the impersonator")
				g.Expect(o.container().Args).To(ContainElements("--ca-cert=/etc/ca/ca.crt", "--proxy-ca-cert=/etc/ca/proxy-ca.crt"))
			},
		},
		{
			name: "a caBundle with an http-scheme httpsProxy leaves the trust bundle unchanged",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
					HTTPSProxy: "http://proxy.example.com:3128", CABundle: proxyCA.CertPEM,
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Env).To(Equal(envOf(
					"HTTPS_PROXY", "http://proxy.example.com:3128", "https_proxy", "http://proxy.example.com:3128",
					"NO_PROXY", defaultNoProxy, "no_proxy", defaultNoProxy,
				)))
				g.Expect(o.secret.Data).To(Equal(map[string][]byte{"ca.crt": hub.CertPEM}))
				g.Expect(o.container().Args).NotTo(ContainElement(HavePrefix("--proxy-ca-cert")))
			},
		},
		{
			name: "an https-scheme httpProxy with a caBundle also trusts the proxy CA for the proxy hop",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
					HTTPProxy: "https://proxy.example.com", CABundle: proxyCA.CertPEM,
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.secret.Data).To(Equal(map[string][]byte{"ca.crt": hub.CertPEM, "proxy-ca.crt": proxyCA.CertPEM}))
				g.Expect(o.container().Args).To(ContainElement("--proxy-ca-cert=/etc/ca/proxy-ca.crt"))
			},
		},
		{
			name: "both proxies with a user noProxy: user entries first, then the kube-apiserver names and $(KUBERNETES_SERVICE_HOST); a user $ is escaped; credentials come from a Secret",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
					HTTPProxy:  "http://user:pa$s@proxy.example.com:3128",
					HTTPSProxy: "http://proxy.example.com:3128",
					NoProxy:    " internal.example.com, ,10.0.0.0/8,$HOME,KUBERNETES.default.svc",
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				noProxy := "internal.example.com,10.0.0.0/8,$$HOME,KUBERNETES.default.svc," +
					"kubernetes.default.svc.cluster.local,.svc,.cluster.local,localhost,127.0.0.1,$(KUBERNETES_SERVICE_HOST)"
				g.Expect(o.credentials).NotTo(BeNil(), "a proxy URL with credentials goes in a Secret")
				fromSecret := func(name, key string) corev1.EnvVar {
					return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: o.credentials.Name}, Key: key}}}
				}
				g.Expect(o.container().Env).To(Equal([]corev1.EnvVar{
					fromSecret("HTTP_PROXY", "HTTP_PROXY"), fromSecret("http_proxy", "HTTP_PROXY"),
					fromSecret("HTTPS_PROXY", "HTTPS_PROXY"), fromSecret("https_proxy", "HTTPS_PROXY"),
					{Name: "NO_PROXY", Value: noProxy}, {Name: "no_proxy", Value: noProxy},
				}))
				g.Expect(o.credentials.Data).To(Equal(map[string][]byte{
					"HTTP_PROXY": []byte("http://user:pa$s@proxy.example.com:3128"), "HTTPS_PROXY": []byte("http://proxy.example.com:3128"),
				}), "as they are: a Secret's values are not expanded")
				g.Expect(o.credentials.Namespace).To(Equal(o.deployment.Namespace))
				raw, err := json.Marshal(o.deployment)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(raw)).NotTo(ContainSubstring("pa$"), "the Deployment carries no password")
			},
		},
		{
			name: "agentInstallNamespace moves every namespaced object and changes the identifier suffix",
			modify: func(in *AgentInput) {
				in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{AgentInstallNamespace: "custom-agents"})
			},
			check: func(g Gomega, work *workv1.ManifestWork, summary *AgentSummary, o agentObjects) {
				const ns = "custom-agents"
				g.Expect(o.namespace.Name).To(Equal(ns))
				for _, meta := range o.namespaced() {
					g.Expect(meta.Namespace).To(Equal(ns), meta.Name)
				}
				g.Expect(o.roleBinding.Subjects[0].Namespace).To(Equal(ns))
				g.Expect(o.clusterRole.Name).To(Equal(impersonatorFmt + ns))
				g.Expect(o.clusterRoleBinding.Name).To(Equal(impersonatorFmt + ns))
				g.Expect(o.clusterRoleBinding.RoleRef.Name).To(Equal(impersonatorFmt + ns))
				// The existing add-on's binding of the name cluster-proxy-addon-agent-impersonator:<ns> refers to another
				// ClusterRole; a roleRef cannot change, so the work that takes over its agent must not name it.
				g.Expect(o.clusterRoleBinding.Name).NotTo(Equal("cluster-proxy-addon-agent-impersonator:" + ns))
				g.Expect(o.clusterRoleBinding.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "cluster-proxy", Namespace: ns}}))
				g.Expect(o.container().Args).To(ContainElement("--agent-identifiers=host=cluster1&host=cluster1.custom-agents"))
				g.Expect(o.container().Args).To(Equal(append(baseArgs(testCluster, ns), "--service-proxy-port=7443")))
				g.Expect(work.Spec.DeleteOption.SelectivelyOrphan.OrphaningRules).To(Equal([]workv1.OrphaningRule{{Resource: "namespaces", Name: ns}}))
				g.Expect(work.Spec.ManifestConfigs[0].ResourceIdentifier.Namespace).To(Equal(ns))
				g.Expect(work.Namespace).To(Equal(testCluster), "the work stays in the cluster namespace")
				g.Expect(summary.Namespace).To(Equal(ns))
			},
		},
		{
			name: "the AddOnDeploymentConfig nodePlacement wins over the configuration's per-cluster placement",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.AgentNodePlacements = map[string]proxyv1alpha1.NodePlacement{
					testCluster: {NodeSelector: map[string]string{"zone": "a"}, Tolerations: []corev1.Toleration{{Key: "mpc", Operator: corev1.TolerationOpExists}}},
				}
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{NodePlacement: &addonv1alpha1.NodePlacement{
					NodeSelector: map[string]string{"node-role.kubernetes.io/infra": ""},
					Tolerations:  []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				pod := o.deployment.Spec.Template.Spec
				g.Expect(pod.NodeSelector).To(Equal(map[string]string{"node-role.kubernetes.io/infra": ""}))
				g.Expect(pod.Tolerations).To(Equal([]corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}))
			},
		},
		{
			name: "without an AddOnDeploymentConfig the configuration's placement for this cluster is used",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.AgentNodePlacements = map[string]proxyv1alpha1.NodePlacement{
					"other":     {NodeSelector: map[string]string{"zone": "b"}},
					testCluster: {NodeSelector: map[string]string{"zone": "a"}, Tolerations: []corev1.Toleration{{Key: "mpc", Operator: corev1.TolerationOpExists}}},
				}
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				pod := o.deployment.Spec.Template.Spec
				g.Expect(pod.NodeSelector).To(Equal(map[string]string{"zone": "a"}))
				g.Expect(pod.Tolerations).To(Equal([]corev1.Toleration{{Key: "mpc", Operator: corev1.TolerationOpExists}}))
			},
		},
		{
			name: "an AddOnDeploymentConfig without nodePlacement falls back to the configuration's placement",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.AgentNodePlacements = map[string]proxyv1alpha1.NodePlacement{testCluster: {NodeSelector: map[string]string{"zone": "a"}}}
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{AgentInstallNamespace: "custom-agents"})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.deployment.Spec.Template.Spec.NodeSelector).To(Equal(map[string]string{"zone": "a"}))
			},
		},
		{
			name: "a placement for another cluster is not used",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.AgentNodePlacements = map[string]proxyv1alpha1.NodePlacement{"other": {NodeSelector: map[string]string{"zone": "b"}}}
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.deployment.Spec.Template.Spec.NodeSelector).To(BeEmpty())
			},
		},
		{
			name: "registries mirror the agent image with the first matching source",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{Registries: []addonv1alpha1.ImageMirror{
					{Source: "quay.io/other", Mirror: "mirror.local:5000/unused"},
					{Source: "quay.io/open-cluster-management", Mirror: "mirror.local:5000/ocm"},
					{Source: "quay.io", Mirror: "mirror.local:5000/too-late"},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, summary *AgentSummary, o agentObjects) {
				g.Expect(o.container().Image).To(Equal("mirror.local:5000/ocm/cluster-proxy:v0.5.0"))
				g.Expect(summary.Image).To(Equal("mirror.local:5000/ocm/cluster-proxy:v0.5.0"))
			},
		},
		{
			name: "resourceRequirements for deployments:cluster-proxy-proxy-agent:proxy-agent land on the container, last match wins",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ResourceRequirements: []addonv1alpha1.ContainerResourceRequirements{
					{ContainerID: "*:*:*", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}},
					{ContainerID: "deployments:cluster-proxy-proxy-agent:proxy-agent", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
					}},
					{ContainerID: "deployments:other:proxy-agent", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				r := o.container().Resources
				g.Expect(r.Requests).To(HaveLen(2))
				g.Expect(r.Requests.Cpu().String()).To(Equal("100m"))
				g.Expect(r.Requests.Memory().String()).To(Equal("64Mi"))
				g.Expect(r.Limits).To(HaveLen(1))
				g.Expect(r.Limits.Memory().String()).To(Equal("128Mi"))
			},
		},
		{
			name: "spec.proxyAgent.resources land on the container when no resourceRequirements entry matches it",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.Resources = configurationAgentResources()
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ResourceRequirements: []addonv1alpha1.ContainerResourceRequirements{
					{ContainerID: "deployments:other:proxy-agent", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Resources).To(Equal(*configurationAgentResources()))
			},
		},
		{
			name: "a matching resourceRequirements entry replaces spec.proxyAgent.resources as a whole",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.Resources = configurationAgentResources()
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ResourceRequirements: []addonv1alpha1.ContainerResourceRequirements{
					{ContainerID: "*:*:proxy-agent", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Resources).To(Equal(corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
				}), "the ADC's entry, not merged with the configuration's memory request or limit")
			},
		},
		{
			name: "imagePullSecrets, replicas and additionalArgs come from the configuration, additional args last",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.ImagePullSecrets = []string{"pull-a", "pull-b"}
				in.MPC.Spec.ProxyAgent.Replicas = 1
				in.MPC.Spec.ProxyAgent.AdditionalArgs = []string{"--v=4", "--keepalive-time=30s"}
				in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.deployment.Spec.Template.Spec.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "pull-a"}, {Name: "pull-b"}}))
				g.Expect(o.deployment.Spec.Replicas).To(HaveValue(Equal(int32(1))))
				want := append(baseArgs(testCluster, DefaultAgentNamespace), "--service-proxy-port=7443", "--v=4", "--keepalive-time=30s")
				g.Expect(o.container().Args).To(Equal(want))
			},
		},
		{
			name: "additionalServiceCAConfigMap is mounted read-only and optional from the agent namespace, and the service-proxy gets --service-ca-file",
			modify: func(in *AgentInput) {
				in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
				in.MPC.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
				in.MPC.Spec.ProxyAgent.AdditionalArgs = []string{"--v=2"}
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{AgentInstallNamespace: "custom-agents"})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				const ns = "custom-agents"
				g.Expect(o.deployment.Namespace).To(Equal(ns), "a pod's ConfigMap volume comes from the pod's namespace")
				pod := o.deployment.Spec.Template.Spec
				g.Expect(pod.Volumes).To(Equal([]corev1.Volume{
					{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cluster-proxy-ca"}}},
					{Name: "agent-cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert"}}},
					{Name: "hub-kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cluster-proxy-hub-kubeconfig"}}},
					{Name: "service-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "service-ca-bundle"},
						Items:                []corev1.KeyToPath{{Key: "service-ca.crt", Path: "service-ca.crt"}},
						Optional:             ptr.To(true),
					}}},
				}))
				c := o.container()
				g.Expect(c.VolumeMounts).To(Equal([]corev1.VolumeMount{
					{Name: "ca", MountPath: "/etc/ca", ReadOnly: true},
					{Name: "agent-cert", MountPath: "/etc/tls", ReadOnly: true},
					{Name: "hub-kubeconfig", MountPath: "/etc/hub", ReadOnly: true},
					{Name: "service-ca", MountPath: "/etc/service-ca", ReadOnly: true},
				}))
				g.Expect(c.Args).To(Equal(append(baseArgs(testCluster, ns),
					"--service-proxy-port=7443", "--service-ca-file=/etc/service-ca/service-ca.crt", "--v=2")), "additional args last")
			},
		},
		{
			name: "additionalServiceCAConfigMap without the service-proxy (no user-server) mounts nothing and adds no flag",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.deployment.Spec.Template.Spec.Volumes).To(HaveLen(3))
				g.Expect(o.container().VolumeMounts).To(HaveLen(3))
				g.Expect(o.container().Args).To(Equal(append(baseArgs(testCluster, DefaultAgentNamespace), "--service-proxy-port=0")))
			},
		},
		{
			name: "additionalServiceProxyArgs follow the service-proxy's own flags and come before additionalArgs",
			modify: func(in *AgentInput) {
				in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{
					AllowedServices: []proxyv1alpha1.AllowedService{{Namespace: "default", Name: "web", Port: 8080}},
				}
				in.MPC.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
				in.MPC.Spec.ProxyAgent.AdditionalServiceProxyArgs = []string{
					"--allowed-service=monitoring/prometheus:9090", "--service-domain=svc.override.example", "--v=4",
				}
				in.MPC.Spec.ProxyAgent.AdditionalArgs = []string{"--v=2", "--keepalive-time=30s"}
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{CustomizedVariables: []addonv1alpha1.CustomizedVariable{
					{Name: "serviceDomain", Value: "svc.corp.example"}, {Name: "enableImpersonation", Value: "false"},
				}})
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Args).To(Equal(append(baseArgs(testCluster, DefaultAgentNamespace),
					"--service-proxy-port=7443", "--allowed-service=default/web:8080", "--service-domain=svc.corp.example",
					"--enable-impersonation=false", "--service-ca-file=/etc/service-ca/service-ca.crt",
					"--allowed-service=monitoring/prometheus:9090", "--service-domain=svc.override.example", "--v=4",
					"--v=2", "--keepalive-time=30s")), "rendered service-proxy flags, then additionalServiceProxyArgs, then additionalArgs")
			},
		},
		{
			name: "additionalServiceProxyArgs without the service-proxy (no user-server) add nothing",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.AdditionalServiceProxyArgs = []string{"--service-domain=svc.override.example", "--v=4"}
				in.MPC.Spec.ProxyAgent.AdditionalArgs = []string{"--v=2"}
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Args).To(Equal(append(baseArgs(testCluster, DefaultAgentNamespace), "--service-proxy-port=0", "--v=2")))
			},
		},
		{
			name: "zero replicas are rendered as zero, not dropped",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyAgent.Replicas = 0
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.deployment.Spec.Replicas).To(HaveValue(Equal(int32(0))))
			},
		},
		{
			name: "the entrypoint port of the configuration is the proxy-server port",
			modify: func(in *AgentInput) {
				in.MPC.Spec.ProxyServer.Entrypoint.Port = 443
			},
			check: func(g Gomega, _ *workv1.ManifestWork, _ *AgentSummary, o agentObjects) {
				g.Expect(o.container().Args).To(ContainElement("--proxy-server-port=443"))
				g.Expect(o.container().Args).NotTo(ContainElement("--proxy-server-port=8091"))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := agentTestInput(t)
			if tc.modify != nil {
				tc.modify(&in)
			}
			work, summary, err := AgentWork(in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(work).NotTo(BeNil())
			g.Expect(summary).NotTo(BeNil())
			tc.check(g, work, summary, decodeAgentWork(g, work))
		})
	}
}

func TestAgentWorkForClusterNamesStartingWithADigit(t *testing.T) {
	for _, cluster := range []string{"1st-cluster", "0"} {
		t.Run(cluster, func(t *testing.T) {
			g := NewWithT(t)
			in := agentTestInput(t)
			in.Cluster = cluster
			in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
			in.MPC.Spec.ProxyAgent.AgentNodePlacements = map[string]proxyv1alpha1.NodePlacement{cluster: {NodeSelector: map[string]string{"zone": "a"}}}
			work, _, err := AgentWork(in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(work.Namespace).To(Equal(cluster))
			o := decodeAgentWork(g, work)
			g.Expect(o.names).To(HaveLen(8))
			for _, name := range o.names {
				g.Expect(name).NotTo(ContainSubstring(cluster), "object names must not derive from the cluster name")
			}
			g.Expect(o.container().Args).To(ContainElements(
				"--agent-identifiers=host="+cluster+"&host="+cluster+".open-cluster-management-cluster-proxy",
				"--cluster-name="+cluster,
			))
			g.Expect(o.deployment.Spec.Template.Spec.NodeSelector).To(Equal(map[string]string{"zone": "a"}))
		})
	}
}

func TestAgentWorkErrors(t *testing.T) {
	cases := []struct {
		name   string
		modify func(in *AgentInput)
		// field is the FieldError's Field; "" means the error must not be a FieldError.
		field, reason string
	}{
		{
			name:   "an unknown entrypoint is a plain error",
			modify: func(in *AgentInput) { in.EntrypointHost = "" },
		},
		{
			name: "an httpProxy with an unsupported scheme names spec.proxyConfig.httpProxy",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPProxy: "socks5://proxy.example.com:1080"}})
			},
			field: "spec.proxyConfig.httpProxy", reason: proxyv1alpha1.ReasonInvalidProxyURL,
		},
		{
			name: "an httpsProxy with an invalid port names spec.proxyConfig.httpsProxy",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPSProxy: "https://proxy.example.com:99999"}})
			},
			field: "spec.proxyConfig.httpsProxy", reason: proxyv1alpha1.ReasonInvalidProxyURL,
		},
		{
			name: "a caBundle that is not PEM names spec.proxyConfig.caBundle",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
					HTTPSProxy: "https://proxy.example.com", CABundle: []byte("not a certificate"),
				}})
			},
			field: "spec.proxyConfig.caBundle", reason: proxyv1alpha1.ReasonInvalidProxyCABundle,
		},
		{
			name: "a customized variable the agent cannot use names its entry",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{CustomizedVariables: []addonv1alpha1.CustomizedVariable{{Name: "serviceDomain", Value: "bad domain"}}})
			},
			field: "spec.customizedVariables[0].value", reason: proxyv1alpha1.ReasonInvalidCustomizedVariable,
		},
		{
			name: "a mirror with a scheme names its index",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{Registries: []addonv1alpha1.ImageMirror{
					{Source: "docker.io", Mirror: "mirror.local"},
					{Source: "quay.io/open-cluster-management", Mirror: "https://mirror.local/ocm"},
				}})
			},
			field: "spec.registries[1].mirror", reason: proxyv1alpha1.ReasonInvalidRegistryMirror,
		},
		{
			name: "an empty registry source names its index",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{Registries: []addonv1alpha1.ImageMirror{{Mirror: "mirror.local"}}})
			},
			field: "spec.registries[0].source", reason: proxyv1alpha1.ReasonInvalidRegistryMirror,
		},
		{
			name: "a malformed containerID names spec.resourceRequirements[0].containerID",
			modify: func(in *AgentInput) {
				withADC(in, addonv1alpha1.AddOnDeploymentConfigSpec{ResourceRequirements: []addonv1alpha1.ContainerResourceRequirements{{ContainerID: "proxy-agent"}}})
			},
			field: "spec.resourceRequirements[0].containerID", reason: proxyv1alpha1.ReasonInvalidResourceRequirements,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := agentTestInput(t)
			tc.modify(&in)
			work, summary, err := AgentWork(in)
			g.Expect(err).To(HaveOccurred())
			g.Expect(work).To(BeNil())
			g.Expect(summary).To(BeNil())
			var fe *proxyenv.FieldError
			if tc.field == "" {
				g.Expect(errors.As(err, &fe)).To(BeFalse(), "got a FieldError: %v", err)
				return
			}
			g.Expect(errors.As(err, &fe)).To(BeTrue(), "not a FieldError: %v", err)
			g.Expect(fe.Field).To(Equal(tc.field))
			g.Expect(fe.Reason).To(Equal(tc.reason))
		})
	}
}

func TestAgentWorkIsDeterministic(t *testing.T) {
	g := NewWithT(t)
	_, proxyCA := hubAndProxyCA(t)
	in := agentTestInput(t)
	in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
	in.MPC.Spec.ProxyAgent.ImagePullSecrets = []string{"pull"}
	in.MPC.Spec.ProxyAgent.AdditionalArgs = []string{"--v=2"}
	withADC(&in, addonv1alpha1.AddOnDeploymentConfigSpec{
		AgentInstallNamespace: "custom-agents",
		NodePlacement: &addonv1alpha1.NodePlacement{
			NodeSelector: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"},
			Tolerations:  []corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists}},
		},
		Registries: []addonv1alpha1.ImageMirror{{Source: "quay.io", Mirror: "mirror.local"}},
		ProxyConfig: addonv1alpha1.ProxyConfig{
			HTTPProxy: "http://proxy.example.com", HTTPSProxy: "https://proxy.example.com", NoProxy: "a,b,c", CABundle: proxyCA.CertPEM,
		},
		ResourceRequirements: []addonv1alpha1.ContainerResourceRequirements{{ContainerID: "*:*:*", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		}}},
	})
	first, _, err := AgentWork(in)
	g.Expect(err).NotTo(HaveOccurred())
	for range 5 {
		again, _, err := AgentWork(in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again.Spec.Workload.Manifests).To(HaveLen(len(first.Spec.Workload.Manifests)))
		for i := range first.Spec.Workload.Manifests {
			g.Expect(string(again.Spec.Workload.Manifests[i].Raw)).To(Equal(string(first.Spec.Workload.Manifests[i].Raw)), "manifest %d", i)
		}
		g.Expect(again).To(Equal(first))
	}
}

func TestAgentCertificateSubject(t *testing.T) {
	hub, proxyCA := hubAndProxyCA(t)
	fp := certs.Fingerprint(hub.Cert)
	other := certs.Fingerprint(proxyCA.Cert)
	hexPart := strings.TrimPrefix(fp, "SHA256:")

	cases := []struct {
		name, cluster, fingerprint string
		want                       contract.AgentSubject
	}{
		{
			name: "CN is the prefix and the cluster, OU names the first 16 hex digits of the signer", cluster: "cluster1", fingerprint: fp,
			want: contract.AgentSubject{
				CommonName:          "open-cluster-management:cluster-proxy:agent:cluster1",
				Organizations:       []string{"open-cluster-management:cluster-proxy"},
				OrganizationalUnits: []string{"signer-" + hexPart[:16], "agent-namespace:open-cluster-management-cluster-proxy"},
			},
		},
		{
			name: "a literal fingerprint", cluster: "1st-cluster", fingerprint: "SHA256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			want: contract.AgentSubject{
				CommonName:          "open-cluster-management:cluster-proxy:agent:1st-cluster",
				Organizations:       []string{"open-cluster-management:cluster-proxy"},
				OrganizationalUnits: []string{"signer-0123456789abcdef", "agent-namespace:open-cluster-management-cluster-proxy"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(contract.AgentCertificateSubject(tc.cluster, DefaultAgentNamespace, tc.fingerprint)).To(Equal(tc.want))
		})
	}

	t.Run("a new signer changes the OU and nothing else", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(other).NotTo(Equal(fp))
		before, after := contract.AgentCertificateSubject("cluster1", "ns", fp), contract.AgentCertificateSubject("cluster1", "ns", other)
		g.Expect(after.OrganizationalUnits).NotTo(Equal(before.OrganizationalUnits))
		g.Expect(after.OrganizationalUnits).To(Equal([]string{"signer-" + strings.TrimPrefix(other, "SHA256:")[:16], "agent-namespace:ns"}))
		g.Expect(after.CommonName).To(Equal(before.CommonName))
		g.Expect(after.Organizations).To(Equal(before.Organizations))
	})
}

func TestAgentNamespaceOfUnits(t *testing.T) {
	g := NewWithT(t)
	ns, ok := contract.AgentNamespaceOfUnits(contract.AgentCertificateSubject("c1", "agents", "SHA256:00").OrganizationalUnits)
	g.Expect(ok).To(BeTrue())
	g.Expect(ns).To(Equal("agents"))
	_, ok = contract.AgentNamespaceOfUnits([]string{"signer-00", "agent-namespace:"})
	g.Expect(ok).To(BeFalse(), "an empty namespace names nothing")
	_, ok = contract.AgentNamespaceOfUnits(nil)
	g.Expect(ok).To(BeFalse())
}

func TestClusterOfAgentCommonName(t *testing.T) {
	roundTrip := []string{"cluster1", "1st-cluster", "0", "local-cluster"}
	for _, cluster := range roundTrip {
		t.Run("round-trips "+cluster, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := contract.ClusterOfAgentCommonName(contract.AgentCertificateSubject(cluster, "ns", "SHA256:00").CommonName)
			g.Expect(ok).To(BeTrue())
			g.Expect(got).To(Equal(cluster))
		})
	}
	rejected := []struct{ name, cn string }{
		{"the bare prefix", "open-cluster-management:cluster-proxy:agent:"},
		{"the prefix without its trailing colon", "open-cluster-management:cluster-proxy:agent"},
		{"an empty common name", ""},
		{"a hub user", "system:serviceaccount:open-cluster-management-cluster-proxy:cluster-proxy"},
		{"another add-on's agent", "system:open-cluster-management:cluster1:agent"},
		{"the prefix in another case", "Open-Cluster-Management:cluster-proxy:agent:cluster1"},
		{"the prefix not at the start", "x" + contract.AgentCommonNamePrefix + "cluster1"},
	}
	for _, tc := range rejected {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			_, ok := contract.ClusterOfAgentCommonName(tc.cn)
			NewWithT(t).Expect(ok).To(BeFalse())
		})
	}
}

func TestServiceCAConfigMapAloneDoesNotChangeTheAgentWork(t *testing.T) {
	g := NewWithT(t)
	in := agentTestInput(t)
	without, _, err := AgentWork(in)
	g.Expect(err).NotTo(HaveOccurred())
	in.MPC.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
	with, _, err := AgentWork(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(with).To(Equal(without), "without the service-proxy nothing reads the CAs: no volume, no flag, no rollout")
}

func TestServiceProxyFieldsAloneDoNotChangeTheAgentWork(t *testing.T) {
	cases := []struct {
		name   string
		modify func(agent *proxyv1alpha1.ManagedProxyConfigurationProxyAgent)
	}{
		{
			name: "additionalServiceProxyArgs",
			modify: func(agent *proxyv1alpha1.ManagedProxyConfigurationProxyAgent) {
				agent.AdditionalServiceProxyArgs = []string{"--allowed-service=monitoring/prometheus:9090", "--v=4"}
			},
		},
		{
			name: "additionalServiceProxyArgs and additionalServiceCAConfigMap",
			modify: func(agent *proxyv1alpha1.ManagedProxyConfigurationProxyAgent) {
				agent.AdditionalServiceProxyArgs = []string{"--service-domain=svc.override.example", "--service-ca-file=/etc/other/ca.crt"}
				agent.AdditionalServiceCAConfigMap = "service-ca-bundle"
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := agentTestInput(t)
			in.MPC.Spec.ProxyAgent.AdditionalArgs = []string{"--v=2"}
			without, _, err := AgentWork(in)
			g.Expect(err).NotTo(HaveOccurred())
			tc.modify(&in.MPC.Spec.ProxyAgent)
			with, _, err := AgentWork(in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(with).To(Equal(without), "without the service-proxy its flags are not rendered: the same work, no rollout")
		})
	}
}

func TestAgentDeploymentLabelsAreThoseOfTheRenderedDeployment(t *testing.T) {
	g := NewWithT(t)
	in := agentTestInput(t)
	withADC(&in, addonv1alpha1.AddOnDeploymentConfigSpec{AgentInstallNamespace: "custom-agents"})
	work, _, err := AgentWork(in)
	g.Expect(err).NotTo(HaveOccurred())
	d := decodeAgentWork(g, work).deployment
	g.Expect(d.Labels).To(Equal(AgentDeploymentLabels()))
	g.Expect(d.Spec.Selector.MatchLabels).To(Equal(AgentDeploymentLabels()), "the launcher's selector finds it")
	g.Expect(d.Spec.Template.Labels).To(Equal(AgentDeploymentLabels()))
}

func TestAgentsOfThePortForwardEntrypointDialTheProxyServerPodsByPortForward(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil) // no entrypoint: PortForward
	m.Spec.ProxyServer.Namespace = "hub"
	args := AgentArgs(AgentInput{MPC: m, Cluster: "c1", EntrypointHost: EntrypointHost(m, "")}, "ns", proxyenv.Settings{}, proxyenv.AgentVariables{})
	g.Expect(args).To(ContainElements("--proxy-server-host=127.0.0.1", "--port-forward-namespace=hub",
		"--port-forward-selector="+proxyv1alpha1.ComponentLabel+"=proxy-server,"+ConfigurationLabel+"=cluster-proxy",
		"--port-forward-port=8091"))
	_, binding := PortForwardRBAC(m, nil)
	g.Expect(binding.Subjects).To(ConsistOf(HaveField("Name", csrreview.AllAgentsGroup)), "the group the agents' hub identities carry")

	m.Spec.ProxyServer.Entrypoint = &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
		Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: "hub.example.com"}}
	args = AgentArgs(AgentInput{MPC: m, Cluster: "c1", EntrypointHost: EntrypointHost(m, "")}, "ns", proxyenv.Settings{}, proxyenv.AgentVariables{})
	g.Expect(args).NotTo(ContainElement(HavePrefix("--port-forward")))
}

func TestAgentsMayPortForwardToTheProxyServerPodsOnly(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.ProxyServer.Namespace = "hub"
	find := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}
	role, _ := PortForwardRBAC(m, []string{"cluster-proxy-b", "cluster-proxy-a", "cluster-proxy-b"})
	g.Expect(role.Namespace).To(Equal("hub"))
	g.Expect(role.Rules).To(Equal([]rbacv1.PolicyRule{find, {APIGroups: []string{""}, Resources: []string{"pods/portforward"},
		ResourceNames: []string{"cluster-proxy-a", "cluster-proxy-b"}, Verbs: []string{"create"}}}))
	role, _ = PortForwardRBAC(m, nil)
	g.Expect(role.Rules).To(Equal([]rbacv1.PolicyRule{find}), "no pod yet: no port-forward at all, never one to any pod")
}

// New credentials are a new Secret name, so the agents roll to read them (a container reads its env at start).
func TestTheCredentialsSecretIsNamedByItsContent(t *testing.T) {
	g := NewWithT(t)
	a := proxyCredentials("ns", proxyenv.Settings{HTTPSProxy: "https://u:one@proxy.example.com"})
	b := proxyCredentials("ns", proxyenv.Settings{HTTPSProxy: "https://u:two@proxy.example.com"})
	g.Expect(a.Name).To(HavePrefix(AgentProxyCredentialsPrefix))
	g.Expect(a.Name).NotTo(Equal(b.Name))
	g.Expect(proxyCredentials("ns", proxyenv.Settings{HTTPSProxy: "https://u:one@proxy.example.com"}).Name).To(Equal(a.Name))
	g.Expect(proxyenv.Settings{HTTPSProxy: "https://proxy.example.com"}.HasCredentials()).To(BeFalse())
	g.Expect(proxyenv.Settings{HTTPProxy: "http://u@proxy.example.com"}.HasCredentials()).To(BeTrue())
}

// configurationAgentResources are a configuration's spec.proxyAgent.resources in the tests that read them.
func configurationAgentResources() *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("96Mi")},
	}
}
