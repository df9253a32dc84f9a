// Package agent is the proxy-agent: it keeps reverse tunnels to the hub's proxy-servers and serves the hub's dials
// through them. It speaks apiserver-network-proxy's agent protocol itself, reading destinations in large chunks
// (ANP's agent reads 4 KiB at a time, which caps a tunnel's throughput), and maps each dial to the managed
// kube-apiserver or to the in-process service-proxy. See docs/data-plane.md.
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// Defaults of the Options left zero.
const (
	// DefaultReadBufferSize is two whole DATA packets (see maxPacketPayload).
	DefaultReadBufferSize = 2 * maxPacketPayload
	DefaultQueueSize      = 4 << 20
	DefaultStallTimeout   = 10 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	DefaultConnectTimeout = 15 * time.Second
	// DefaultKeepaliveTime matches the proxy-server's keepalive enforcement (ANP allows a ping every 30 s).
	DefaultKeepaliveTime = 30 * time.Second
	DefaultDrainTimeout  = 5 * time.Second
	// KubeAPIServerPort is the tunnel port that reaches the managed kube-apiserver.
	KubeAPIServerPort = 443
)

// Options configure an Agent.
type Options struct {
	// ServerAddress is the proxy-server's agent endpoint, host:port. The host is also the name its certificate must
	// carry.
	ServerAddress string
	// AgentID names this agent to the proxy-servers (the pod name).
	AgentID string
	// Identifiers are sent as the agentIdentifiers metadata, e.g. "host=c1&host=c1.ns". Their hosts are the only
	// names a dial request may use.
	Identifiers string
	// TLS holds the agent's client certificate and the hub's CA bundle, the one root that verifies the proxy-server;
	// renewed files apply to the next connection.
	TLS *tlsreload.Source
	// Proxy chooses the forward proxy for https://ServerAddress; nil, or a nil URL, dials directly.
	Proxy func(*url.URL) (*url.URL, error)
	// ProxyRoots verify an https forward proxy on the TLS hop to it (its caBundle), read at each connection; nil, or a
	// nil pool, is the system roots. They never verify the proxy-server.
	ProxyRoots func() *x509.CertPool
	// Dial opens every network connection the agent makes (the proxy-server or forward proxy, the kube-apiserver);
	// nil is a plain net.Dialer. --resolve overrides belong here.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ServerDial, when set, opens the connections to the proxy-server instead of Proxy and Dial (the PortForward
	// entrypoint: PortForward.DialContext); ServerAddress still names the certificate to verify.
	ServerDial func(ctx context.Context, addr string) (net.Conn, error)
	// KubeAPIServer is the managed kube-apiserver, host:port.
	KubeAPIServer string
	// KubeAPIServerTLS verifies the kube-apiserver for the tunnel health port's own requests (the tunnel's <host>:443
	// connections are the caller's TLS); nil does not verify it.
	KubeAPIServerTLS *tls.Config
	// ServiceProxy serves ServiceProxyPort in process; nil or a zero port turns the port off.
	ServiceProxy     http.Handler
	ServiceProxyPort int
	// ServiceProxyTLS, when set, serves the connections to ServiceProxyPort that open with a TLS handshake in TLS
	// with this configuration (serviceproxy.ServerTLSConfig); the others stay plain HTTP.
	ServiceProxyTLS *tls.Config
	// ReadBufferSize is the largest chunk read from a destination, sent as DATA packets of at most 32 KiB; above
	// that it is rounded down to whole packets, so a full read leaves no small packet over.
	ReadBufferSize int
	// QueueSize is how many bytes from the hub may wait for one destination before the tunnel stops reading.
	QueueSize int
	// StallTimeout is how long the tunnel waits for a destination that does not take its data before closing that
	// connection, so one stuck destination cannot hold up the others.
	StallTimeout   time.Duration
	DialTimeout    time.Duration
	ConnectTimeout time.Duration
	KeepaliveTime  time.Duration
	// DrainTimeout is how long open connections may go on after shutdown begins.
	DrainTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the wait between connection attempts (defaults 100 ms and 5 s).
	ReconnectMin, ReconnectMax time.Duration
	Log                        logr.Logger
}

// maxPacketPayload is the most data one DATA packet carries. gRPC encodes and reassembles messages in pooled
// buffers that it zeroes, and its pools jump from 32 KiB to 1 MiB: a message just over 32 KiB costs a 1 MiB clear on
// every hop that handles it (agent, proxy-server, client). Packets that stay under 32 KiB avoid that.
const maxPacketPayload = 32<<10 - 64

// Agent keeps one tunnel to each proxy-server and serves the dials that arrive on them.
type Agent struct {
	opts       Options
	hosts      map[string]bool
	dialer     *serverDialer
	services   *memListener // nil without a service-proxy
	health     *memListener // the tunnel health port
	metrics    *metrics
	bufs       sync.Pool
	packetSize int
	nextConnID atomic.Int64
	draining   atomic.Bool

	mu          sync.Mutex
	tunnels     map[string]*tunnel // by proxy-server ID
	serverCount int
	changed     chan struct{} // a tunnel ended or is going away
	wg          sync.WaitGroup
}

// New checks the options and fills in defaults; Run starts the agent.
func New(opts Options) (*Agent, error) {
	if _, _, err := net.SplitHostPort(opts.ServerAddress); err != nil {
		return nil, fmt.Errorf("proxy-server address %q: %w", opts.ServerAddress, err)
	}
	if opts.AgentID == "" {
		return nil, errors.New("the agent ID is empty")
	}
	if opts.TLS == nil {
		return nil, errors.New("no agent certificate")
	}
	hosts, err := identifierHosts(opts.Identifiers)
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(opts.KubeAPIServer); err != nil {
		return nil, fmt.Errorf("kube-apiserver address %q: %w", opts.KubeAPIServer, err)
	}
	if opts.ServiceProxyPort == KubeAPIServerPort || opts.ServiceProxyPort == contract.TunnelHealthPort ||
		opts.ServiceProxyPort < 0 || opts.ServiceProxyPort > 65535 {
		return nil, fmt.Errorf("service-proxy port %d: want 1-65535 other than %d and %d, or 0 for none",
			opts.ServiceProxyPort, KubeAPIServerPort, contract.TunnelHealthPort)
	}
	if opts.ReadBufferSize < 0 || opts.ReadBufferSize > 1<<20 {
		return nil, fmt.Errorf("read buffer size %d: want at most 1 MiB", opts.ReadBufferSize)
	}
	setDefault(&opts.ReadBufferSize, DefaultReadBufferSize)
	if opts.ReadBufferSize > maxPacketPayload {
		opts.ReadBufferSize -= opts.ReadBufferSize % maxPacketPayload
	}
	setDefault(&opts.QueueSize, DefaultQueueSize)
	setDefault(&opts.StallTimeout, DefaultStallTimeout)
	setDefault(&opts.DialTimeout, DefaultDialTimeout)
	setDefault(&opts.ConnectTimeout, DefaultConnectTimeout)
	setDefault(&opts.KeepaliveTime, DefaultKeepaliveTime)
	setDefault(&opts.DrainTimeout, DefaultDrainTimeout)
	setDefault(&opts.ReconnectMin, 100*time.Millisecond)
	setDefault(&opts.ReconnectMax, 5*time.Second)
	if opts.Dial == nil {
		opts.Dial = resolve.Resolver(nil).DialContext
	}

	a := &Agent{
		opts:        opts,
		hosts:       hosts,
		dialer:      &serverDialer{proxy: opts.Proxy, dial: opts.Dial, roots: opts.ProxyRoots},
		metrics:     newMetrics(),
		tunnels:     map[string]*tunnel{},
		serverCount: 1,
		changed:     make(chan struct{}, 1),
		packetSize:  maxPacketPayload,
		health:      newMemListener(destTunnelHealth),
	}
	size := opts.ReadBufferSize
	a.bufs.New = func() any { b := make([]byte, size); return &b }
	if opts.ServiceProxy != nil && opts.ServiceProxyPort != 0 {
		a.services = newMemListener(destServiceProxy)
	}
	return a, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// identifierHosts returns the host identifiers, lower-cased; an agent without one could never be dialed, and one
// claiming another identifier type is refused by the proxy-server.
func identifierHosts(identifiers string) (map[string]bool, error) {
	claimed, err := contract.AgentIdentifierHosts(identifiers)
	if err != nil {
		return nil, fmt.Errorf("agent identifiers %q: %w", identifiers, err)
	}
	hosts := map[string]bool{}
	for _, h := range claimed {
		if h != "" {
			hosts[strings.ToLower(h)] = true
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("agent identifiers %q: no host=<name> identifier", identifiers)
	}
	return hosts, nil
}

// Run keeps the tunnels up until ctx ends, then drains: it tells every proxy-server (DRAIN) to send no new dials,
// refuses the ones still coming, lets open connections finish for DrainTimeout and closes everything. Run is called
// once.
func (a *Agent) Run(ctx context.Context) error {
	// Tunnels outlive ctx by the drain.
	tunnelCtx, stopTunnels := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTunnels()

	var services *http.Server
	if a.services != nil {
		services = &http.Server{Handler: a.opts.ServiceProxy, ReadHeaderTimeout: time.Minute}
		var ln net.Listener = a.services
		if a.opts.ServiceProxyTLS != nil {
			ln = newSniffListener(a.services, a.opts.ServiceProxyTLS)
		}
		go func() { _ = services.Serve(ln) }()
	}
	health := &http.Server{Handler: a.healthzHandler(), ReadHeaderTimeout: time.Minute}
	go func() { _ = health.Serve(a.health) }()

	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		a.maintain(ctx, tunnelCtx)
	}()
	<-ctx.Done()
	<-maintained

	a.drain()
	stopTunnels()
	a.wg.Wait()
	if services != nil {
		_ = services.Close()
		_ = a.services.Close()
	}
	_ = health.Close()
	_ = a.health.Close()
	return nil
}

// Tunnels is the number of tunnels up.
func (a *Agent) Tunnels() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.tunnels)
}

// Connected reports whether at least one tunnel is up.
func (a *Agent) Connected() bool { return a.Tunnels() > 0 }

// Ready reports whether the agent serves dials: a tunnel is up and it is not shutting down.
func (a *Agent) Ready() bool { return a.Connected() && !a.draining.Load() }

// maintain connects until the agent holds one tunnel per proxy-server, as many as the servers say there are, and
// reconnects when a tunnel ends. Every proxy-server sits behind the same address, so reaching all of them means
// connecting again and closing the connections that land on a server already held.
func (a *Agent) maintain(ctx, tunnelCtx context.Context) {
	log := a.opts.Log
	bo := backoff{min: a.opts.ReconnectMin, max: a.opts.ReconnectMax}
	landed := landings{bo: &bo}
	var lastUp time.Time
	var delay time.Duration
	var lastErr string
	for {
		if delay > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
		if ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		have, want := a.heldLocked(), a.serverCount
		a.mu.Unlock()
		if have >= want {
			select {
			case <-ctx.Done():
				return
			case <-a.changed:
			}
			// A tunnel ended. After one that stayed up a while start the backoff over; a server that accepts and
			// drops tunnels at once keeps getting longer waits.
			if time.Since(lastUp) > 10*time.Second {
				bo.reset()
			}
			delay = bo.next()
			continue
		}

		t, err := a.connect(ctx, tunnelCtx)
		if status.Code(err) == codes.AlreadyExists {
			// The server found itself among the servers this agent holds (contract.HeldServersMetadata).
			a.metrics.connects.WithLabelValues("duplicate").Inc()
			delay = landed.duplicate(want)
			log.V(1).Info("Reached a proxy-server that already has a tunnel; trying again for another", "detail", err.Error())
			continue
		}
		if err != nil {
			a.metrics.connects.WithLabelValues("error").Inc()
			delay = bo.next()
			// The same failure every few seconds says nothing new: log it once, and again when it changes.
			l := log.V(1)
			if err.Error() != lastErr {
				l, lastErr = log, err.Error()
			}
			l.Info("Cannot open a tunnel to the proxy-server; retrying", "server", a.opts.ServerAddress,
				"retryIn", delay.Round(time.Millisecond).String(), "error", err.Error())
			continue
		}
		lastErr = ""
		if !a.add(t) {
			a.metrics.connects.WithLabelValues("duplicate").Inc()
			t.close()
			delay = landed.duplicate(want)
			log.V(1).Info("Reached a proxy-server that already has a tunnel; trying again for another", "serverID", t.serverID, "serverCount", t.serverCount)
			continue
		}
		a.metrics.connects.WithLabelValues("success").Inc()
		landed.reached()
		lastUp, delay = time.Now(), 0
		log.Info("Tunnel up", "serverID", t.serverID, "serverCount", t.serverCount, "tunnels", a.Tunnels())
	}
}

// add registers t and starts serving it, unless its proxy-server already has a tunnel.
func (a *Agent) add(t *tunnel) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.serverCount = max(1, t.serverCount)
	if _, dup := a.tunnels[t.serverID]; dup {
		return false
	}
	a.tunnels[t.serverID] = t
	a.metrics.tunnels.Set(float64(len(a.tunnels)))
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		if t.watchGoAway() {
			a.opts.Log.Info("Proxy-server going away; looking for another while its tunnel serves the open connections", "serverID", t.serverID)
			a.signalChanged()
		}
	}()
	go func() {
		defer a.wg.Done()
		err := t.serve()
		a.remove(t)
		if a.draining.Load() {
			return
		}
		a.opts.Log.Info("Tunnel down; reconnecting", "serverID", t.serverID, "reason", err.Error())
	}()
	return true
}

func (a *Agent) remove(t *tunnel) {
	a.mu.Lock()
	if a.tunnels[t.serverID] == t {
		delete(a.tunnels, t.serverID)
	}
	a.metrics.tunnels.Set(float64(len(a.tunnels)))
	a.mu.Unlock()
	a.signalChanged()
}

// signalChanged wakes maintain to count the tunnels again.
func (a *Agent) signalChanged() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// heldServerIDs lists the proxy-servers the agent has a tunnel to, going away or not: a new stream to one of them
// would be a duplicate.
func (a *Agent) heldServerIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Collect(maps.Keys(a.tunnels))
}

// heldLocked is the number of proxy-servers held that are not going away; a.mu is held.
func (a *Agent) heldLocked() int {
	n := 0
	for _, t := range a.tunnels {
		if !t.goingAway.Load() {
			n++
		}
	}
	return n
}

// drainCheck is how often a drain closes the connections that pause between requests (tunnel.closePaused): a
// connection pauses once it has carried nothing for a whole interval since an answer went to its client, so a client
// that waits 100 ms between requests is moved within its first pause.
const drainCheck = 40 * time.Millisecond

// drain tells each proxy-server to route no new dials here, then, every drainCheck for up to DrainTimeout, closes each
// open connection that pauses between requests, so that a kept-alive client moves to another agent before its next
// request instead of losing one in flight at the timeout. The connections still open at the timeout are cut.
func (a *Agent) drain() {
	a.draining.Store(true)
	tunnels := a.tunnelList()
	for _, t := range tunnels {
		t.sendDrain()
	}
	open := a.openConns()
	a.opts.Log.Info("Draining", "tunnels", len(tunnels), "openConnections", open, "timeout", a.opts.DrainTimeout.String())
	deadline := time.Now().Add(a.opts.DrainTimeout)
	paused := 0
	for open > 0 && time.Now().Before(deadline) {
		time.Sleep(drainCheck)
		for _, t := range tunnels {
			paused += t.closePaused()
		}
		open = a.openConns()
	}
	a.metrics.drained.WithLabelValues(drainedPaused).Add(float64(paused))
	a.metrics.drained.WithLabelValues(drainedCut).Add(float64(open))
	a.opts.Log.Info("Drained", "closedInPause", paused, "cutAtTimeout", open)
}

func (a *Agent) tunnelList() []*tunnel {
	a.mu.Lock()
	defer a.mu.Unlock()
	tunnels := make([]*tunnel, 0, len(a.tunnels))
	for _, t := range a.tunnels {
		tunnels = append(tunnels, t)
	}
	return tunnels
}

// openConns is the number of open connections over all tunnels.
func (a *Agent) openConns() int {
	open := 0
	for _, t := range a.tunnelList() {
		open += t.openConns()
	}
	return open
}

// errRefused marks a dial to a destination this agent does not serve.
var errRefused = errors.New("destination not served by this agent")

// Destinations, the destination label of cluster_proxy_agent_dials_total.
const (
	destKubeAPIServer = "kube-apiserver"
	destServiceProxy  = "service-proxy"
	destTunnelHealth  = "tunnel-health"
	destOther         = "other"
)

// dialDestination maps a DIAL_REQ address to what this agent serves: <host>:443 is the kube-apiserver,
// <host>:<service-proxy port> the in-process service-proxy, <host>:<tunnel health port> the in-process GET /healthz
// (healthz.go), for the hosts of the agent's identifiers only.
func (a *Agent) dialDestination(ctx context.Context, protocol, address string) (net.Conn, string, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil || protocol != "tcp" || !a.hosts[strings.ToLower(host)] {
		return nil, destOther, fmt.Errorf("%s %s: %w", protocol, address, errRefused)
	}
	switch p, _ := strconv.Atoi(port); {
	case p == KubeAPIServerPort:
		conn, err := a.opts.Dial(ctx, "tcp", a.opts.KubeAPIServer)
		return conn, destKubeAPIServer, err
	case a.services != nil && p == a.opts.ServiceProxyPort:
		conn, err := a.services.DialContext(ctx)
		return conn, destServiceProxy, err
	case p == contract.TunnelHealthPort:
		conn, err := a.health.DialContext(ctx)
		return conn, destTunnelHealth, err
	}
	return nil, destOther, fmt.Errorf("%s %s: %w", protocol, address, errRefused)
}

// KubeAPIServerAddress is the host:port of the kube-apiserver cfg talks to, the destination of <host>:443.
func KubeAPIServerAddress(cfg *rest.Config) (string, error) {
	raw := cfg.Host
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("kube-apiserver host %q is not a URL or host:port", cfg.Host)
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}
