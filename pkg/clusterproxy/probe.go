package clusterproxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"
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
	start := time.Now()
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.dialCluster(ctx, cluster, KubeAPIServerPort)
		},
		// The kube-apiserver's certificate names its own hosts, never the cluster name the tunnel is addressed by, and
		// the hub does not hold the cluster's CA. The tunnel already ends at the agent bound to this cluster's
		// certificate; the probe sends no credentials and reads only the health text.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
		DisableKeepAlives: true,
		Proxy:             nil,
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"https://"+net.JoinHostPort(cluster, strconv.Itoa(KubeAPIServerPort))+"/healthz", nil)
	if err != nil {
		return ProbeResult{}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return ProbeResult{Latency: time.Since(start)}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	result := ProbeResult{Latency: time.Since(start)}
	if err != nil {
		return result, fmt.Errorf("probe cluster %s: read /healthz: %w", cluster, err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		result.Message = fmt.Sprintf("GET /healthz answered %s: %.100q", resp.Status, body)
		return result, nil
	}
	result.Healthy = true
	return result, nil
}

// agentsView is the body of the proxy-server's GET /agents (docs/data-plane.md, "Connected agents").
type agentsView struct {
	Clusters map[string]struct {
		Agents []string `json:"agents"`
	} `json:"clusters"`
}

// ConnectedAgents asks a proxy-server (GET /agents on its HTTP-CONNECT port, with the proxy-client certificate) which
// agents are connected, and returns their IDs by cluster, sorted.
func (c *Client) ConnectedAgents(ctx context.Context) (map[string][]string, error) {
	host, _, _ := net.SplitHostPort(c.connectAddr)
	tlsCfg, err := c.tlsConfig(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("connected agents: %w", err)
	}
	transport := &http.Transport{DialContext: c.resolve.DialContext, TLSClientConfig: tlsCfg, Proxy: nil}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.connectAddr+"/agents", nil)
	if err != nil {
		return nil, fmt.Errorf("connected agents: %w", err)
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("connected agents from %s: %w", c.describe(c.connectAddr), err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("connected agents from %s: %s: %s", c.describe(c.connectAddr), resp.Status, body)
	}
	var v agentsView
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&v); err != nil {
		return nil, fmt.Errorf("connected agents from %s: decode: %w", c.describe(c.connectAddr), err)
	}
	out := make(map[string][]string, len(v.Clusters))
	for cluster, a := range v.Clusters {
		ids := slices.Clone(a.Agents)
		slices.Sort(ids)
		out[cluster] = ids
	}
	return out, nil
}
