package clusterproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/tunnelclient"
)

// ProbeResult is a GET /healthz sent to a cluster's kube-apiserver through its tunnel.
type ProbeResult struct {
	// Healthy is true when the kube-apiserver answered 200 "ok".
	Healthy bool
	// Latency is how long the whole exchange took, the tunnel's set-up included.
	Latency time.Duration
	// Message says what the kube-apiserver answered instead of "ok".
	Message string
}

// Probe sends GET /healthz to cluster's kube-apiserver through its tunnel. The error is set when no answer came
// (no agent connected, the tunnel or the dial failed, ctx ended); an answer other than 200 "ok" is an unhealthy
// result, not an error.
func (c *Client) Probe(ctx context.Context, cluster string) (ProbeResult, error) {
	result, err := tunnelclient.Probe(ctx, c.dialCluster, cluster)
	return ProbeResult(result), err
}

// ConnectedAgents asks a proxy-server (GET /agents on its HTTP-CONNECT port, with the proxy-client certificate) which
// agents are connected, and returns their IDs by cluster, sorted.
func (c *Client) ConnectedAgents(ctx context.Context) (map[string][]string, error) {
	host, _, _ := net.SplitHostPort(c.addrs.HTTPConnect)
	tlsCfg, err := c.tlsConfig(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("connected agents: %w", err)
	}
	transport := &http.Transport{DialContext: c.resolve.DialContext, TLSClientConfig: tlsCfg, Proxy: nil}
	defer transport.CloseIdleConnections()
	agents, err := tunnelclient.ConnectedAgents(ctx, &http.Client{Transport: transport}, "https://"+c.addrs.HTTPConnect)
	if err != nil {
		return nil, fmt.Errorf("connected agents from %s: %w", c.describe(c.addrs.HTTPConnect), err)
	}
	return agents, nil
}
