package clusteragent

import (
	"context"
	"time"
)

// TunnelSource reports what the proxy-servers see of a cluster's tunnels. The data plane implements it (agents
// connected per cluster, and a GET /healthz through the tunnel); until one is configured, the tunnel conditions
// are Unknown.
type TunnelSource interface {
	// ConnectedAgents is the number of agent replicas of cluster connected to the proxy-servers.
	ConnectedAgents(ctx context.Context, cluster string) (int, error)
	// Probe sends GET /healthz to cluster's kube-apiserver through its tunnel.
	Probe(ctx context.Context, cluster string) (ProbeResult, error)
}

// ProbeResult is one health probe through a tunnel.
type ProbeResult struct {
	Healthy bool
	Latency time.Duration
	Message string
}
