package server

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

// Dialer opens a connection to port on a managed cluster through its agent. *Server (in process) and *TunnelDialer
// (over the mTLS frontend) implement it; so does what internal/userserver calls a Dialer.
type Dialer interface {
	DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error)
}

var _ Dialer = (*Server)(nil)

// DialCluster opens a single-use tunnel over the in-process frontend and dials <cluster>:<port> through it. The
// frontend is an in-memory gRPC server without TLS, so a tunnel costs an HTTP/2 preface and a stream, not a TCP and
// TLS handshake. ctx bounds the dial only; the connection lives until it is closed or the server shuts down.
func (s *Server) DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, s.tunnelCtx, "passthrough:///in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return s.inProcessListener.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		return nil, fmt.Errorf("in-process tunnel for cluster %s: %w", cluster, err)
	}
	conn, err := tunnel.DialContext(ctx, "tcp", net.JoinHostPort(cluster, strconv.Itoa(port)))
	if err != nil {
		// A failed dial closes the single-use tunnel.
		return nil, fmt.Errorf("dial cluster %s port %d: %w", cluster, port, err)
	}
	return conn, nil
}
