package userserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// Buffers of the pooled connections; larger than net/http's 4 KiB so a bulk body crosses the tunnel in fewer packets.
// A full write buffer is one DATA packet of the proxy-server's in-process tunnel, whose packets stay under 32 KiB
// (internal/server, maxDataPayload).
const (
	tunnelReadBufferSize  = 32 << 10
	tunnelWriteBufferSize = 32<<10 - 64
)

// pool keeps kept-alive tunnels per cluster, so requests to a cluster share a bounded set of tunnels instead of
// opening one each. It is the ReverseProxy's RoundTripper: a request with a service route in its context goes through
// that route's tunnels, any other to the service-proxy of the cluster its host names.
type pool struct {
	dialer          Dialer
	impersonatorTLS func(cluster string) *tls.Config // nil: no hub users
	mapping         hubidentity.Mapping
	port            int
	maxIdle         int
	maxConns        int
	idleConnTimeout time.Duration
	clock           clock.PassiveClock

	mu       sync.RWMutex // every request reads clusters; only a cluster's first request and sweep write
	clusters map[string]*clusterPool
}

// clusterPool is what the pool keeps for one cluster: the transport to its service-proxy, one per service reached by
// service tunnels, and the slots that bound their tunnels together to maxConns.
type clusterPool struct {
	name  string
	proxy *http.Transport
	// hub carries hub users to the service-proxy: its tunnels are TLS with the impersonator certificate inside, and
	// its requests carry the user as Impersonate-* headers. Made on the cluster's first such request.
	hubMu    sync.Mutex
	hub      *http.Transport
	hubUsers atomic.Pointer[http.RoundTripper] // read by every hub user's request; written once, under hubMu
	slots    chan struct{}                     // one per open tunnel of any of the cluster's transports

	mu       sync.RWMutex // every service request reads services; only a service's first request writes
	services map[ServiceRef]*serviceRoute
	// noTunnelsUntil is when (unix nanoseconds) the cluster's agent is asked again for service tunnels after one
	// answered that it has none (an agent older than the user-server); until then its services take the per-request
	// form, and after it a route opens a tunnel before its request is sent, as on its first use. 0: no agent answered
	// so since the last tunnel opened.
	noTunnelsUntil atomic.Int64
}

func (p *pool) RoundTrip(req *http.Request) (*http.Response, error) {
	r, ok := req.Context().Value(routeKey{}).(*serviceRoute)
	if !ok {
		c := p.cluster(req.URL.Hostname())
		if req.Context().Value(impersonatedKey{}) != nil {
			return p.hubUsers(c).RoundTrip(req)
		}
		return c.proxy.RoundTrip(req)
	}
	// The transport closes the body of a round trip that fails, also when it failed to open the tunnel and read none
	// of it. held keeps that body for the per-request form.
	var held *heldBody
	tunneled := req
	if req.Body != nil && req.Body != http.NoBody {
		held = &heldBody{body: req.Body}
		withHeld := *req
		withHeld.Body = held
		tunneled = &withHeld
	}
	resp, err := r.transport.RoundTrip(tunneled)
	if errors.Is(err, errNoServiceTunnels) && held.take() {
		// The agent was replaced by one without service tunnels after the route learnt its Host. Nothing of the
		// request was sent: it takes the per-request form.
		return r.cluster.proxy.RoundTrip(perRequestForm(req, r.service))
	}
	held.release()
	return resp, err
}

// heldBody is a request body whose Close waits while none of it has been read, until the round trip is over: then
// take hands the untouched body to another round trip, or release lets Close through.
type heldBody struct {
	body io.ReadCloser

	mu       sync.Mutex
	read     bool // a Read was called: the body is spent for another round trip
	settled  bool // take or release was called
	taken    bool
	closeAsk bool // Close was called before the body was settled, with nothing read
	closed   bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.read = true
	taken := b.taken
	b.mu.Unlock()
	if taken {
		return 0, errBodyTaken
	}
	return b.body.Read(p)
}

func (b *heldBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.taken || b.closed:
		return nil // another round trip has the body now, or it is closed already
	case b.read || b.settled:
		b.closed = true
		return b.body.Close()
	}
	b.closeAsk = true
	return nil
}

// take reports whether nothing of the body was read; then the body belongs to the caller, and the held one neither
// reads nor closes it. A request without a body (a nil heldBody) has nothing to lose.
func (b *heldBody) take() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settled = true
	b.taken = !b.read
	return b.taken
}

// release closes the body if Close was called meanwhile; otherwise the next Close does.
func (b *heldBody) release() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settled = true
	if b.closeAsk && !b.closed {
		b.closed = true
		_ = b.body.Close()
	}
}

var errBodyTaken = errors.New("the request body went to another round trip")

// cluster returns the cluster's pool, creating it on first use.
func (p *pool) cluster(name string) *clusterPool {
	return loadOrCreate(&p.mu, p.clusters, name, func() *clusterPool {
		c := &clusterPool{name: name, slots: make(chan struct{}, p.maxConns), services: map[ServiceRef]*serviceRoute{}}
		c.proxy = p.newTransport(func(ctx context.Context) (net.Conn, error) { return p.dial(ctx, c) })
		// The cluster's tunnel series exist from its first request, at zero, so a rate of failures reads 0 rather than
		// nothing until the first one.
		tunnelsOpened.WithLabelValues(name)
		tunnelDialFailures.WithLabelValues(name)
		tunnelsOpen.WithLabelValues(name)
		return c
	})
}

// loadOrCreate returns m[key], or stores and returns create() when key has no entry yet. Lookups, every request's,
// take mu's read lock; only a creation takes the write lock.
func loadOrCreate[K comparable, V any](mu *sync.RWMutex, m map[K]V, key K, create func() V) V {
	mu.RLock()
	v, ok := m[key]
	mu.RUnlock()
	if ok {
		return v
	}
	mu.Lock()
	defer mu.Unlock()
	if v, ok := m[key]; ok {
		return v
	}
	v = create()
	m[key] = v
	return v
}

// hubUsers is c's transport for hub users.
func (p *pool) hubUsers(c *clusterPool) http.RoundTripper {
	if rt := c.hubUsers.Load(); rt != nil {
		return *rt
	}
	c.hubMu.Lock()
	defer c.hubMu.Unlock()
	if rt := c.hubUsers.Load(); rt == nil {
		c.hub = p.newTransport(func(ctx context.Context) (net.Conn, error) {
			conn, err := p.dial(ctx, c)
			if err != nil {
				return nil, err
			}
			tlsConn := tls.Client(conn, p.impersonatorTLS(c.name))
			if err := tlsConn.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
				return nil, fmt.Errorf("TLS with the service-proxy of cluster %s: %w", c.name, err)
			}
			return tlsConn, nil
		})
		rt := hubidentity.Impersonate(p.mapping, c.hub)
		c.hubUsers.Store(&rt)
	}
	return *c.hubUsers.Load()
}

func (p *pool) newTransport(dial func(context.Context) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:       nil, // the tunnel is the only way to the cluster; no environment proxy applies
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
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
}

// dial opens a tunnel to the cluster's service-proxy once one of the cluster's slots is free. When none is, the idle
// tunnels of the cluster's transports are closed first: they would otherwise hold the slots another transport of the
// cluster waits for until they expire.
func (p *pool) dial(ctx context.Context, c *clusterPool) (net.Conn, error) {
	select {
	case c.slots <- struct{}{}:
	default:
		c.closeIdle()
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("open a tunnel to cluster %s: %w", c.name, ctx.Err())
		}
	}
	conn, err := p.dialer.DialCluster(ctx, c.name, p.port)
	if err != nil {
		<-c.slots
		tunnelDialFailures.WithLabelValues(c.name).Inc()
		return nil, fmt.Errorf("open a tunnel to cluster %s: %w", c.name, err)
	}
	tunnelsOpened.WithLabelValues(c.name).Inc()
	open := tunnelsOpen.WithLabelValues(c.name)
	open.Inc()
	return &countedConn{Conn: conn, onClose: func() {
		open.Dec()
		<-c.slots
	}}, nil
}

// sweep drops the pools of clusters that are gone and closes the idle tunnels of clusters whose agent is not
// connected (they lead nowhere). A request that picked a transport just before it was dropped still completes; its
// tunnel then expires after the idle timeout.
func (p *pool) sweep(clusters Clusters) {
	p.mu.RLock()
	snapshot := make([]*clusterPool, 0, len(p.clusters))
	for _, c := range p.clusters {
		snapshot = append(snapshot, c)
	}
	p.mu.RUnlock()
	// Clusters is asked without the lock held, so requests are not held up meanwhile.
	for _, c := range snapshot {
		switch {
		case !clusters.Known(c.name):
			p.mu.Lock()
			if p.clusters[c.name] == c {
				delete(p.clusters, c.name)
			}
			p.mu.Unlock()
			c.closeIdle()
		case !clusters.Connected(c.name):
			c.closeIdle()
		}
	}
}

func (p *pool) closeIdle() {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, c := range p.clusters {
		c.closeIdle()
	}
}

func (c *clusterPool) closeIdle() {
	c.proxy.CloseIdleConnections()
	if hub := c.hubTransport(); hub != nil {
		hub.CloseIdleConnections()
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, r := range c.services {
		r.closeIdle()
	}
}

// hubTransport is the transport for hub users once one was made, else nil.
func (c *clusterPool) hubTransport() *http.Transport {
	c.hubMu.Lock()
	defer c.hubMu.Unlock()
	return c.hub
}

// countedConn keeps cluster_proxy_user_server_tunnels_open and the cluster's slots right however often it is closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.onClose)
	return c.Conn.Close()
}
