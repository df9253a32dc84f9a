package clusterproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// Dialer opens connections to one managed cluster through its tunnel.
type Dialer struct {
	client  *Client
	cluster string
}

// Dialer returns a dialer for cluster.
func (c *Client) Dialer(cluster string) *Dialer {
	return &Dialer{client: c, cluster: cluster}
}

// DialContext opens a connection to the port of address on the cluster's side of the tunnel: 443
// (KubeAPIServerPort) is its kube-apiserver, 7443 (ServiceProxyPort) the agent's service-proxy; an address without a
// port means 443. The host of address is ignored: the tunnel is addressed by the cluster's name. network must be a
// TCP one. ctx bounds the dial only.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("dial cluster %s: network %q is not supported, only tcp", d.cluster, network)
	}
	port := KubeAPIServerPort
	if _, p, err := net.SplitHostPort(address); err == nil {
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("dial cluster %s: port of %q: %w", d.cluster, address, err)
		}
	}
	return d.DialPort(ctx, port)
}

// DialPort opens a connection to port on the cluster's side of the tunnel.
func (d *Dialer) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return d.client.dialCluster(ctx, d.cluster, port)
}

// RESTConfig is base, reaching cluster's kube-apiserver through its tunnel, with every client-go transport: requests
// and watches (rest.HTTPClientFor, clientsets), and the upgraded connections of exec, attach and port-forward over
// SPDY or websocket. base supplies what is valid on the managed cluster: credentials, the kube-apiserver's CA, and as
// Host the URL its serving certificate names (every connection goes to the tunnel whatever Host says). With an empty
// Host the URL is https://<cluster>, which then needs TLSClientConfig.ServerName or Insecure. Proxy settings from the
// environment are not used: the tunnel is the route.
//
// Requests dial the tunnel with the config's Dial. client-go's upgrade round trippers ignore Dial and use Proxy, so
// Proxy gives each upgrade request a one-connection CONNECT proxy on 127.0.0.1, guarded by a credential made for that
// request, that carries it through the tunnel.
//
// A GET or HEAD whose answer is cut before its end (the proxy-server or agent carrying it died) is sent again, up to
// three times in all; such answers are read whole, up to 32 MiB, before the caller gets them. Watches, followed logs
// and upgrades stream as they come.
func (c *Client) RESTConfig(cluster string, base *rest.Config) (*rest.Config, error) {
	if base == nil {
		return nil, errors.New("clusterproxy: RESTConfig needs a base config with credentials of the managed cluster")
	}
	if cluster == "" {
		return nil, errors.New("clusterproxy: RESTConfig needs a cluster name")
	}
	cfg := rest.CopyConfig(base)
	if cfg.Host == "" {
		cfg.Host = "https://" + cluster
	}
	d := c.Dialer(cluster)
	cfg.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialPort(ctx, KubeAPIServerPort)
	}
	cfg.Proxy = d.upgradeProxy
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return resendCut{next: rt} })
	return cfg, nil
}

// dialCluster opens a single-use konnectivity tunnel over the gRPC frontend and dials <cluster>:<port> through it.
// The connection lives until it is closed; closing it ends the tunnel.
func (c *Client) dialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(c.addrs.Frontend)
	tlsCfg, err := c.tlsConfig(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("dial cluster %s: %w", cluster, err)
	}
	f := tunnelclient.Frontend{Address: c.addrs.Frontend, TLS: tlsCfg, Dial: c.resolve.DialContext, Name: c.describe(c.addrs.Frontend),
		NoAgentWait: c.noAgentWait}
	return f.DialCluster(ctx, cluster, port)
}

// describe names an in-cluster address and, when it is resolved elsewhere, where it goes.
func (c *Client) describe(addr string) string {
	if to := c.resolve.Address(addr); to != addr {
		return addr + " (" + to + ")"
	}
	return addr
}
