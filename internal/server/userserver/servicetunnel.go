package userserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

const (
	// serviceTunnelTimeout bounds opening a service tunnel: the tunnel, the CONNECT and the service-proxy's
	// connection to the service.
	serviceTunnelTimeout = 30 * time.Second
	// noTunnelsRetry is how long a cluster whose agent answered without service tunnels is not asked again: an
	// agent is upgraded after the hub, so the answer changes once it is.
	noTunnelsRetry = time.Minute
	// maxRefusalBody bounds the service-proxy's refusal body that is passed on.
	maxRefusalBody = 64 << 10
)

// errNoServiceTunnels is the answer of a service-proxy that predates service tunnels.
var errNoServiceTunnels = errors.New("the agent's service-proxy has no service tunnels")

// serviceRoute is a plain-http service of a cluster reached by service tunnels: a tunnel to the cluster's
// service-proxy that a CONNECT with the service's Cluster-Proxy-* headers turned into a connection to the service.
// Requests go through such tunnels as they are, so the service-proxy does not parse them again, and a kept-alive
// tunnel serves request after request of that service.
type serviceRoute struct {
	pool      *pool
	cluster   *clusterPool
	service   ServiceRef
	transport *http.Transport
	// host is the Host the service's requests carry, as the service-proxy named it when it last opened a tunnel:
	// <name>.<namespace>.<the cluster's service domain>:<port>.
	host atomic.Pointer[string]
	// spare is the tunnel opened to learn host, for the request that needed host first.
	spare chan net.Conn
}

type routeKey struct{}

// serviceRoute returns the route of t's plain-http service, opening its first tunnel to learn host, or nil when the
// service takes the per-request form: https, or an agent without service tunnels. An error is a failure to open
// the tunnel, or the service-proxy's refusal (*refusal).
func (p *pool) serviceRoute(ctx context.Context, t Target) (*serviceRoute, error) {
	if t.Service.Proto != "http" {
		return nil, nil
	}
	c := p.cluster(t.Cluster)
	until := c.noTunnelsUntil.Load()
	if until != 0 && p.clock.Now().UnixNano() < until {
		return nil, nil
	}
	r := c.route(p, *t.Service)
	if r.host.Load() != nil && until == 0 {
		return r, nil
	}
	conn, err := r.open(ctx)
	switch {
	case errors.Is(err, errNoServiceTunnels):
		return nil, nil
	case err != nil:
		return nil, err
	}
	c.noTunnelsUntil.CompareAndSwap(until, 0) // the agent has service tunnels (again)
	select {
	case r.spare <- conn:
	default: // another request's tunnel is already waiting
		_ = conn.Close()
	}
	return r, nil
}

// route returns the cluster's route to svc, creating it on first use.
func (c *clusterPool) route(p *pool, svc ServiceRef) *serviceRoute {
	return loadOrCreate(&c.mu, c.services, svc, func() *serviceRoute {
		r := &serviceRoute{pool: p, cluster: c, service: svc, spare: make(chan net.Conn, 1)}
		r.transport = p.newTransport(r.dial)
		return r
	})
}

// hostHeader is the Host of the service's requests.
func (r *serviceRoute) hostHeader() string { return *r.host.Load() }

func (r *serviceRoute) dial(ctx context.Context) (net.Conn, error) {
	select {
	case conn := <-r.spare:
		return conn, nil
	default:
		return r.open(ctx)
	}
}

func (r *serviceRoute) closeIdle() {
	r.transport.CloseIdleConnections()
	select {
	case conn := <-r.spare:
		_ = conn.Close()
	default:
	}
}

// open opens a tunnel to the cluster's service-proxy and asks it for the service. An answer without service tunnels
// makes the cluster's services take the per-request form for noTunnelsRetry.
func (r *serviceRoute) open(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, serviceTunnelTimeout)
	defer cancel()
	conn, err := r.pool.dial(ctx, r.cluster)
	if err != nil {
		return nil, err
	}
	conn, host, err := connectService(ctx, conn, r.service)
	if err != nil {
		_ = conn.Close()
		if errors.Is(err, errNoServiceTunnels) {
			r.cluster.noTunnelsUntil.Store(r.pool.clock.Now().Add(noTunnelsRetry).UnixNano())
		}
		return nil, err
	}
	r.host.Store(&host)
	return conn, nil
}

// connectService sends the CONNECT that turns conn into a connection to svc and returns it with the Host the
// service-proxy named. Ending ctx ends the exchange. The caller closes conn on an error.
func connectService(ctx context.Context, conn net.Conn, svc ServiceRef) (net.Conn, string, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	authority := net.JoinHostPort(svc.Name+"."+svc.Namespace, strconv.Itoa(svc.Port))
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: authority}, Host: authority, Header: http.Header{}}
	setServiceHeaders(req.Header, svc)
	if err := req.Write(conn); err != nil {
		return conn, "", connectError(ctx, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return conn, "", connectError(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	tunnel := resp.Header.Get(proxyhttp.HeaderTunnel)
	switch {
	case tunnel == "":
		return conn, "", fmt.Errorf("%w: it answered %s", errNoServiceTunnels, resp.Status)
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		return conn, "", &refusal{code: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body}
	case tunnel == proxyhttp.TunnelRefused:
		return conn, "", fmt.Errorf("the service-proxy answered %s without a service host", resp.Status)
	}
	if !stop() {
		return conn, "", connectError(ctx, context.Cause(ctx))
	}
	if br.Buffered() > 0 { // the service spoke first; keep what it said for the connection's reader
		return &bufferedConn{Conn: conn, r: br}, tunnel, nil
	}
	return conn, tunnel, nil
}

// bufferedConn reads what its reader has buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func connectError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return fmt.Errorf("open a service tunnel: %w", err)
}

// refusal is the service-proxy's answer refusing a service tunnel (400, 403, 502), passed to the client as it came.
type refusal struct {
	code        int
	contentType string
	body        []byte
}

func (r *refusal) Error() string {
	return fmt.Sprintf("the service-proxy refused the service tunnel: %d %s", r.code, http.StatusText(r.code))
}

func (r *refusal) write(w http.ResponseWriter) {
	if r.contentType != "" {
		w.Header().Set("Content-Type", r.contentType)
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(r.code)
	_, _ = w.Write(r.body)
}

// setServiceHeaders names svc to the service-proxy, as a request of the per-request form or a CONNECT does.
func setServiceHeaders(h http.Header, svc ServiceRef) {
	h.Set(proxyhttp.HeaderNamespace, svc.Namespace)
	h.Set(proxyhttp.HeaderService, svc.Name)
	h.Set(proxyhttp.HeaderPort, strconv.Itoa(svc.Port))
	h.Set(proxyhttp.HeaderProto, svc.Proto)
}

// perRequestForm is out, which a service route's rewrite addressed to the service itself, addressed to the
// cluster's service-proxy instead, with svc in its headers.
func perRequestForm(out *http.Request, svc ServiceRef) *http.Request {
	out = out.Clone(out.Context())
	out.Host = ""
	setServiceHeaders(out.Header, svc)
	return out
}
