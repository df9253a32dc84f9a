package render

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// portsOf are the TCP ports a rule list admits, and whether any rule admits everything.
func portsOf(rules [][]networkingv1.NetworkPolicyPort) (tcp []int32, udp []int32, all bool) {
	for _, ports := range rules {
		if len(ports) == 0 {
			all = true
		}
		for _, p := range ports {
			if *p.Protocol == corev1.ProtocolUDP {
				udp = append(udp, p.Port.IntVal)
			} else {
				tcp = append(tcp, p.Port.IntVal)
			}
		}
	}
	return tcp, udp, all
}

func selects(g Gomega, policy *networkingv1.NetworkPolicy, podLabels map[string]string) {
	g.ExpectWithOffset(1, labels.SelectorFromSet(policy.Spec.PodSelector.MatchLabels).Matches(labels.Set(podLabels))).To(BeTrue(),
		"the policy selects the pods")
}

func TestServerNetworkPolicyAdmitsEveryPortTheProxyServerServes(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{AgentServer: 9443}}
	policy := ServerNetworkPolicy(m)
	deployment := ServerDeployment(m)
	selects(g, policy, deployment.Spec.Template.Labels)
	g.Expect(policy.Namespace).To(Equal(deployment.Namespace))
	g.Expect(policy.OwnerReferences).To(Equal(deployment.OwnerReferences), "removed with the configuration")
	g.Expect(policy.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress))
	var served []int32
	for _, p := range deployment.Spec.Template.Spec.Containers[0].Ports {
		served = append(served, p.ContainerPort)
	}
	g.Expect(policy.Spec.Ingress).To(HaveLen(1))
	g.Expect(policy.Spec.Ingress[0].From).To(BeEmpty(), "agents dial in from outside the hub")
	tcp, udp, all := portsOf([][]networkingv1.NetworkPolicyPort{policy.Spec.Ingress[0].Ports})
	g.Expect(all).To(BeFalse())
	g.Expect(udp).To(BeEmpty())
	g.Expect(tcp).To(ConsistOf(served))
	g.Expect(tcp).To(ContainElement(int32(9443)), "a configured port follows")
}

func TestAgentNetworkPolicy(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		g := NewWithT(t)
		work, _, err := AgentWork(agentTestInput(t))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(decodeAgentWork(g, work).networkPolicy).To(BeNil())
	})
	t.Run("health in; DNS, the kube-apiserver, the entrypoint and the proxy out", func(t *testing.T) {
		g := NewWithT(t)
		in := agentTestInput(t)
		in.MPC.Spec.NetworkPolicies = &proxyv1alpha1.ManagedProxyConfigurationNetworkPolicies{Enabled: true}
		withADC(&in, addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
			HTTPSProxy: "http://squid.example:3128", HTTPProxy: "http://squid.example:3128"}})
		work, _, err := AgentWork(in)
		g.Expect(err).NotTo(HaveOccurred())
		o := decodeAgentWork(g, work)
		policy := o.networkPolicy
		g.Expect(policy).NotTo(BeNil())
		g.Expect(policy.Namespace).To(Equal(o.deployment.Namespace))
		selects(g, policy, o.deployment.Spec.Template.Labels)
		g.Expect(policy.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		tcp, _, all := portsOf([][]networkingv1.NetworkPolicyPort{policy.Spec.Ingress[0].Ports})
		g.Expect(all).To(BeFalse())
		g.Expect(tcp).To(ConsistOf(int32(contract.AgentHealthPort)))
		var egress [][]networkingv1.NetworkPolicyPort
		for _, r := range policy.Spec.Egress {
			egress = append(egress, r.Ports)
		}
		tcp, udp, all := portsOf(egress)
		g.Expect(all).To(BeFalse())
		g.Expect(udp).To(ConsistOf(int32(53), int32(5353)))
		g.Expect(tcp).To(ConsistOf(int32(53), int32(5353), int32(443), int32(6443), EntrypointPort(in.MPC), int32(3128)))
	})
	t.Run("any egress with the service-proxy on", func(t *testing.T) {
		g := NewWithT(t)
		in := agentTestInput(t)
		in.MPC.Spec.NetworkPolicies = &proxyv1alpha1.ManagedProxyConfigurationNetworkPolicies{Enabled: true}
		in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
		work, _, err := AgentWork(in)
		g.Expect(err).NotTo(HaveOccurred())
		policy := decodeAgentWork(g, work).networkPolicy
		g.Expect(policy.Spec.Egress).To(Equal([]networkingv1.NetworkPolicyEgressRule{{}}))
	})
}

func TestProxyPort(t *testing.T) {
	g := NewWithT(t)
	g.Expect(proxyPort("")).To(BeZero())
	g.Expect(proxyPort("http://p:3128")).To(Equal(int32(3128)))
	g.Expect(proxyPort("http://p")).To(Equal(int32(80)))
	g.Expect(proxyPort("https://user:pw@p")).To(Equal(int32(443)))
}
