package server

import (
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"sync"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// Caps on what one client certificate or one agent stream may hold, so that no caller grows the proxy-server's work
// without bound; each refusal is counted in cluster_proxy_server_limit_refusals_total{limit}.
const (
	// DefaultMaxStreamsPerClient bounds the gRPC streams and CONNECT tunnels one client certificate holds at once on
	// a replica. Every hub program of the existing addon shares proxy-client, so the bound is the fleet's, not a
	// program's.
	DefaultMaxStreamsPerClient = 10000
	// DefaultMaxConnectionsPerAgent bounds the connections one agent stream carries, established and dialing.
	DefaultMaxConnectionsPerAgent = 10000
	// DefaultMaxPendingDialsPerAgent bounds the dials one agent stream has not answered yet.
	DefaultMaxPendingDialsPerAgent = 1000
)

// The limit label of cluster_proxy_server_limit_refusals_total.
const (
	limitStreamsPerClient     = "streams_per_client"
	limitConnectionsPerAgent  = "connections_per_agent"
	limitPendingDialsPerAgent = "pending_dials_per_agent"
)

var limitNames = []string{limitStreamsPerClient, limitConnectionsPerAgent, limitPendingDialsPerAgent}

// errAgentBusy answers a dial to an agent stream that holds as many connections or unanswered dials as allowed.
var errAgentBusy = packet.ErrAgentBusy

// agentLimits are the per-agent caps; zero values take the defaults.
type agentLimits struct {
	connections, pendingDials int
}

func (l agentLimits) withDefaults() agentLimits {
	if l.connections <= 0 {
		l.connections = DefaultMaxConnectionsPerAgent
	}
	if l.pendingDials <= 0 {
		l.pendingDials = DefaultMaxPendingDialsPerAgent
	}
	return l
}

// clientStreams counts the frontend streams each client certificate holds, by the SHA-256 of the certificate.
type clientStreams struct {
	max int

	mu   sync.Mutex
	held map[[sha256.Size]byte]int
}

func newClientStreams(max int) *clientStreams {
	if max <= 0 {
		max = DefaultMaxStreamsPerClient
	}
	return &clientStreams{max: max, held: map[[sha256.Size]byte]int{}}
}

// acquire counts one more stream of cert, or refuses it with an error for the client when cert holds max already;
// release gives it back.
func (c *clientStreams) acquire(cert *x509.Certificate) (release func(), err error) {
	var key [sha256.Size]byte
	if cert != nil {
		key = sha256.Sum256(cert.Raw)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[key] >= c.max {
		limitRefusals.WithLabelValues(limitStreamsPerClient).Inc()
		return nil, fmt.Errorf("this client certificate holds %d streams on this proxy-server already, the most it may "+
			"(--max-streams-per-client)", c.max)
	}
	c.held[key]++
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.held[key]--; c.held[key] <= 0 {
			delete(c.held, key)
		}
	}), nil
}
