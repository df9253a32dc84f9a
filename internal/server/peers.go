package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// Defaults of the peer wait.
const (
	// DefaultPeerWait bounds how long a new replica holds its readiness back for the agents its peers hold: agents
	// that lost a replica reach the next one within a few seconds, so a cluster still missing after this is one
	// whose agents cannot reach this replica, and waiting longer would only keep a serving replica out.
	DefaultPeerWait         = 30 * time.Second
	DefaultPeerPollInterval = time.Second
)

// ErrNoPeer is what PeerClusters returns when no replica is Ready to answer.
var ErrNoPeer = errors.New("no ready proxy-server replica to ask")

// PeerClusters asks a Ready replica of the same proxy-servers which clusters it holds agents of.
type PeerClusters func(ctx context.Context) ([]string, error)

// PeerClustersAt asks GET /agents at addr, the HTTP-CONNECT port of the proxy-servers' client Service, which routes
// only to Ready replicas: while this replica is not Ready, the answer is a peer's. clientTLS gives the client
// configuration (the proxy-client certificate) and is called on every ask, so renewed files are read. A refused
// connection is ErrNoPeer: a Service without a ready endpoint refuses.
func PeerClustersAt(addr string, clientTLS func() (*tls.Config, error)) PeerClusters {
	return func(ctx context.Context) ([]string, error) {
		cfg, err := clientTLS()
		if err != nil {
			return nil, err
		}
		// A new connection each time, so that each ask may reach another peer.
		transport := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, Proxy: nil}
		defer transport.CloseIdleConnections()
		agents, err := tunnelclient.ConnectedAgents(ctx, &http.Client{Transport: transport}, "https://"+addr)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, ErrNoPeer
		}
		if err != nil {
			return nil, err
		}
		clusters := make([]string, 0, len(agents))
		for cluster, ids := range agents {
			if len(ids) > 0 {
				clusters = append(clusters, cluster)
			}
		}
		slices.Sort(clusters)
		return clusters, nil
	}
}

// awaitPeers turns the server Ready once it holds an agent of every cluster the peer it asks holds, when no peer is
// Ready, or when PeerWait has passed since start, whichever comes first. Without Peers it is Ready at once. The wait
// happens once, after start: a Ready replica never turns unready because a peer holds a cluster it does not.
func (s *Server) awaitPeers(ctx context.Context) {
	if s.opts.Peers == nil {
		s.ready.Store(true)
		return
	}
	log := s.log.WithValues("peerWait", s.opts.PeerWait.String())
	clk := s.opts.Clock
	deadline := clk.Now().Add(s.opts.PeerWait)
	for {
		missing, err := s.missingFromPeer(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNoPeer):
			log.Info("Ready: no other replica is Ready, so none holds an agent this one lacks")
		case err == nil && len(missing) == 0:
			log.Info("Ready: this replica holds an agent of every cluster its peer holds", "clusters", s.agents.ClusterCount())
		case !clk.Now().Before(deadline):
			keys := []any{"missingClusters", len(missing), "someMissing", missing[:min(3, len(missing))]}
			if err != nil {
				keys = []any{"error", err.Error()}
			}
			log.Info("Ready after the peer wait, without every cluster its peer holds", keys...)
		default:
			select {
			case <-ctx.Done():
				return
			case <-clk.After(s.opts.PeerPollInterval):
			}
			continue
		}
		s.ready.Store(true)
		return
	}
}

// missingFromPeer is the clusters a peer holds agents of and this replica does not.
func (s *Server) missingFromPeer(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.PeerPollInterval+5*time.Second)
	defer cancel()
	clusters, err := s.opts.Peers(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(clusters, s.agents.Connected), nil
}
