package userserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Buffers of the pooled connections; larger than net/http's 4 KiB so a bulk body crosses the tunnel in fewer packets.
// A full write buffer is one DATA packet of the proxy-server's in-process tunnel, whose packets stay under 32 KiB
// (internal/dataplane/server, maxDataPayload).
const (
	tunnelReadBufferSize  = 32 << 10
	tunnelWriteBufferSize = 32<<10 - 64
)

// pool keeps one http.Transport per cluster, so requests to a cluster share a bounded set of kept-alive tunnels
// instead of opening one each. It is the ReverseProxy's RoundTripper; the request's host is the cluster.
type pool struct {
	dialer          Dialer
	port            int
	maxIdle         int
	maxConns        int
	idleConnTimeout time.Duration

	mu         sync.RWMutex // every request reads transports; only a cluster's first request and sweep write
	transports map[string]*http.Transport
}

func (p *pool) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.transport(req.URL.Hostname()).RoundTrip(req)
}

// transport returns the cluster's transport, creating it on first use.
func (p *pool) transport(cluster string) *http.Transport {
	p.mu.RLock()
	t, ok := p.transports[cluster]
	p.mu.RUnlock()
	if ok {
		return t
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.transports[cluster]; ok {
		return t
	}
	t = &http.Transport{
		Proxy: nil, // the tunnel is the only way to the cluster; no environment proxy applies
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.dial(ctx, cluster)
		},
		// HTTP/1.1 only: SPDY and websocket upgrades need it, and the service-proxy speaks plain HTTP/1.1.
		ForceAttemptHTTP2:     false,
		MaxIdleConnsPerHost:   p.maxIdle,
		MaxConnsPerHost:       p.maxConns,
		IdleConnTimeout:       p.idleConnTimeout,
		ExpectContinueTimeout: time.Second,
		// Pass bodies through as they are; the transport must not negotiate and undo compression on its own.
		DisableCompression: true,
		WriteBufferSize:    tunnelWriteBufferSize,
		ReadBufferSize:     tunnelReadBufferSize,
	}
	p.transports[cluster] = t
	return t
}

func (p *pool) dial(ctx context.Context, cluster string) (net.Conn, error) {
	c, err := p.dialer.DialCluster(ctx, cluster, p.port)
	if err != nil {
		tunnelDialFailures.WithLabelValues(cluster).Inc()
		return nil, fmt.Errorf("open a tunnel to cluster %s: %w", cluster, err)
	}
	tunnelsOpened.WithLabelValues(cluster).Inc()
	open := tunnelsOpen.WithLabelValues(cluster)
	open.Inc()
	return &countedConn{Conn: c, onClose: open.Dec}, nil
}

// sweep drops the transports of clusters that are gone and closes the idle tunnels of clusters whose agent is not
// connected (they lead nowhere). A request that picked a transport just before it was dropped still completes; its
// tunnel then expires after the idle timeout.
func (p *pool) sweep(clusters Clusters) {
	p.mu.Lock()
	snapshot := make(map[string]*http.Transport, len(p.transports))
	for cluster, t := range p.transports {
		snapshot[cluster] = t
	}
	p.mu.Unlock()
	// Clusters is asked without the lock held, so requests are not held up meanwhile.
	for cluster, t := range snapshot {
		switch {
		case !clusters.Known(cluster):
			p.mu.Lock()
			if p.transports[cluster] == t {
				delete(p.transports, cluster)
			}
			p.mu.Unlock()
			t.CloseIdleConnections()
		case !clusters.Connected(cluster):
			t.CloseIdleConnections()
		}
	}
}

func (p *pool) closeIdle() {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, t := range p.transports {
		t.CloseIdleConnections()
	}
}

// countedConn keeps cluster_proxy_user_server_tunnels_open right however often it is closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.onClose)
	return c.Conn.Close()
}
