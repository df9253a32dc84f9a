package controllers_test

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/extendedspec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/addontypes"
)

var _ = Describe("ManagedProxyConfiguration", func() {
	It("creates every hub object with the right content", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.ProxyServer.AdditionalArgs = []string{"--keepalive-time=30s"}
			m.Spec.ProxyServer.NodePlacement = proxyv1alpha1.NodePlacement{
				NodeSelector: map[string]string{"node-role.kubernetes.io/infra": ""},
				Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}},
			}
			m.Spec.Authentication.Signer.SelfSigned = &proxyv1alpha1.AuthenticationSelfSigned{AdditionalSANs: []string{"extra.example.com", "10.0.0.7"}}
			m.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{AdditionalSANs: []string{"users.example.com"}}
		})
		createMPC(mpc)
		ns, host := mpc.Spec.ProxyServer.Namespace, mpc.Spec.ProxyServer.Entrypoint.Hostname.Value
		expectReady(mpc)

		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			g.Expect(live.Status.Entrypoint).To(Equal(host + ":8091"))
			for _, t := range []string{proxyv1alpha1.ConditionProxyServerDeployed, proxyv1alpha1.ConditionProxyServerSecretSigned,
				proxyv1alpha1.ConditionAgentServerSecretSigned, proxyv1alpha1.ConditionProxyClientSecretSigned,
				proxyv1alpha1.ConditionUserServerSecretSigned, proxyv1alpha1.ConditionSignerReady, proxyv1alpha1.ConditionEntrypointReady} {
				c := condition(g, mpc, t)
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), t)
				g.Expect(c.ObservedGeneration).To(Equal(live.Generation), t)
			}
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionProxyServerSecretSigned).Reason).To(Equal(proxyv1alpha1.ReasonSuccessfullySigned))
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionProxyServerSecretSigned).Message).To(HavePrefix("Expiry: "))
		}, timeout, interval).Should(Succeed())

		g := Default
		get(g, &corev1.Namespace{}, "", ns)
		sa := get(g, &corev1.ServiceAccount{}, ns, "cluster-proxy")
		Expect(*sa.AutomountServiceAccountToken).To(BeFalse())

		svc := get(g, &corev1.Service{}, ns, "proxy-entrypoint")
		Expect(svc.Spec.Ports).To(ConsistOf(
			HaveField("Port", int32(8090)), HaveField("Port", int32(8091)), HaveField("Port", int32(8094))))
		Expect(svc.Spec.Selector).To(HaveKeyWithValue(proxyv1alpha1.ComponentLabel, proxyv1alpha1.ComponentProxyServer))
		user := get(g, &corev1.Service{}, ns, "cluster-proxy-addon-user")
		Expect(user.Spec.Ports).To(ConsistOf(HaveField("Port", int32(9092)), HaveField("Port", int32(9443))), "the user-server and the aggregated API")

		dep := get(g, &appsv1.Deployment{}, ns, mpc.Name)
		Expect(*dep.Spec.Replicas).To(Equal(int32(2)))
		pod := dep.Spec.Template.Spec
		Expect(pod.NodeSelector).To(Equal(mpc.Spec.ProxyServer.NodePlacement.NodeSelector))
		Expect(pod.Tolerations).To(Equal(mpc.Spec.ProxyServer.NodePlacement.Tolerations))
		Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
		Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		Expect(pod.Containers).To(HaveLen(1))
		c := pod.Containers[0]
		Expect(c.Image).To(Equal("example.com/cluster-proxy:test"))
		Expect(c.Args).To(ContainElements("--server-count=2", "--proxy-strategies=destHost", "--server-port=8090", "--agent-port=8091",
			"--health-port=8092", "--admin-port=8095", "--keepalive-time=30s"))
		Expect(c.Args[len(c.Args)-1]).To(Equal("--keepalive-time=30s"), "additionalArgs come last so they can override")
		Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
		Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
		Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
		var volumeSecrets, volumeConfigMaps []string
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				volumeSecrets = append(volumeSecrets, v.Secret.SecretName)
			}
			if v.ConfigMap != nil {
				volumeConfigMaps = append(volumeConfigMaps, v.ConfigMap.Name)
			}
		}
		// proxy-client: the certificate a new replica asks its peers with; the impersonator: the one hub users are sent
		// to agents with.
		Expect(volumeSecrets).To(ConsistOf("proxy-server-ca", "proxy-server", "agent-server", "cluster-proxy-user-serving-cert",
			"proxy-client", "cluster-proxy-impersonator"))
		Expect(volumeConfigMaps).To(ConsistOf(mpc.Name + "-tls-profile"))

		bundle := get(g, &corev1.Secret{}, ns, "proxy-server-ca")
		bundleCerts, err := certs.ParseCertificates(bundle.Data["ca.crt"])
		Expect(err).NotTo(HaveOccurred())
		Expect(bundleCerts).To(HaveLen(1))
		signer := get(g, &corev1.Secret{}, ns, "cluster-proxy-signer")
		Expect(signer.Data["ca.crt"]).To(Equal(bundle.Data["ca.crt"]))

		roots := x509.NewCertPool()
		roots.AddCert(bundleCerts[0])
		verify := func(secretName string, usage x509.ExtKeyUsage, dnsName string) *x509.Certificate {
			s := get(g, &corev1.Secret{}, ns, secretName)
			Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
			Expect(s.Data["ca.crt"]).To(Equal(bundle.Data["ca.crt"]))
			leaf := leafOf(g, s)
			_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: fakeClock.Now(), KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: dnsName})
			Expect(err).NotTo(HaveOccurred(), secretName)
			return leaf
		}
		server := verify("proxy-server", x509.ExtKeyUsageServerAuth, "proxy-entrypoint."+ns+".svc")
		Expect(server.DNSNames).To(ContainElements("proxy-entrypoint."+ns, "proxy-entrypoint."+ns+".svc", "localhost", host, "extra.example.com"))
		Expect(fmt.Sprint(server.IPAddresses)).To(And(ContainSubstring("127.0.0.1"), ContainSubstring("10.0.0.7")))
		agent := verify("agent-server", x509.ExtKeyUsageServerAuth, host)
		Expect(agent.DNSNames).To(ContainElement(host))
		proxyClient := verify("proxy-client", x509.ExtKeyUsageClientAuth, "")
		Expect(proxyClient.ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
		userCert := verify("cluster-proxy-user-serving-cert", x509.ExtKeyUsageServerAuth, "cluster-proxy-addon-user."+ns+".svc")
		Expect(userCert.DNSNames).To(ContainElement("users.example.com"))

		pcs := &proxyv1alpha1.ProxyCertificateList{}
		Expect(k8s.List(ctx(), pcs, client.InNamespace(ns))).To(Succeed())
		Expect(pcs.Items).To(HaveLen(5), "proxy-server, agent-server, proxy-client, the user-server and the impersonator")
		for _, pc := range pcs.Items {
			Expect(pc.Status.IssuerFingerprint).To(Equal(certs.Fingerprint(bundleCerts[0])))
			Expect(pc.Status.SerialNumber).NotTo(BeEmpty())
			Expect(pc.Status.RenewalTime.Time).To(BeTemporally(">", pc.Status.NotBefore.Time))
			Expect(pc.Status.RenewalTime.Time).To(BeTemporally("<", pc.Status.NotAfter.Time))
		}
	})

	It("uses a proxy-server namespace someone else created, found on the API server, without trying to create it", func() {
		mpc := newMPC()
		// Helm's release namespace, say: it carries no label of the operator's, so the manager's cache does not hold it.
		Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mpc.Spec.ProxyServer.Namespace}})).To(Succeed())
		expectQuiet()
		before := requests.WritesTo("namespaces")
		createMPC(mpc)
		expectReady(mpc)
		expectQuiet()
		Expect(requests.WritesTo("namespaces")).To(Equal(before), "no create answered AlreadyExists")
	})

	It("honours deploy.ports on the Services, the Deployment and the command line", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{
				ProxyServer: 18090, AgentServer: 18091, HealthServer: 18092, AdminServer: 18095, HTTPConnectServer: 18094}}
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		svc := get(Default, &corev1.Service{}, ns, "proxy-entrypoint")
		Expect(svc.Spec.Ports).To(ConsistOf(
			And(HaveField("Name", "proxy-server"), HaveField("Port", int32(18090)), HaveField("TargetPort", intstr.FromInt32(18090))),
			And(HaveField("Name", "agent-server"), HaveField("Port", int32(18091)), HaveField("TargetPort", intstr.FromInt32(18091))),
			And(HaveField("Name", "http-connect"), HaveField("Port", int32(18094)), HaveField("TargetPort", intstr.FromInt32(18094)))))
		c := get(Default, &appsv1.Deployment{}, ns, mpc.Name).Spec.Template.Spec.Containers[0]
		Expect(c.Args).To(ContainElements("--server-port=18090", "--agent-port=18091", "--health-port=18092", "--admin-port=18095", "--http-connect-port=18094"))
		Expect(c.Ports).To(ContainElements(HaveField("ContainerPort", int32(18090)), HaveField("ContainerPort", int32(18091))))
		Expect(c.ReadinessProbe.HTTPGet.Port).To(Equal(intstr.FromInt32(18092)))
	})

	It("keeps a PodDisruptionBudget for the proxy-servers, spreads them over nodes and sizes them from spec.proxyServer.resources", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.ProxyServer.NodePlacement = proxyv1alpha1.NodePlacement{NodeSelector: map[string]string{"node-role.kubernetes.io/infra": ""}}
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)

		By("a PodDisruptionBudget owned by the configuration selects exactly the Deployment's pods")
		dep := get(Default, &appsv1.Deployment{}, ns, mpc.Name)
		pdb := get(Default, &policyv1.PodDisruptionBudget{}, ns, mpc.Name)
		Expect(metav1.IsControlledBy(pdb, live)).To(BeTrue(), "%v", pdb.OwnerReferences)
		Expect(pdb.Spec.Selector).To(Equal(dep.Spec.Selector))
		Expect(pdb.Spec.MaxUnavailable).To(HaveValue(Equal(intstr.FromInt32(1))))
		Expect(pdb.Spec.MinAvailable).To(BeNil())

		By("the pods spread over nodes without a node too few keeping one from running, within the user's placement")
		pod := dep.Spec.Template.Spec
		Expect(pod.NodeSelector).To(Equal(mpc.Spec.ProxyServer.NodePlacement.NodeSelector))
		Expect(pod.TopologySpreadConstraints).To(ConsistOf(And(
			HaveField("MaxSkew", int32(1)),
			HaveField("TopologyKey", "kubernetes.io/hostname"),
			HaveField("WhenUnsatisfiable", corev1.ScheduleAnyway),
			HaveField("LabelSelector", Equal(&metav1.LabelSelector{MatchLabels: dep.Spec.Template.Labels})))))

		By("unset resources: the default requests, no limits")
		Expect(pod.Containers[0].Resources).To(Equal(render.DefaultServerResources()))

		By("spec.proxyServer.resources replaces them")
		want := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		}
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.ProxyServer.Resources = want.DeepCopy()
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			c := get(g, &appsv1.Deployment{}, ns, mpc.Name).Spec.Template.Spec.Containers[0]
			g.Expect(c.Resources.Requests.Cpu().String()).To(Equal("200m"))
			g.Expect(c.Resources.Requests.Memory().String()).To(Equal("256Mi"))
			g.Expect(c.Resources.Limits).To(HaveLen(1))
			g.Expect(c.Resources.Limits.Memory().String()).To(Equal("256Mi"))
		}, timeout, interval).Should(Succeed())
		expectReady(mpc)

		By("a PodDisruptionBudget someone edits is put back")
		pdb = get(Default, &policyv1.PodDisruptionBudget{}, ns, mpc.Name)
		pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(0))
		Expect(k8s.Update(ctx(), pdb)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(g, &policyv1.PodDisruptionBudget{}, ns, mpc.Name).Spec.MaxUnavailable).To(HaveValue(Equal(intstr.FromInt32(1))))
		}, timeout, interval).Should(Succeed())
	})

	It("grants agents port-forwarding only for the PortForward entrypoint", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.ProxyServer.Entrypoint = &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypePortForward, Port: 8091}
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		Eventually(func(g Gomega) {
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionEntrypointReady).Reason).To(Equal(proxyv1alpha1.ReasonPortForwardEntrypoint))
		}, timeout, interval).Should(Succeed())
		find := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}
		role := get(Default, &rbacv1.Role{}, ns, "cluster-proxy-addon-agent:portforward")
		Expect(role.Rules).To(ConsistOf(find), "no proxy-server pod yet (envtest runs none): no port-forward to any pod")

		By("the agents may port-forward to the proxy-server pods, by name, and to no other pod of the namespace")
		pod := func(name string, labels map[string]string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}}}
		}
		server := map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer, render.ConfigurationLabel: mpc.Name}
		for _, p := range []*corev1.Pod{pod("server-a", server), pod("server-b", server), pod("manager", map[string]string{"app": "manager"})} {
			Expect(k8s.Create(ctx(), p)).To(Succeed())
		}
		forwardTo := func(names ...string) rbacv1.PolicyRule {
			return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, ResourceNames: names, Verbs: []string{"create"}}
		}
		Eventually(func(g Gomega) {
			g.Expect(get(g, &rbacv1.Role{}, ns, "cluster-proxy-addon-agent:portforward").Rules).To(ConsistOf(find, forwardTo("server-a", "server-b")))
		}, timeout, interval).Should(Succeed())
		Expect(k8s.Delete(ctx(), pod("server-a", nil), client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(g, &rbacv1.Role{}, ns, "cluster-proxy-addon-agent:portforward").Rules).To(ConsistOf(find, forwardTo("server-b")))
		}, timeout, interval).Should(Succeed())
		binding := get(Default, &rbacv1.RoleBinding{}, ns, "cluster-proxy-addon-agent:portforward")
		Expect(binding.Subjects).To(ConsistOf(HaveField("Name", "system:open-cluster-management:addon:cluster-proxy")), "the group of every agent's hub identity")

		By("switching to Hostname, the port-forward RBAC goes away")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.ProxyServer.Entrypoint = &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
				Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: "hub.example.com"}, Port: 443}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectGone(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy-addon-agent:portforward"}})
		expectGone(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy-addon-agent:portforward"}})
		expectReady(mpc)
		Expect(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Entrypoint).To(Equal("hub.example.com:443"))
	})

	It("keeps the proxy-servers' NetworkPolicy while networkPolicies is enabled, and removes it when it is not", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.NetworkPolicies = &proxyv1alpha1.ManagedProxyConfigurationNetworkPolicies{Enabled: true}
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		policy := &networkingv1.NetworkPolicy{}
		Eventually(func(g Gomega) { policy = get(g, &networkingv1.NetworkPolicy{}, ns, mpc.Name) }, timeout, interval).Should(Succeed())
		deployment := get(Default, &appsv1.Deployment{}, ns, mpc.Name)
		Expect(labels.SelectorFromSet(policy.Spec.PodSelector.MatchLabels).Matches(labels.Set(deployment.Spec.Template.Labels))).To(BeTrue())
		Expect(policy.Spec.Ingress[0].Ports).To(HaveLen(len(deployment.Spec.Template.Spec.Containers[0].Ports)))

		By("a deleted policy comes back")
		Expect(k8s.Delete(ctx(), policy)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(g, &networkingv1.NetworkPolicy{}, ns, mpc.Name).UID).NotTo(Equal(policy.UID))
		}, timeout, interval).Should(Succeed())

		By("turned off, it goes")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.NetworkPolicies = nil
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectGone(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mpc.Name}})
		expectReady(mpc)
	})

	It("publishes the TLS profile from spec.tlsProfile, else OCM's ocm-tls-profile, without rolling the proxy-servers", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		profileOf := func(g Gomega) contract.TLSProfile {
			cm := get(g, &corev1.ConfigMap{}, ns, mpc.Name+"-tls-profile")
			var p contract.TLSProfile
			g.Expect(json.Unmarshal([]byte(cm.Data["profile.json"]), &p)).To(Succeed())
			return p
		}
		Expect(profileOf(Default)).To(Equal(contract.TLSProfile{}))
		Expect(condition(Default, mpc, proxyv1alpha1.ConditionTLSProfileApplied).Message).To(ContainSubstring("from the default"))
		deployment := get(Default, &appsv1.Deployment{}, ns, mpc.Name)
		Expect(deployment.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--tls-profile-file=/etc/cluster-proxy/tls-profile/profile.json"))
		template := deployment.Spec.Template

		By("OCM's ocm-tls-profile in the manager's namespace applies to a configuration without its own")
		ocm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: "ocm-tls-profile"},
			Data: map[string]string{"minTLSVersion": "VersionTLS12", "cipherSuites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}}
		Expect(k8s.Create(ctx(), ocm)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(ctx(), ocm) })
		Eventually(func(g Gomega) {
			g.Expect(profileOf(g)).To(Equal(contract.TLSProfile{MinTLSVersion: "VersionTLS12",
				CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}}))
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionTLSProfileApplied).Message).To(ContainSubstring("ConfigMap " + managerNamespace + "/ocm-tls-profile"))
		}, timeout, interval).Should(Succeed())

		By("spec.tlsProfile wins")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.TLSProfile = &proxyv1alpha1.ManagedProxyConfigurationTLSProfile{MinTLSVersion: "VersionTLS13"}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(profileOf(g)).To(Equal(contract.TLSProfile{MinTLSVersion: "VersionTLS13"}))
		}, timeout, interval).Should(Succeed())
		expectReady(mpc)
		Expect(get(Default, &appsv1.Deployment{}, ns, mpc.Name).Spec.Template).To(Equal(template), "no rollout: the pods re-read the profile")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			g.Expect(get(g, &appsv1.Deployment{}, ns, mpc.Name).Annotations).To(HaveKeyWithValue(
				proxyv1alpha1.ConfigurationGenerationAnnotation, strconv.FormatInt(live.Generation, 10)), "the Deployment names the generation it was applied from")
		}, timeout, interval).Should(Succeed())

		By("an unknown cipher suite is reported by its field; the published profile stays")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.TLSProfile = &proxyv1alpha1.ManagedProxyConfigurationTLSProfile{MinTLSVersion: "VersionTLS12",
				CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_NOT_A_SUITE"}}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			c := condition(g, mpc, proxyv1alpha1.ConditionTLSProfileApplied)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(proxyv1alpha1.ReasonInvalidTLSProfile))
			g.Expect(c.Message).To(ContainSubstring("spec.tlsProfile.cipherSuites[1]"))
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionReady).Reason).To(Equal(proxyv1alpha1.ReasonInvalidTLSProfile))
		}, timeout, interval).Should(Succeed())
		Expect(profileOf(Default)).To(Equal(contract.TLSProfile{MinTLSVersion: "VersionTLS13"}))

		By("a version below TLS 1.2 is refused by the API server, naming the field")
		live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
		live.Spec.TLSProfile = &proxyv1alpha1.ManagedProxyConfigurationTLSProfile{MinTLSVersion: "VersionTLS11"}
		Expect(k8s.Update(ctx(), live)).To(MatchError(ContainSubstring("spec.tlsProfile.minTLSVersion")))
	})

	It("keeps the LoadBalancer Service in sync and uses its ingress hostname, else its IP", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.ProxyServer.Entrypoint = &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
				Type: proxyv1alpha1.EntryPointTypeLoadBalancerService, Port: 443,
				LoadBalancerService: &proxyv1alpha1.EntryPointLoadBalancerService{Name: "agents-lb", Annotations: []proxyv1alpha1.AnnotationVar{
					{Key: "service.beta.kubernetes.io/azure-load-balancer-internal", Value: "true"},
					{Key: "example.com/keep", Value: "v1"}}},
			}
		})
		createMPC(mpc)
		ns := mpc.Spec.ProxyServer.Namespace

		By("waiting for an ingress address: EntrypointReady=False")
		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionEntrypointReady, metav1.ConditionFalse, proxyv1alpha1.ReasonLoadBalancerPending, ns+"/agents-lb")
			expectCondition(g, mpc, proxyv1alpha1.ConditionReady, metav1.ConditionFalse, proxyv1alpha1.ReasonLoadBalancerPending)
		}, timeout, interval).Should(Succeed())
		lb := get(Default, &corev1.Service{}, ns, "agents-lb")
		Expect(lb.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
		Expect(lb.Annotations).To(HaveKeyWithValue("service.beta.kubernetes.io/azure-load-balancer-internal", "true"))
		Expect(lb.Spec.Ports).To(ConsistOf(And(HaveField("Port", int32(443)), HaveField("TargetPort", intstr.FromInt32(8091)))))

		By("a cloud controller publishes a hostname and an IP: the hostname is used")
		lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.com", IP: "203.0.113.10"}}
		Expect(k8s.Status().Update(ctx(), lb)).To(Succeed())
		expectReady(mpc)
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Entrypoint).To(Equal("lb.example.com:443"))
			g.Expect(leafOf(g, get(g, &corev1.Secret{}, ns, "agent-server")).DNSNames).To(ContainElement("lb.example.com"))
		}, timeout, interval).Should(Succeed())

		By("changing annotations (add, change, remove) and the port")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.ProxyServer.Entrypoint.Port = 8443
			live.Spec.ProxyServer.Entrypoint.LoadBalancerService.Annotations = []proxyv1alpha1.AnnotationVar{
				{Key: "example.com/keep", Value: "v2"}, {Key: "example.com/new", Value: "yes"}}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			lb := get(g, &corev1.Service{}, ns, "agents-lb")
			g.Expect(lb.Annotations).To(HaveKeyWithValue("example.com/keep", "v2"))
			g.Expect(lb.Annotations).To(HaveKeyWithValue("example.com/new", "yes"))
			g.Expect(lb.Annotations).NotTo(HaveKey("service.beta.kubernetes.io/azure-load-balancer-internal"))
			g.Expect(lb.Spec.Ports).To(ConsistOf(HaveField("Port", int32(8443))))
		}, timeout, interval).Should(Succeed())

		By("an IP-only ingress: the IP is used and becomes an IP SAN")
		Eventually(func(g Gomega) {
			lb := get(g, &corev1.Service{}, ns, "agents-lb")
			lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.20"}}
			g.Expect(k8s.Status().Update(ctx(), lb)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Entrypoint).To(Equal("203.0.113.20:8443"))
			g.Expect(fmt.Sprint(leafOf(g, get(g, &corev1.Secret{}, ns, "agent-server")).IPAddresses)).To(ContainSubstring("203.0.113.20"))
		}, timeout, interval).Should(Succeed())
	})

	It("puts back what others change of the fields it renders, and leaves the fields they add", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace

		dep := get(Default, &appsv1.Deployment{}, ns, mpc.Name)
		dep.Spec.Replicas = ptrTo(int32(7))
		dep.Spec.Template.Spec.Containers[0].Image = "evil.example.com/proxy:latest"
		dep.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "INJECTED", Value: "1"}}
		// What 'kubectl rollout restart' writes.
		dep.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-25T10:00:00Z"}
		Expect(k8s.Update(ctx(), dep, client.FieldOwner("kubectl-edit"))).To(Succeed())

		svc := get(Default, &corev1.Service{}, ns, "proxy-entrypoint")
		svc.Spec.Ports[0].Port = 9999
		Expect(k8s.Update(ctx(), svc)).To(Succeed())

		Expect(k8s.Delete(ctx(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy"}})).To(Succeed())

		bundle := get(Default, &corev1.Secret{}, ns, "proxy-server-ca")
		want := bundle.Data["ca.crt"]
		bundle.Data["ca.crt"] = []byte("tampered")
		Expect(k8s.Update(ctx(), bundle)).To(Succeed())

		tlsSecret := get(Default, &corev1.Secret{}, ns, "proxy-server")
		oldSerial := leafOf(Default, tlsSecret).SerialNumber
		other := get(Default, &corev1.Secret{}, ns, "agent-server")
		tlsSecret.Data["tls.key"] = other.Data["tls.key"]
		Expect(k8s.Update(ctx(), tlsSecret)).To(Succeed())

		Eventually(func(g Gomega) {
			dep := get(g, &appsv1.Deployment{}, ns, mpc.Name)
			g.Expect(*dep.Spec.Replicas).To(Equal(int32(2)))
			g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/cluster-proxy:test"))
			g.Expect(dep.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "INJECTED", Value: "1"}), "a field another writer added stays")
			g.Expect(dep.Spec.Template.Spec.Containers[0].Env).To(ContainElement(HaveField("Name", render.PodIPEnv)), "beside the rendered ones")
			g.Expect(dep.Spec.Template.Annotations).To(HaveKey("kubectl.kubernetes.io/restartedAt"), "a rollout restart is not undone")
			g.Expect(get(g, &corev1.Service{}, ns, "proxy-entrypoint").Spec.Ports).To(ContainElement(HaveField("Port", int32(8090))))
			get(g, &corev1.ServiceAccount{}, ns, "cluster-proxy")
			g.Expect(get(g, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"]).To(Equal(want))
			s := get(g, &corev1.Secret{}, ns, "proxy-server")
			g.Expect(leafOf(g, s).SerialNumber).NotTo(Equal(oldSerial), "a secret whose key no longer matches is re-issued")
			_, err := tlsKeyPair(s)
			g.Expect(err).NotTo(HaveOccurred())
		}, timeout, interval).Should(Succeed())
		expectReady(mpc)
	})

	It("keeps the settings a client of the add-on's types drops, says so, and lets them go with the annotation", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{
				AllowedServices: []proxyv1alpha1.AllowedService{{Namespace: "monitoring", Name: "prometheus", Port: 9090}}}
			m.Spec.TLSProfile = &proxyv1alpha1.ManagedProxyConfigurationTLSProfile{MinTLSVersion: "VersionTLS13"}
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		args := func(g Gomega) []string {
			return get(g, &appsv1.Deployment{}, ns, mpc.Name).Spec.Template.Spec.Containers[0].Args
		}
		profile := func(g Gomega) string {
			return get(g, &corev1.ConfigMap{}, ns, mpc.Name+"-tls-profile").Data["profile.json"]
		}
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Annotations).To(HaveKey(extendedspec.Annotation))
			expectCondition(g, mpc, proxyv1alpha1.ConditionExtendedSettingsApplied, metav1.ConditionTrue, proxyv1alpha1.ReasonAsSpecified)
		}, timeout, interval).Should(Succeed())
		Expect(args(Default)).To(ContainElement("--allowed-service=monitoring/prometheus:9090"))
		Expect(profile(Default)).To(ContainSubstring("VersionTLS13"))

		By("a read-modify-write through the add-on's types, as its own tests change additionalSANs")
		Expect(addontypes.Update(ctx(), k8s, mpc.Name, func(spec map[string]any) {
			auth := spec["authentication"].(map[string]any)
			signer := auth["signer"].(map[string]any)
			signer["selfSigned"] = map[string]any{"additionalSANs": []any{"extra.example.com"}}
		})).To(Succeed())
		live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
		Expect(live.Spec.UserServer.AllowedServices).To(BeEmpty(), "the update dropped them")
		Expect(live.Spec.TLSProfile).To(BeNil())
		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionExtendedSettingsApplied, metav1.ConditionFalse, proxyv1alpha1.ReasonDroppedByUpdate,
				"spec.userServer.allowedServices", "spec.tlsProfile", extendedspec.Annotation)
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue), "the proxies work on")
		}, timeout, interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(args(g)).To(ContainElement("--allowed-service=monitoring/prometheus:9090"), "the last good allow-list stays")
			g.Expect(profile(g)).To(ContainSubstring("VersionTLS13"), "and the last good TLS profile")
		}, 2*time.Second, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(g, &corev1.Secret{}, ns, "proxy-server").Data["tls.crt"]).NotTo(BeEmpty())
			g.Expect(leafOf(g, get(g, &corev1.Secret{}, ns, "proxy-server")).DNSNames).To(ContainElement("extra.example.com"),
				"the client's own change applies")
		}, timeout, interval).Should(Succeed())

		By("removing the annotation too confirms the removal")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			delete(live.Annotations, extendedspec.Annotation)
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionExtendedSettingsApplied, metav1.ConditionTrue, proxyv1alpha1.ReasonAsSpecified)
			g.Expect(args(g)).NotTo(ContainElement(HavePrefix("--allowed-service=")))
			g.Expect(profile(g)).NotTo(ContainSubstring("VersionTLS13"))
		}, timeout, interval).Should(Succeed())
	})

	It("makes zero API writes at steady state", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		expectQuiet()
		before := requests.Writes()
		Consistently(requests.Writes, 5*time.Second, 250*time.Millisecond).Should(Equal(before))
	})

	It("signs with a Provided CA, and reports a missing or malformed secret by name", func() {
		suffix := mpcSuffix()
		caNS := "user-ca-" + suffix
		Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: caNS}})).To(Succeed())
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.Authentication.Signer = proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{
				Type:     proxyv1alpha1.Provided,
				Provided: &proxyv1alpha1.AuthenticationProvided{SecretRef: &proxyv1alpha1.SecretReference{Name: "my-ca", Namespace: caNS}},
			}
		})
		createMPC(mpc)
		ns := mpc.Spec.ProxyServer.Namespace

		By("missing: SignerReady=False names the secret; every certificate waits")
		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionSignerReady, metav1.ConditionFalse, proxyv1alpha1.ReasonSignerSecretMissing, caNS+"/my-ca")
			expectCondition(g, mpc, proxyv1alpha1.ConditionReady, metav1.ConditionFalse, proxyv1alpha1.ReasonSignerSecretMissing)
			for _, t := range []string{proxyv1alpha1.ConditionProxyServerSecretSigned, proxyv1alpha1.ConditionAgentServerSecretSigned,
				proxyv1alpha1.ConditionProxyClientSecretSigned, proxyv1alpha1.ConditionUserServerSecretSigned} {
				expectCondition(g, mpc, t, metav1.ConditionFalse, proxyv1alpha1.ReasonNotYetSigned)
			}
		}, timeout, interval).Should(Succeed())

		By("malformed: SignerSecretInvalid names the secret and the bad key")
		bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-ca", Namespace: caNS}, Data: map[string][]byte{"ca.crt": []byte("not a pem"), "ca.key": []byte("nope")}}
		Expect(k8s.Create(ctx(), bad)).To(Succeed())
		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionSignerReady, metav1.ConditionFalse, proxyv1alpha1.ReasonSignerSecretInvalid, caNS+"/my-ca", "ca.crt")
		}, timeout, interval).Should(Succeed())

		By("good: every certificate is signed by the user's CA")
		userCA, err := certs.NewCA("my-company-ca", 5*365*24*time.Hour, fakeClock.Now())
		Expect(err).NotTo(HaveOccurred())
		bad.Data = map[string][]byte{"ca.crt": userCA.CertPEM, "ca.key": userCA.KeyPEM}
		Expect(k8s.Update(ctx(), bad)).To(Succeed())
		expectReady(mpc)
		roots := x509.NewCertPool()
		roots.AddCert(userCA.Cert)
		for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert", "cluster-proxy-impersonator"} {
			leaf := leafOf(Default, get(Default, &corev1.Secret{}, ns, name))
			_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: fakeClock.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			Expect(err).NotTo(HaveOccurred(), name)
		}
		Expect(get(Default, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"]).To(Equal(userCA.CertPEM))
		Expect(get(Default, &corev1.Secret{}, ns, "cluster-proxy-signer").Data["ca.crt"]).To(Equal(userCA.CertPEM),
			"a Provided signer never generates its own CA: it signs with a copy of the user's")
	})

	It("reports ProxyServerDeployed=False when the Deployment is refused, and recovers", func() {
		mpc := newMPC()
		policy := fromYAML(fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: deny-%[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
  - expression: "object.metadata.namespace != '%[2]s'"
    message: "deployments are frozen in %[2]s"
`, mpc.Name, mpc.Spec.ProxyServer.Namespace))
		binding := fromYAML(fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: deny-%[1]s}
spec: {policyName: deny-%[1]s, validationActions: [Deny]}
`, mpc.Name))
		Expect(k8s.Create(ctx(), policy)).To(Succeed())
		Expect(k8s.Create(ctx(), binding)).To(Succeed())
		DeferCleanupDelete(policy)
		DeferCleanupDelete(binding)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mpc.Spec.ProxyServer.Namespace}}
		Expect(k8s.Create(ctx(), ns)).To(Succeed())
		By("waiting until the admission policy is in force")
		probe := render.ServerDeployment(mpc)
		probe.Name = "probe"
		probe.OwnerReferences = nil
		Eventually(func() error { return k8s.Create(ctx(), probe.DeepCopy(), client.DryRunAll) }, timeout, interval).
			Should(MatchError(ContainSubstring("deployments are frozen")))
		createMPC(mpc)

		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionProxyServerDeployed, metav1.ConditionFalse, proxyv1alpha1.ReasonNotYetDeployed, "deployments are frozen")
			expectCondition(g, mpc, proxyv1alpha1.ConditionReady, metav1.ConditionFalse, proxyv1alpha1.ReasonNotYetDeployed)
		}, timeout, interval).Should(Succeed())

		By("once the policy is unbound, the next retry (backoff capped at 30s) deploys it")
		Expect(k8s.Delete(ctx(), binding)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(g, mpc, proxyv1alpha1.ConditionProxyServerDeployed).Status).To(Equal(metav1.ConditionTrue))
		}, 2*timeout, interval).Should(Succeed())
		expectReady(mpc)
		Expect(condition(Default, mpc, proxyv1alpha1.ConditionProxyServerDeployed).Reason).To(Equal(proxyv1alpha1.ReasonSuccessfullyDeployed))
	})

	It("removes every owned hub object when deleted (kube-controller-manager garbage collector)", func() {
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Name = proxyv1alpha1.DefaultConfigurationName
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace

		cma := get(Default, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy")
		Expect(cma.Spec.SupportedConfigs).To(ContainElement(And(
			HaveField("ConfigGroupResource.Resource", "managedproxyconfigurations"),
			HaveField("DefaultConfig.Name", "cluster-proxy"))))
		Expect(cma.Spec.SupportedConfigs).To(ContainElement(HaveField("ConfigGroupResource.Resource", "addondeploymentconfigs")))

		By("the proxy-servers may review tokens and read the front proxy's CA; the agents may not")
		serverRole := "open-cluster-management:cluster-proxy:proxy-server:" + mpc.Name
		delegator := get(Default, &rbacv1.ClusterRoleBinding{}, "", serverRole+":auth-delegator")
		Expect(delegator.RoleRef.Name).To(Equal("system:auth-delegator"))
		Expect(delegator.Subjects).To(ConsistOf(HaveField("Namespace", ns)))
		Expect(apierrors.IsNotFound(k8s.Get(ctx(), client.ObjectKey{Name: "open-cluster-management:cluster-proxy:agent-tokenreview"},
			&rbacv1.ClusterRoleBinding{}))).To(BeTrue(), "no agent holds a TokenReview right on the hub")

		owned := []client.Object{
			cma,
			delegator,
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: serverRole}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: serverRole}},
			&apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.GatewayAPIServiceName}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mpc.Name}},
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mpc.Name}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-entrypoint"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy-addon-user"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-proxy"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-server-ca"}},
		}
		for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert", "cluster-proxy-impersonator"} {
			owned = append(owned,
				&proxyv1alpha1.ProxyCertificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		}
		for _, o := range owned {
			Expect(k8s.Get(ctx(), client.ObjectKeyFromObject(o), o)).To(Succeed(), "%T %s", o, o.GetName())
		}
		apiService := owned[4].(*apiregistrationv1.APIService)
		Expect(apiService.Spec.CABundle).To(Equal(get(Default, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"]),
			"the APIService trusts the published bundle")
		Expect(k8s.Delete(ctx(), mpc)).To(Succeed())
		for _, o := range owned {
			expectGone(o)
		}
		Expect(k8s.Get(ctx(), client.ObjectKey{Name: ns}, &corev1.Namespace{})).To(Succeed(), "the namespace may be shared, so it stays")
		Expect(k8s.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "cluster-proxy-signer"}, &corev1.Secret{})).To(Succeed(),
			"the CA every agent and hub client trusts stays for the next configuration (docs/backup-restore.md)")
	})
})
