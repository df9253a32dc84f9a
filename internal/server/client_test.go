package server

// Client-side helpers of the tests: hub programs use pkg/clusterproxy, which speaks the same protocols; these let the
// server's own tests reach it the same way without importing that package's hub-reading client.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

// Dialer opens a connection to port on a managed cluster through its agent: *Server in process, *TunnelDialer over
// the mTLS frontend.
type Dialer interface {
	DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error)
}

var _ Dialer = (*Server)(nil)

// kubeAPIServerPort is the port agents map to their cluster's kube-apiserver.
const kubeAPIServerPort = 443

// Probe asks cluster's kube-apiserver for /healthz through a tunnel and reports whether it answered "ok", and how long
// the whole exchange (tunnel included) took.
func Probe(ctx context.Context, d Dialer, cluster string) (ok bool, latency time.Duration, err error) {
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialCluster(ctx, cluster, kubeAPIServerPort)
		},
		// The kube-apiserver's serving certificate names its own hosts, never the cluster name the tunnel is addressed
		// by, and the hub does not hold the cluster's CA here. The tunnel already ends at the agent bound to this
		// cluster's certificate; the probe sends no credentials and reads only the health text.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
		DisableKeepAlives: true,
		ForceAttemptHTTP2: false,
	}
	defer transport.CloseIdleConnections()

	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(cluster, strconv.Itoa(kubeAPIServerPort))+"/healthz", nil)
	if err != nil {
		return false, 0, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return false, time.Since(start), fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	latency = time.Since(start)
	if err != nil {
		return false, latency, fmt.Errorf("probe cluster %s: read /healthz: %w", cluster, err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return false, latency, fmt.Errorf("probe cluster %s: /healthz answered %s: %.100q", cluster, resp.Status, body)
	}
	return true, latency, nil
}

// TunnelDialer reaches managed clusters through a proxy-server's gRPC frontend, the way hub programs do: one
// single-use konnectivity tunnel per connection.
type TunnelDialer struct {
	// Address is the frontend's host:port, e.g. proxy-entrypoint.<ns>.svc:8090.
	Address string
	// TLS presents the proxy-client certificate and verifies the proxy-server; tlsreload's ClientConfig keeps both
	// current.
	TLS *tls.Config
}

var _ Dialer = (*TunnelDialer)(nil)

// DialCluster opens a tunnel and dials <cluster>:<port> through it; ctx bounds the dial only.
func (d *TunnelDialer) DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, context.Background(), d.Address,
		grpc.WithTransportCredentials(credentials.NewTLS(d.TLS)),
		// Below the server's enforcement minimum (5 minutes) the server would close the connection.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Minute}),
	)
	if err != nil {
		return nil, fmt.Errorf("tunnel to %s for cluster %s: %w", d.Address, cluster, err)
	}
	conn, err := tunnel.DialContext(ctx, "tcp", net.JoinHostPort(cluster, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("dial cluster %s port %d through %s: %w", cluster, port, d.Address, err)
	}
	return conn, nil
}

// FetchAgents reads GET /agents from a proxy-server's HTTP-CONNECT listener; baseURL is like https://host:8094 and
// client carries the proxy-client certificate.
func FetchAgents(ctx context.Context, client *http.Client, baseURL string) (*AgentsView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/agents", nil)
	if err != nil {
		return nil, fmt.Errorf("connected agents: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("connected agents: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("connected agents: %s: %s", resp.Status, body)
	}
	var v AgentsView
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&v); err != nil {
		return nil, fmt.Errorf("connected agents: decode: %w", err)
	}
	return &v, nil
}
