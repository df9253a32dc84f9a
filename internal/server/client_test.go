package server

// Client-side helpers of the tests. Hub programs reach the proxy-server through pkg/clusterproxy, which runs
// internal/contract/tunnelclient; these tests run that same code with the fixture's addresses and certificates.

import (
	"context"
	"net"
	"net/http"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// Dialer opens a connection to port on a managed cluster through its agent: *Server in process, *TunnelDialer over
// the mTLS frontend.
type Dialer interface {
	DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error)
}

var _ Dialer = (*Server)(nil)

// TunnelDialer reaches managed clusters through a proxy-server's gRPC frontend (Address, with TLS presenting the
// proxy-client certificate) the way hub programs do: one single-use konnectivity tunnel per connection.
type TunnelDialer = tunnelclient.Frontend

var _ Dialer = (*TunnelDialer)(nil)

// FetchAgents reads GET /agents from a proxy-server's HTTP-CONNECT listener as hub programs do; baseURL is like
// https://host:8094 and client carries the proxy-client certificate.
func FetchAgents(ctx context.Context, client *http.Client, baseURL string) (*AgentsView, error) {
	agents, err := tunnelclient.ConnectedAgents(ctx, client, baseURL)
	if err != nil {
		return nil, err
	}
	v := &AgentsView{Clusters: make(map[string]ClusterAgents, len(agents))}
	for cluster, ids := range agents {
		v.Clusters[cluster] = ClusterAgents{Agents: ids}
	}
	return v, nil
}
