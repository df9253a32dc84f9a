package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

type kubeconfigCommand struct {
	globals
	cluster, output, token, userServerURL string
	viaHub                                bool
}

func (k *kubeconfigCommand) register(fs *flag.FlagSet) {
	fs.StringVar(&k.output, "o", "", "write the kubeconfig to this file (default standard output)")
	fs.StringVar(&k.output, "output", "", "same as -o")
	fs.StringVar(&k.token, "token", "", "bearer token of the kubeconfig: one valid on the managed cluster, or a hub token, "+
		"which the user-server maps to an impersonated user (default the hub kubeconfig's token)")
	fs.BoolVar(&k.viaHub, "via-hub", false, "a context on the hub's own server and the current hub user instead: the hub "+
		"authenticates you as it always does, its RBAC decides per cluster (clusters/proxy), no new credential is written")
	fs.StringVar(&k.userServerURL, "user-server-url", "", "the user-server's URL as the kubeconfig reaches it "+
		"(default https://cluster-proxy-addon-user.<namespace>.svc:9092)")
}

func (k *kubeconfigCommand) run(ctx context.Context, stdout io.Writer) error {
	resolve, err := clusterproxy.ParseResolve(k.resolve)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	hub, err := k.hub()
	if err != nil {
		return err
	}
	if err := hub.client.Get(ctx, client.ObjectKey{Name: k.cluster}, &clusterv1.ManagedCluster{}); err != nil {
		switch {
		case k.viaHub && apierrors.IsForbidden(err):
			// A user the hub lets reach clusters need not read ManagedClusters: the context is written unchecked.
		case apierrors.IsNotFound(err):
			return fmt.Errorf("managed cluster %q not found on the hub at %s (kubectl get managedclusters)", k.cluster, hub.config.Host)
		default:
			return hubError(hub.config, fmt.Errorf("read managed cluster %s: %w", k.cluster, err))
		}
	}
	if k.viaHub {
		if k.token != "" || k.userServerURL != "" {
			return fmt.Errorf("%w: --via-hub uses the hub kubeconfig's own user and server: drop --token and --user-server-url", errUsage)
		}
		raw, err := k.rawHubConfig()
		if err != nil {
			return err
		}
		cfg, err := clusterproxy.KubeconfigViaHub(raw, k.context, k.cluster)
		if err != nil {
			return fmt.Errorf("the hub kubeconfig: %w", err)
		}
		return k.write(cfg, stdout)
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := hub.client.Get(ctx, client.ObjectKey{Name: k.configuration}, mpc); err != nil {
		if apierrors.IsNotFound(err) {
			return hub.noConfiguration(k.configuration)
		}
		return hubError(hub.config, err)
	}
	addrs := clusterproxy.AddressesOf(mpc)
	ns := addrs.Namespace
	bundle := &corev1.Secret{}
	if err := hub.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: proxyv1alpha1.CABundleSecretName}, bundle); err != nil {
		return hubError(hub.config, fmt.Errorf("read the user-server's CA (secret %s/%s): %w", ns, proxyv1alpha1.CABundleSecretName, err))
	}
	if len(bundle.Data["ca.crt"]) == 0 {
		return fmt.Errorf("secret %s/%s has no ca.crt: is ManagedProxyConfiguration %s Ready?", ns, proxyv1alpha1.CABundleSecretName, mpc.Name)
	}
	token, err := k.bearerToken(hub)
	if err != nil {
		return err
	}
	server, serverName, err := k.server(addrs.UserServer, resolve)
	if err != nil {
		return err
	}
	return k.write(userServerKubeconfig(k.cluster, server, serverName, bundle.Data["ca.crt"], token), stdout)
}

// write writes cfg to -o, or to stdout.
func (k *kubeconfigCommand) write(cfg *clientcmdapi.Config, stdout io.Writer) error {
	if k.output == "" {
		out, err := clientcmd.Write(*cfg)
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, k.output); err != nil {
		return fmt.Errorf("write %s: %w", k.output, err)
	}
	return nil
}

// server is the cluster's URL on the user-server and, when --resolve sends the user-server elsewhere, the name its
// certificate carries.
func (k *kubeconfigCommand) server(userServer string, resolve clusterproxy.Resolver) (server, serverName string, err error) {
	base := k.userServerURL
	if base == "" {
		base = "https://" + userServer
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", "", fmt.Errorf("%w: --user-server-url %q: want https://host[:port]", errUsage, base)
	}
	hostPort := u.Host
	if u.Port() == "" {
		hostPort += ":443"
	}
	if to := resolve.Address(hostPort); to != hostPort {
		serverName, u.Host = u.Hostname(), to
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + k.cluster
	return u.String(), serverName, nil
}

func (k *kubeconfigCommand) bearerToken(h *hub) (string, error) {
	if k.token != "" {
		return k.token, nil
	}
	token, err := configToken(h.config.BearerToken, h.config.BearerTokenFile)
	if err == nil && token == "" {
		err = errors.New("no token: pass --token with a token valid on the managed cluster or a hub service account " +
			"token (the hub kubeconfig has none to reuse)")
	}
	return token, err
}

// configToken is a kubeconfig's bearer token, read from its file when it names one; "" when it has none.
func configToken(token, file string) (string, error) {
	if token != "" || file == "" {
		return token, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read the hub kubeconfig's token file: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

// userServerKubeconfig is a kubeconfig with one cluster, user and context, all named after the managed cluster.
func userServerKubeconfig(cluster, server, serverName string, ca []byte, token string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, TLSServerName: serverName, CertificateAuthorityData: ca}
	cfg.AuthInfos[cluster] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: cluster}
	cfg.CurrentContext = cluster
	return cfg
}
