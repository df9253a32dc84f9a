package server

import (
	"slices"
	"sync"
)

// newestBackends holds the agent streams by the hosts they serve, and chooses the agent of a dial: the one of the
// host that connected last, rather than the first one still registered as ANP does.
//
// An agent that dies behind a forward proxy sends no FIN: the proxy holds its connection open, and the proxy-server
// keeps it registered until the keepalive drops it (AgentKeepaliveTime plus gRPC's ping timeout, about a minute).
// The first backend would send every dial to such an agent while its replacement is connected: the cluster would be
// unreachable until the dead agent was dropped. The replacement connected after the dead agent, so the newest backend
// is the one most likely alive. Draining agents are chosen only when nothing else is left.
type newestBackends struct {
	mu sync.RWMutex
	// byHost lists each host's backends in the order they connected.
	byHost map[string][]*backend
}

func newNewestBackends() *newestBackends {
	return &newestBackends{byHost: map[string][]*backend{}}
}

func (m *newestBackends) add(b *backend) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, host := range b.hosts {
		if !slices.Contains(m.byHost[host], b) {
			m.byHost[host] = append(m.byHost[host], b)
		}
	}
	agentStreams.Inc()
}

func (m *newestBackends) remove(b *backend) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, host := range b.hosts {
		m.byHost[host] = slices.DeleteFunc(m.byHost[host], func(x *backend) bool { return x == b })
		if len(m.byHost[host]) == 0 {
			delete(m.byHost, host)
		}
	}
	agentStreams.Dec()
}

// all is every backend, once each.
func (m *newestBackends) all() []*backend {
	m.mu.RLock()
	defer m.mu.RUnlock()
	seen := map[*backend]bool{}
	var out []*backend
	for _, backends := range m.byHost {
		for _, b := range backends {
			if !seen[b] {
				seen[b] = true
				out = append(out, b)
			}
		}
	}
	return out
}

// pick is the newest non-draining backend of host, else the newest draining one; nil when host has none.
func (m *newestBackends) pick(host string) *backend {
	m.mu.RLock()
	defer m.mu.RUnlock()
	backends := m.byHost[host]
	for i := len(backends) - 1; i >= 0; i-- {
		if !backends[i].draining.Load() {
			return backends[i]
		}
	}
	if len(backends) > 0 {
		return backends[len(backends)-1]
	}
	return nil
}
