package render

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// HubCertificate pairs a hub ProxyCertificate with the ManagedProxyConfiguration condition that reports it.
type HubCertificate struct {
	Condition   string
	Certificate *proxyv1alpha1.ProxyCertificate
}

// HubCertificates are the certificates of the proxy servers: the frontend (proxy-server), the agent endpoint
// (agent-server), the client certificate hub programs use on the frontend (proxy-client) and the user-server's
// serving certificate, and the impersonator: the client certificate the proxy-servers present to the agents'
// service-proxies when they send a hub user's identity. entrypointHost is the address agents dial ("" while unknown); it is a SAN of the server
// certificates so agents can verify them.
func HubCertificates(mpc *proxyv1alpha1.ManagedProxyConfiguration, entrypointHost string) []HubCertificate {
	ns, svc := contract.Namespace(mpc), contract.ServiceName(mpc)
	serverSANs := []string{svc, svc + "." + ns, svc + "." + ns + ".svc", "localhost", "127.0.0.1", entrypointHost}
	if ss := mpc.Spec.Authentication.Signer.SelfSigned; ss != nil {
		serverSANs = append(serverSANs, ss.AdditionalSANs...)
	}
	user := proxyv1alpha1.UserServerServiceName
	userSANs := []string{user, user + "." + ns, user + "." + ns + ".svc", user + "." + ns + ".svc.cluster.local", "localhost", "127.0.0.1"}
	if us := mpc.Spec.UserServer; us != nil {
		userSANs = append(userSANs, us.AdditionalSANs...)
	}
	names := contract.SecretNamesOf(mpc)
	server := []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageServerAuth}
	client := []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageClientAuth}
	return []HubCertificate{
		{proxyv1alpha1.ConditionProxyServerSecretSigned, certificate(mpc, names.ProxyServer, "cluster-proxy-proxy-server", server, serverSANs)},
		{proxyv1alpha1.ConditionAgentServerSecretSigned, certificate(mpc, names.AgentServer, "cluster-proxy-agent-server", server, serverSANs)},
		{proxyv1alpha1.ConditionProxyClientSecretSigned, certificate(mpc, names.ProxyClient, "cluster-proxy-proxy-client", client, nil)},
		{proxyv1alpha1.ConditionUserServerSecretSigned, certificate(mpc, names.UserServer, "cluster-proxy-user-server", server, userSANs)},
		{proxyv1alpha1.ConditionImpersonatorSecretSigned, certificate(mpc, proxyv1alpha1.ImpersonatorSecretName, contract.ImpersonatorCommonName, client, nil)},
	}
}

func certificate(mpc *proxyv1alpha1.ManagedProxyConfiguration, secret, cn string, usages []proxyv1alpha1.KeyUsage, sans []string) *proxyv1alpha1.ProxyCertificate {
	dns, ips := SplitSANs(sans...)
	return &proxyv1alpha1.ProxyCertificate{
		ObjectMeta: objectMeta(mpc, secret, contract.Namespace(mpc)),
		Spec: proxyv1alpha1.ProxyCertificateSpec{
			SecretName:  secret,
			CommonName:  cn,
			DNSNames:    dns,
			IPAddresses: ips,
			Usages:      usages,
			Duration:    &metav1.Duration{Duration: certs.DefaultLeafDuration},
			IssuerRef:   proxyv1alpha1.IssuerReference{Name: mpc.Name, Kind: "ManagedProxyConfiguration", Group: proxyv1alpha1.GroupVersion.Group},
		},
	}
}
