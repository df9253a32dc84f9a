package server

import (
	"context"
	"slices"
	"sync"

	anpserver "sigs.k8s.io/apiserver-network-proxy/pkg/server"
)

// newestBackends is ANP's destHost backend manager, except that a dial goes to the agent of the cluster that connected
// last rather than to the first one still registered.
//
// An agent that dies behind a forward proxy sends no FIN: the proxy holds its connection open, and the proxy-server
// keeps it registered until the keepalive drops it (AgentKeepaliveTime plus gRPC's ping timeout, about a minute).
// ANP's choice of the first backend sent every dial to such an agent while its replacement was connected: the
// cluster was unreachable until the dead agent was dropped. The replacement connected after the dead agent, so the
// newest backend is the one most likely alive. Draining backends are chosen only when nothing else is left, as ANP
// does.
type newestBackends struct {
	*anpserver.DestHostBackendManager

	mu sync.RWMutex
	// byHost lists each host identifier's backends in the order they connected.
	byHost map[string][]*anpserver.Backend
}

func newNewestBackends() *newestBackends {
	return &newestBackends{DestHostBackendManager: anpserver.NewDestHostBackendManager(), byHost: map[string][]*anpserver.Backend{}}
}

func (m *newestBackends) AddBackend(b *anpserver.Backend) {
	m.DestHostBackendManager.AddBackend(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, host := range b.GetAgentIdentifiers().Host {
		if !slices.Contains(m.byHost[host], b) {
			m.byHost[host] = append(m.byHost[host], b)
		}
	}
}

func (m *newestBackends) RemoveBackend(b *anpserver.Backend) {
	m.DestHostBackendManager.RemoveBackend(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, host := range b.GetAgentIdentifiers().Host {
		m.byHost[host] = slices.DeleteFunc(m.byHost[host], func(x *anpserver.Backend) bool { return x == b })
		if len(m.byHost[host]) == 0 {
			delete(m.byHost, host)
		}
	}
}

// Backend is the newest non-draining backend of the host ANP's destHost manager answers for; that manager reads the
// dial's host from a context key of its own.
func (m *newestBackends) Backend(ctx context.Context) (*anpserver.Backend, error) {
	first, err := m.DestHostBackendManager.Backend(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, host := range first.GetAgentIdentifiers().Host {
		backends := m.byHost[host]
		for i := len(backends) - 1; i >= 0; i-- {
			if !backends[i].IsDraining() {
				return backends[i], nil
			}
		}
	}
	return first, nil
}
