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

	// losses tells the in-process dials waiting on a host that one of its backends went.
	losses hostLosses
}

func newNewestBackends() *newestBackends {
	return &newestBackends{
		DestHostBackendManager: anpserver.NewDestHostBackendManager(),
		byHost:                 map[string][]*anpserver.Backend{},
		losses:                 hostLosses{watched: map[string]*hostLoss{}},
	}
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

// RemoveBackend forgets b, then wakes the in-process dials waiting on its hosts: a dial made again cannot choose it.
func (m *newestBackends) RemoveBackend(b *anpserver.Backend) {
	m.DestHostBackendManager.RemoveBackend(b)
	hosts := b.GetAgentIdentifiers().Host
	m.mu.Lock()
	for _, host := range hosts {
		m.byHost[host] = slices.DeleteFunc(m.byHost[host], func(x *anpserver.Backend) bool { return x == b })
		if len(m.byHost[host]) == 0 {
			delete(m.byHost, host)
		}
	}
	m.mu.Unlock()
	for _, host := range hosts {
		m.losses.lost(host)
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

// hostLosses is how an in-process dial learns that a backend of its host went while the dial waited for its answer.
// ANP does not answer the dials pending on a backend that goes (its TODO #126): a dial sent to an agent stream that
// then ended would wait for its context, or for the in-process backstop. The dial does not know which backend ANP
// chose, so the loss of any backend of its host makes it dial again; a dial that was in fact answered elsewhere is
// closed at the agent by the DIAL_CLS the give-up sends.
type hostLosses struct {
	mu      sync.Mutex
	watched map[string]*hostLoss
}

type hostLoss struct {
	lost     chan struct{} // closed when a backend of the host goes
	watchers int
}

// watch returns a channel closed when a backend of host goes, and the func that ends the watch.
func (l *hostLosses) watch(host string) (lost <-chan struct{}, unwatch func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.watched[host]
	if w == nil {
		w = &hostLoss{lost: make(chan struct{})}
		l.watched[host] = w
	}
	w.watchers++
	return w.lost, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.watchers--; w.watchers == 0 && l.watched[host] == w {
			delete(l.watched, host)
		}
	}
}

// lost wakes the watchers of host; later watches wait for the next loss.
func (l *hostLosses) lost(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.watched[host]; w != nil {
		close(w.lost)
		delete(l.watched, host)
	}
}
