package render

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

func mpc(entrypoint *proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint) *proxyv1alpha1.ManagedProxyConfiguration {
	m := &proxyv1alpha1.ManagedProxyConfiguration{}
	m.Name = "cluster-proxy"
	m.Spec.ProxyServer = proxyv1alpha1.ManagedProxyConfigurationProxyServer{Image: "img", Replicas: 3, Entrypoint: entrypoint}
	return m
}

func TestEntrypointHost(t *testing.T) {
	cases := []struct {
		name       string
		entrypoint *proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint
		lb, want   string
	}{
		{"hostname", &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: "hub.example.com"}}, "", "hub.example.com"},
		{"load balancer, known", &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypeLoadBalancerService}, "lb.example.com", "lb.example.com"},
		{"load balancer, pending", &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypeLoadBalancerService}, "", ""},
		{"port forward", &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypePortForward}, "", "127.0.0.1"},
		{"unset means port forward", nil, "", "127.0.0.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(EntrypointHost(mpc(tc.entrypoint), tc.lb)).To(Equal(tc.want))
		})
	}
}

func TestLoadBalancerAddressPrefersHostname(t *testing.T) {
	g := NewWithT(t)
	svc := &corev1.Service{}
	g.Expect(LoadBalancerAddress(svc)).To(BeEmpty())
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1", Hostname: "lb.example.com"}}
	g.Expect(LoadBalancerAddress(svc)).To(Equal("lb.example.com"))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}}
	g.Expect(LoadBalancerAddress(svc)).To(Equal("203.0.113.1"))
}

func TestPortsDefaultAndOverride(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	g.Expect(contract.PortsOf(m)).To(Equal(contract.Ports{ProxyServer: 8090, AgentServer: 8091, HealthServer: 8092, AdminServer: 8095, HTTPConnectServer: 8094}))
	m.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{AgentServer: 9443}}
	g.Expect(contract.PortsOf(m)).To(Equal(contract.Ports{ProxyServer: 8090, AgentServer: 9443, HealthServer: 8092, AdminServer: 8095, HTTPConnectServer: 8094}))
	g.Expect(ServerArgs(m)).To(ContainElements("--agent-port=9443", "--server-port=8090", "--server-count=3", "--http-connect-port=8094"))
	g.Expect(InClusterService(m).Spec.Ports[1].Port).To(Equal(int32(9443)))
	m.Spec.Deploy.Ports.HTTPConnectServer = 18094
	g.Expect(ServerArgs(m)).To(ContainElement("--http-connect-port=18094"))
	g.Expect(InClusterService(m).Spec.Ports[2]).To(And(HaveField("Name", "http-connect"), HaveField("Port", int32(18094))))
}

func TestAllowedServiceArgs(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	g.Expect(AllowedServiceArgs(m)).To(BeEmpty(), "no user-server, nothing allowed")
	m.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{AllowedServices: []proxyv1alpha1.AllowedService{
		{Namespace: "default", Name: "web", Port: 8080}, {Namespace: "monitoring", Name: "prometheus"},
	}}
	want := []string{"--allowed-service=default/web:8080", "--allowed-service=monitoring/prometheus"}
	g.Expect(AllowedServiceArgs(m)).To(Equal(want))
	g.Expect(ServerArgs(m)).To(ContainElements(want))

	// A service that authenticates its callers: the user-server, which checks tokens, is told; agents are not, so
	// agents of every release read their arguments.
	m.Spec.UserServer.AllowedServices[1].CallerAuthentication = proxyv1alpha1.CallerAuthenticationService
	g.Expect(AllowedServiceArgs(m)).To(Equal(want))
	g.Expect(ServerArgs(m)).To(ContainElements("--allowed-service=default/web:8080", "--allowed-service=monitoring/prometheus,token=optional"))
}

func TestServerHubRBACGrantsReviewsTheFrontProxyCAAndStatusesToTheServersOnly(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.ProxyServer.Namespace = "hub"
	objs := ServerHubRBAC(m)
	g.Expect(objs).To(HaveLen(3))
	server := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: ServerServiceAccountName, Namespace: "hub"}
	roles := map[string]bool{}
	for _, o := range objs {
		g.Expect(o.GetOwnerReferences()).To(HaveLen(1))
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			g.Expect(b.Subjects).To(Equal([]rbacv1.Subject{server}))
			roles[b.RoleRef.Name] = true
		case *rbacv1.ClusterRole:
			g.Expect(b.Rules).To(Equal([]rbacv1.PolicyRule{
				{APIGroups: []string{"proxy.open-cluster-management.io"}, Resources: []string{"clusterproxystatuses"},
					Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"},
					ResourceNames: []string{"extension-apiserver-authentication"}, Verbs: []string{"get", "list", "watch"}},
			}), "read-only, the front proxy's CA by name")
		default:
			t.Errorf("%T %s: the servers' hub rights are cluster roles and their bindings only (none in kube-system)", o, o.GetName())
		}
	}
	g.Expect(roles).To(HaveKey("system:auth-delegator"))
	g.Expect(ServerDeployment(m).Spec.Template.Spec.AutomountServiceAccountToken).To(HaveValue(BeTrue()))
	g.Expect(ServerServiceAccount(m).AutomountServiceAccountToken).To(HaveValue(BeFalse()), "only the pods that need it mount the token")
}

func TestGatewayAPIServiceNamesTheUserServerServiceAndTrustsTheBundle(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.ProxyServer.Namespace = "hub"
	a := GatewayAPIService(m, []byte("bundle"))
	g.Expect(a.Name).To(Equal("v1alpha1.gateway.proxy.open-cluster-management.io"))
	g.Expect(a.Spec.Group).To(Equal("gateway.proxy.open-cluster-management.io"))
	g.Expect(a.Spec.Service.Namespace).To(Equal("hub"))
	g.Expect(a.Spec.Service.Name).To(Equal(proxyv1alpha1.UserServerServiceName))
	g.Expect(*a.Spec.Service.Port).To(Equal(int32(9443)))
	g.Expect(a.Spec.CABundle).To(Equal([]byte("bundle")))
	g.Expect(UserServerService(m).Spec.Ports).To(ContainElement(And(HaveField("Name", "gateway"), HaveField("Port", int32(9443)))))
	g.Expect(ServerArgs(m)).To(ContainElements("--gateway-port=9443", "--gateway-cert=/etc/user-server-pki/tls.crt",
		"--gateway-key=/etc/user-server-pki/tls.key"), "served with the certificate that names the user-server Service")
}

func TestTheSignerSecretOutlivesTheConfiguration(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.UID = "uid-1"
	m.Spec.ProxyServer.Namespace = "hub"
	s := SignerSecret(m, proxyv1alpha1.SignerSecretName, map[string][]byte{"ca.crt": []byte("cert")}, map[string]string{"a": "b"})
	g.Expect(s.OwnerReferences).To(BeEmpty(), "no owner reference: the garbage collector would delete the CA with the configuration")
	g.Expect(s.Labels).To(Equal(Labels(m)), "labelled, so the manager's cache holds it")
	g.Expect(s.Namespace).To(Equal("hub"))
	g.Expect(s.Annotations).To(Equal(map[string]string{"a": "b"}))
	g.Expect(CABundleSecret(m, []byte("cert")).OwnerReferences).To(HaveLen(1), "the bundle is re-published from the kept CA")
}

func TestSplitSANs(t *testing.T) {
	dns, ips := SplitSANs("b.example.com", "10.0.0.1", "", "a.example.com", "::1", "b.example.com")
	g := NewWithT(t)
	g.Expect(dns).To(Equal([]string{"a.example.com", "b.example.com"}))
	g.Expect(ips).To(Equal([]string{"10.0.0.1", "::1"}))
}

func TestHubCertificates(t *testing.T) {
	g := NewWithT(t)
	m := mpc(&proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypeLoadBalancerService})
	m.Spec.ProxyServer.Namespace = "hub"
	m.Spec.Authentication.Signer.SelfSigned = &proxyv1alpha1.AuthenticationSelfSigned{AdditionalSANs: []string{"extra.example.com"}}
	m.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{AdditionalSANs: []string{"users.example.com"}}
	byName := map[string]*proxyv1alpha1.ProxyCertificate{}
	for _, hc := range HubCertificates(m, "203.0.113.5") {
		byName[hc.Certificate.Spec.SecretName] = hc.Certificate
		g.Expect(hc.Certificate.Spec.IssuerRef.Name).To(Equal("cluster-proxy"))
	}
	g.Expect(byName).To(HaveLen(5))
	impersonator := byName["cluster-proxy-impersonator"].Spec
	g.Expect(impersonator.CommonName).To(Equal(contract.ImpersonatorCommonName))
	g.Expect(impersonator.Usages).To(Equal([]proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageClientAuth}))
	g.Expect(impersonator.DNSNames).To(BeEmpty())
	g.Expect(ServerArgs(m)).To(ContainElements("--impersonator-cert=/etc/impersonator-pki/tls.crt", "--impersonator-key=/etc/impersonator-pki/tls.key"))
	server := byName["agent-server"].Spec
	g.Expect(server.DNSNames).To(ConsistOf("proxy-entrypoint", "proxy-entrypoint.hub", "proxy-entrypoint.hub.svc", "localhost", "extra.example.com"))
	g.Expect(server.IPAddresses).To(ConsistOf("127.0.0.1", "203.0.113.5"))
	g.Expect(server.Usages).To(Equal([]proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageServerAuth}))
	g.Expect(byName["proxy-client"].Spec.Usages).To(Equal([]proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageClientAuth}))
	g.Expect(byName["cluster-proxy-user-serving-cert"].Spec.DNSNames).To(ContainElements("cluster-proxy-addon-user.hub.svc", "users.example.com"))
}

func TestSeveralServerReplicasWaitForTheirPeersAgentsAndRollOneAtATime(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.ProxyServer.Namespace = "hub"
	d := ServerDeployment(m)
	g.Expect(ServerArgs(m)).To(ContainElements("--peer-address=proxy-entrypoint.hub.svc:8094",
		"--peer-cert=/etc/proxy-client-pki/tls.crt", "--peer-key=/etc/proxy-client-pki/tls.key"))
	g.Expect(d.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", "proxy-client")))
	g.Expect(d.Spec.Template.Spec.Containers[0].VolumeMounts).To(ContainElement(HaveField("MountPath", "/etc/proxy-client-pki")))
	g.Expect(d.Spec.Strategy.RollingUpdate).NotTo(BeNil())
	g.Expect(d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue()).To(Equal(0), "a surge replica would get no agents")
	g.Expect(d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue()).To(Equal(1))
	g.Expect(d.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds).To(BeEquivalentTo(2),
		"the roll moves on soon after a new replica holds every cluster")
	lb := LoadBalancerService(mpc(&proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypeLoadBalancerService}))
	g.Expect(lb.Spec.PublishNotReadyAddresses).To(BeTrue(), "agents reach a replica before it is Ready")
	g.Expect(InClusterService(m).Spec.PublishNotReadyAddresses).To(BeFalse(), "clients reach Ready replicas only")
	g.Expect(UserServerService(m).Spec.PublishNotReadyAddresses).To(BeFalse())

	m.Spec.ProxyServer.Replicas = 1
	g.Expect(ServerArgs(m)).NotTo(ContainElement(HavePrefix("--peer-address")), "one replica has no peer")
	g.Expect(ServerDeployment(m).Spec.Strategy).To(BeZero(), "one replica keeps the default surge")
}
