package contract

import (
	"net"
	"strconv"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

const (
	// AgentHealthPort serves the agent's /healthz and /readyz.
	AgentHealthPort = 8093
	// ServiceProxyPort is the tunnel port of the agent's in-process service-proxy, reached from the user-server
	// through the tunnel; nothing listens on it in the pod.
	ServiceProxyPort = 7443
	// TunnelHealthPort is the tunnel port of the agent's in-process GET /healthz, which answers with the
	// kube-apiserver's: the proxy-servers probe each cluster's tunnel on it (plain HTTP inside the tunnel).
	TunnelHealthPort = 7444
)

// Ports are the proxy-server ports with defaults applied.
type Ports struct{ ProxyServer, AgentServer, HealthServer, AdminServer, HTTPConnectServer int32 }

// PortsOf returns the configured ports, defaulting any that are unset.
func PortsOf(mpc *proxyv1alpha1.ManagedProxyConfiguration) Ports {
	p := Ports{ProxyServer: 8090, AgentServer: 8091, HealthServer: 8092, AdminServer: 8095, HTTPConnectServer: 8094}
	if d := mpc.Spec.Deploy; d != nil {
		p.ProxyServer = orDefault(d.Ports.ProxyServer, p.ProxyServer)
		p.AgentServer = orDefault(d.Ports.AgentServer, p.AgentServer)
		p.HealthServer = orDefault(d.Ports.HealthServer, p.HealthServer)
		p.AdminServer = orDefault(d.Ports.AdminServer, p.AdminServer)
		p.HTTPConnectServer = orDefault(d.Ports.HTTPConnectServer, p.HTTPConnectServer)
	}
	return p
}

// Namespace is where the proxy servers and their secrets live.
func Namespace(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	if ns := mpc.Spec.ProxyServer.Namespace; ns != "" {
		return ns
	}
	return "open-cluster-management-cluster-proxy"
}

// ServiceName is the in-cluster Service of the proxy servers.
func ServiceName(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	if n := mpc.Spec.ProxyServer.InClusterServiceName; n != "" {
		return n
	}
	return "proxy-entrypoint"
}

// ServiceHost is the in-cluster name of the proxy servers' Service, <service>.<namespace>.svc: their frontends' and
// HTTP-CONNECT listener's host.
func ServiceHost(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	return ServiceName(mpc) + "." + Namespace(mpc) + ".svc"
}

// UserServerAddress is the in-cluster host:port of the user-server Service; a cluster's URL is
// https://<address>/<cluster>.
func UserServerAddress(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	return net.JoinHostPort(proxyv1alpha1.UserServerServiceName+"."+Namespace(mpc)+".svc", strconv.Itoa(proxyv1alpha1.UserServerPort))
}

// SecretNames are the secrets of the hub certificates.
type SecretNames struct{ ProxyServer, AgentServer, ProxyClient, UserServer string }

// SecretNamesOf returns the configured secret names, defaulting any that are unset.
func SecretNamesOf(mpc *proxyv1alpha1.ManagedProxyConfiguration) SecretNames {
	s := mpc.Spec.Authentication.Dump.Secrets
	return SecretNames{
		ProxyServer: orDefault(s.SigningProxyServerSecretName, "proxy-server"),
		AgentServer: orDefault(s.SigningAgentServerSecretName, "agent-server"),
		ProxyClient: orDefault(s.SigningProxyClientSecretName, "proxy-client"),
		UserServer:  proxyv1alpha1.UserServerSecretName,
	}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
