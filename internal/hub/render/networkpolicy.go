package render

import (
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
)

// AgentNetworkPolicyName names the agent's NetworkPolicy on a managed cluster.
const AgentNetworkPolicyName = "cluster-proxy-proxy-agent"

// NetworkPoliciesEnabled reports whether the configuration asks for NetworkPolicies.
func NetworkPoliciesEnabled(mpc *proxyv1alpha1.ManagedProxyConfiguration) bool {
	return mpc.Spec.NetworkPolicies != nil && mpc.Spec.NetworkPolicies.Enabled
}

// ServerNetworkPolicy admits to the proxy-server pods, from anywhere, only the ports their container serves: agents
// dial in from outside the hub, hub clients from inside it. Egress is not limited: the proxy-servers dial the agents'
// tunnels they already hold and the hub's kube-apiserver, whose address differs per cluster.
func ServerNetworkPolicy(mpc *proxyv1alpha1.ManagedProxyConfiguration) *networkingv1.NetworkPolicy {
	var ports []networkingv1.NetworkPolicyPort
	for _, c := range ServerDeployment(mpc).Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports = append(ports, tcpPort(p.ContainerPort))
		}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(mpc, mpc.Name, contract.Namespace(mpc)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: ServerPodLabels(mpc)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: ports}},
		},
	}
}

// agentNetworkPolicy admits to the agent pods only their health port, and lets them reach DNS, the kube-apiserver
// (443 at its Service, 6443 at its endpoints), the proxy-server entrypoint and the forward proxy. With the
// service-proxy on, egress is open: it reaches whichever services the configuration allows.
func agentNetworkPolicy(in AgentInput, ns string, settings proxyenv.Settings) *networkingv1.NetworkPolicy {
	egress := []networkingv1.NetworkPolicyEgressRule{{}}
	if !ServiceProxyEnabled(in.MPC) {
		dns := []networkingv1.NetworkPolicyPort{udpPort(53), tcpPort(53), udpPort(5353), tcpPort(5353)}
		out := []networkingv1.NetworkPolicyPort{tcpPort(443), tcpPort(6443), tcpPort(EntrypointPort(in.MPC))}
		for _, raw := range []string{settings.HTTPSProxy, settings.HTTPProxy} {
			if port := proxyPort(raw); port != 0 {
				out = append(out, tcpPort(port))
			}
		}
		egress = []networkingv1.NetworkPolicyEgressRule{{Ports: dns}, {Ports: dedupe(out)}}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: agentMeta(AgentNetworkPolicyName, ns),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: AgentDeploymentLabels()},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(contract.AgentHealthPort)}}},
			Egress:      egress,
		},
	}
}

// proxyPort is the port of a forward proxy URL (its scheme's default when it has none); 0 for none.
func proxyPort(raw string) int32 {
	if raw == "" {
		return 0
	}
	u, err := url.Parse(raw)
	if err != nil {
		return 0 // proxyenv.FromConfig has validated it
	}
	if p, err := strconv.ParseInt(u.Port(), 10, 32); err == nil {
		return int32(p)
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

func tcpPort(port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}
}

func udpPort(port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(port))}
}

func dedupe(ports []networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort {
	seen := map[int32]bool{}
	out := ports[:0]
	for _, p := range ports {
		if !seen[p.Port.IntVal] {
			seen[p.Port.IntVal] = true
			out = append(out, p)
		}
	}
	return out
}
