package server

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// newestBackends holds the agent streams by the hosts they serve, and chooses the agent of a dial: the one of the
// host that connected last, rather than the first one still registered as ANP does.
//
// An agent that dies behind a forward proxy sends no FIN: the proxy holds its connection open, and the proxy-server
// keeps it registered until the keepalive drops it (AgentKeepaliveTime plus gRPC's ping timeout, about a minute).
// The first backend would send every dial to such an agent while its replacement is connected: the cluster would be
// unreachable until the dead agent was dropped. The replacement connected after the dead agent, so the newest backend
// is the one most likely alive. Draining agents are chosen only when nothing else is left.
//
// A host whose last backend left less than reconnectWait ago is reconnecting: its agents lost their streams together
// (their forward proxy restarted, the network blinked) and are on their way back. A dial to it waits for them (await)
// instead of failing with "No agent available".
type newestBackends struct {
	clock         clock.Clock
	reconnectWait time.Duration

	mu sync.RWMutex
	// byHost lists each host's backends in the order they connected.
	byHost map[string][]*backend
	// left is when each host without a backend lost its last one, for reconnectWait.
	left map[string]time.Time
	// arrived is closed, and replaced, when a backend is added.
	arrived chan struct{}
}

func newNewestBackends(clk clock.Clock, reconnectWait time.Duration) *newestBackends {
	return &newestBackends{clock: clk, reconnectWait: reconnectWait, byHost: map[string][]*backend{},
		left: map[string]time.Time{}, arrived: make(chan struct{})}
}

func (m *newestBackends) add(b *backend) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, host := range b.hosts {
		if !slices.Contains(m.byHost[host], b) {
			m.byHost[host] = append(m.byHost[host], b)
		}
		delete(m.left, host)
	}
	close(m.arrived)
	m.arrived = make(chan struct{})
	agentStreams.Inc()
}

func (m *newestBackends) remove(b *backend) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for host, at := range m.left {
		if now.Sub(at) >= m.reconnectWait {
			delete(m.left, host)
		}
	}
	for _, host := range b.hosts {
		m.byHost[host] = slices.DeleteFunc(m.byHost[host], func(x *backend) bool { return x == b })
		if len(m.byHost[host]) == 0 {
			delete(m.byHost, host)
			if m.reconnectWait > 0 {
				m.left[host] = now
			}
		}
	}
	agentStreams.Dec()
}

// reconnecting reports whether host has no backend and lost its last one less than reconnectWait ago.
func (m *newestBackends) reconnecting(host string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	left, ok := m.left[host]
	return ok && m.clock.Since(left) < m.reconnectWait
}

// await is the newest non-draining backend of host, else the newest draining one (pickLocked), except for a
// reconnecting host without one: it waits until a backend of it is added, reconnectWait has passed
// since it lost its last one, or ctx ends. It returns nil when host has no backend then.
func (m *newestBackends) await(ctx context.Context, host string) *backend {
	for {
		m.mu.RLock()
		b := m.pickLocked(host)
		left, ok := m.left[host]
		arrived := m.arrived
		m.mu.RUnlock()
		if b != nil || !ok {
			return b
		}
		rest := m.reconnectWait - m.clock.Since(left)
		if rest <= 0 {
			return nil
		}
		t := m.clock.NewTimer(rest)
		select {
		case <-arrived:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
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

// pickLocked is the newest non-draining backend of host, else the newest draining one; nil when host has none.
func (m *newestBackends) pickLocked(host string) *backend {
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
