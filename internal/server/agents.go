package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
)

// Agents is the set of agent streams the agent endpoint accepted and that are still open, by cluster.
type Agents struct {
	mu sync.RWMutex
	// connected lists each cluster's agents with open streams. A cluster has one agent, or two while it rolls, so a
	// short list costs less per cluster than a map would.
	connected map[string][]agentStreamCount
	known     map[string]bool // clusters that connected at least once since start
	// reconnecting tells whether a cluster lost its last agent less than the reconnect wait ago (the router's
	// newestBackends.reconnecting: a cluster is the host its agents serve); nil: never.
	reconnecting func(cluster string) bool
}

// agentStreamCount counts the open streams of one agent.
type agentStreamCount struct {
	id      string
	streams int
}

// NewAgents is an empty set.
func NewAgents() *Agents {
	return &Agents{connected: map[string][]agentStreamCount{}, known: map[string]bool{}}
}

// add records an accepted stream of an agent.
func (a *Agents) add(cluster, agentID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := a.connected[cluster]
	if i := slices.IndexFunc(ids, func(s agentStreamCount) bool { return s.id == agentID }); i >= 0 {
		ids[i].streams++
	} else {
		a.connected[cluster] = append(ids, agentStreamCount{id: agentID, streams: 1})
	}
	a.known[cluster] = true
}

// remove forgets a stream that add recorded.
func (a *Agents) remove(cluster, agentID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := a.connected[cluster]
	i := slices.IndexFunc(ids, func(s agentStreamCount) bool { return s.id == agentID })
	if i < 0 {
		return
	}
	if ids[i].streams--; ids[i].streams <= 0 {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(a.connected, cluster)
	} else {
		a.connected[cluster] = ids
	}
}

// Connected reports whether at least one agent of cluster has an open stream.
func (a *Agents) Connected(cluster string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.connected[cluster]) > 0
}

// Reconnecting reports whether cluster has no agent connected and lost its last one so recently that a dial to it
// waits for one to connect.
func (a *Agents) Reconnecting(cluster string) bool {
	return !a.Connected(cluster) && a.reconnecting != nil && a.reconnecting(cluster)
}

// Known reports whether an agent of cluster connected at least once since this process started.
func (a *Agents) Known(cluster string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.known[cluster]
}

// ClusterCount is the number of clusters with a connected agent.
func (a *Agents) ClusterCount() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.connected)
}

// Snapshot is the connected agent IDs by cluster, sorted.
func (a *Agents) Snapshot() map[string][]string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make(map[string][]string, len(a.connected))
	for cluster, ids := range a.connected {
		list := make([]string, 0, len(ids))
		for _, s := range ids {
			list = append(list, s.id)
		}
		slices.Sort(list)
		out[cluster] = list
	}
	return out
}

// AgentsView is the body of GET /agents.
type AgentsView struct {
	Clusters map[string]ClusterAgents `json:"clusters"`
}

// ClusterAgents lists the connected agents of one cluster.
type ClusterAgents struct {
	Agents []string `json:"agents"`
}

// View is the snapshot in the shape GET /agents serves.
func (a *Agents) View() AgentsView {
	snap := a.Snapshot()
	v := AgentsView{Clusters: make(map[string]ClusterAgents, len(snap))}
	for cluster, ids := range snap {
		v.Clusters[cluster] = ClusterAgents{Agents: ids}
	}
	return v
}

// ServeHTTP answers GET /agents.
func (a *Agents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(a.View())
}
