package clusterproxy

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd/api"
)

// GatewayGroup is the hub's aggregated API, which the proxy-servers serve behind the hub kube-apiserver.
const GatewayGroup = "gateway.proxy.open-cluster-management.io"

// ViaHubPath is the path on the hub kube-apiserver under which cluster's kube-apiserver answers.
func ViaHubPath(cluster string) string {
	return "/apis/" + GatewayGroup + "/v1alpha1/clusters/" + cluster + "/proxy"
}

// RESTConfigViaHub is a rest.Config for cluster's kube-apiserver through the hub's own API: hub is the caller's hub
// configuration, unchanged but for the path under its server. The hub authenticates the caller with its own
// credentials, its RBAC decides whether they may reach cluster (the verb on clusters/proxy of
// gateway.proxy.open-cluster-management.io with the cluster's name), and the cluster sees the caller's hub identity as
// impersonation; no credential of the caller's ever reaches the cluster. No proxy-client certificate is needed.
func RESTConfigViaHub(hub *rest.Config, cluster string) (*rest.Config, error) {
	if hub == nil || hub.Host == "" {
		return nil, errors.New("clusterproxy: a hub configuration with a Host is required")
	}
	if cluster == "" || strings.ContainsAny(cluster, "/?#%") {
		return nil, fmt.Errorf("clusterproxy: %q is not a cluster name", cluster)
	}
	cfg := rest.CopyConfig(hub)
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	cfg.Host = strings.TrimSuffix(host, "/") + ViaHubPath(cluster)
	cfg.APIPath = ""
	return cfg, nil
}

// KubeconfigViaHub is the kubeconfig of a single context, named <cluster>-via-hub, that reaches cluster through the
// hub's own API: the cluster entry is the hub's (its CA, TLS settings and proxy) with the path appended to the server,
// the user is the hub context's own (the same certificate, token, exec plugin or token file, not a copy of a new
// credential). context is the hub context to start from; "" is the current one.
func KubeconfigViaHub(hub *api.Config, context, cluster string) (*api.Config, error) {
	if context == "" {
		context = hub.CurrentContext
	}
	hubContext, ok := hub.Contexts[context]
	if !ok {
		return nil, fmt.Errorf("the hub kubeconfig has no context %q", context)
	}
	hubCluster, ok := hub.Clusters[hubContext.Cluster]
	if !ok {
		return nil, fmt.Errorf("context %q names cluster %q, which the hub kubeconfig lacks", context, hubContext.Cluster)
	}
	if cluster == "" || strings.ContainsAny(cluster, "/?#%") {
		return nil, fmt.Errorf("%q is not a cluster name", cluster)
	}
	name := cluster + "-via-hub"
	out := api.NewConfig()
	c := hubCluster.DeepCopy()
	c.Server = strings.TrimSuffix(c.Server, "/") + ViaHubPath(cluster)
	out.Clusters[name] = c
	if user, ok := hub.AuthInfos[hubContext.AuthInfo]; ok {
		out.AuthInfos[hubContext.AuthInfo] = user.DeepCopy()
	}
	out.Contexts[name] = &api.Context{Cluster: name, AuthInfo: hubContext.AuthInfo, Namespace: hubContext.Namespace}
	out.CurrentContext = name
	return out, nil
}
