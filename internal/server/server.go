// Package server is the proxy-server: a router of konnectivity's packet protocol (ANP's, which konnectivity-client
// and ANP's agent speak) behind a gRPC frontend, an agent endpoint that binds agent identifiers to the agent's
// certificate, an HTTP-CONNECT frontend, health/metrics and admin servers, the connected-agents view, and an
// in-process dialer the user-server opens its tunnels with.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"k8s.io/utils/clock"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsbatch"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// Defaults, as ANP's proxy-server binary has them where it has them.
const (
	DefaultReloadInterval  = 5 * time.Second
	DefaultShutdownTimeout = 20 * time.Second
	DefaultKeepaliveTime   = time.Hour
	// DefaultAgentKeepaliveTime is how often the agent endpoint pings an idle agent: not ANP's hour. An agent that
	// vanished without closing its connection (a pod killed behind a forward proxy, which keeps its side open) stays
	// the first backend of its cluster, and ANP sends every dial to the first one; the ping (and gRPC's 20 s timeout)
	// drops it within a minute.
	DefaultAgentKeepaliveTime = 30 * time.Second
	// DefaultAgentReconnectWait is how long a dial to a cluster that lost all its agents waits for them to come back:
	// agents that lose their streams together (their forward proxy restarted, the network blinked) reconnect within
	// their backoff's bound (5 s) plus a handshake.
	DefaultAgentReconnectWait = 10 * time.Second
	// agentKeepaliveMinTime is the shortest keepalive interval agents may use.
	agentKeepaliveMinTime = 30 * time.Second
	readHeaderTimeout     = 10 * time.Second
)

// Options configure a Server. Addresses are host:port; an empty HTTPConnectAddr or UserServerAddr turns that
// listener off, and port 0 picks a free port (tests).
type Options struct {
	ServerID    string
	ServerCount int

	FrontendAddr    string
	AgentAddr       string
	HealthAddr      string
	AdminAddr       string
	HTTPConnectAddr string
	UserServerAddr  string
	// Profiling serves the Go profiler (/debug/pprof) on AdminAddr; off, the admin port answers 404.
	Profiling bool

	// Frontends (gRPC and HTTP-CONNECT): serving certificate, and the CA client certificates are verified against.
	ServerCert, ServerKey, ServerCACert string
	// Agent endpoint: serving certificate, and the CA agent certificates are verified against.
	ClusterCert, ClusterKey, ClusterCACert string
	// User-server serving certificate (no client certificates).
	UserServerCert, UserServerKey string
	// The impersonator certificate, presented to agents' service-proxies when a hub user is sent on
	// (ImpersonatorTLS); "" sends no hub users.
	ImpersonatorCert, ImpersonatorKey string
	// Hub answers which clusters a ProxyCertificate's client certificate may reach on the frontends (hub RBAC, get on
	// clusters/proxy); nil: only the proxy-client certificate reaches clusters there.
	Hub hubidentity.ClusterAuthorizer
	// Audit records the frontends' decisions on dials to clusters; nil records none.
	Audit *audit.Auditor
	// RecordSinks is the state of this replica's record sinks (audit, session recordings), which GET /tunnels reports
	// to the manager; nil reports none.
	RecordSinks func() []tunnelclient.RecordSink
	// AdoptedProxyClients are the SHA-256 fingerprints of proxy-client certificates the existing add-on issued, which
	// reach every cluster on the frontends as the operator's proxy-client does, though they carry no role URI: the
	// manager recorded them from the proxy-client Secret when it took the add-on's CA over, so hub programs that read
	// that Secret before the switch keep working until their certificate expires or the CA rolls over.
	AdoptedProxyClients [][sha256.Size]byte
	// TLSProfileFile is the TLS profile (contract.TLSProfile as JSON) of every TLS listener, re-read every
	// ReloadInterval; "" or a missing file: TLS 1.2 and Go's secure cipher suites.
	TLSProfileFile string

	ReloadInterval  time.Duration
	ShutdownTimeout time.Duration
	// LameDuck is how long the frontends keep accepting new connections after the server turns unready on shutdown,
	// while Services and load balancers stop sending to it: a connection they still send is served, not refused.
	// The user-server keeps its own (userserver.Options.MinDrainDuration).
	LameDuck              time.Duration
	FrontendKeepaliveTime time.Duration
	// FrontendQueueBytes is how many bytes of one frontend connection wait for its reader before the agent's loop
	// waits for it, and FrontendStallTimeout the longest it waits for a reader that takes nothing; a reader that falls
	// twice the queue behind loses its connection. Defaults DefaultFrontendQueueBytes, DefaultFrontendStallTimeout.
	FrontendQueueBytes   int
	FrontendStallTimeout time.Duration
	// MaxStreamsPerClient bounds the gRPC streams and CONNECT tunnels one client certificate holds at once;
	// MaxConnectionsPerAgent and MaxPendingDialsPerAgent what one agent stream carries. Defaults
	// DefaultMaxStreamsPerClient, DefaultMaxConnectionsPerAgent, DefaultMaxPendingDialsPerAgent.
	MaxStreamsPerClient     int
	MaxConnectionsPerAgent  int
	MaxPendingDialsPerAgent int
	AgentKeepaliveTime      time.Duration
	// AgentReconnectWait is how long after a cluster lost its last agent a dial to it waits for an agent to connect,
	// instead of failing at once with "No agent available": default DefaultAgentReconnectWait; negative: no wait.
	AgentReconnectWait time.Duration
	// Peers, when set, holds the server's readiness back after start until it holds an agent of every cluster a
	// Ready peer holds, no peer is Ready, or PeerWait has passed (asking every PeerPollInterval): a Service then sends
	// clients only to replicas that can serve them.
	Peers            PeerClusters
	PeerWait         time.Duration
	PeerPollInterval time.Duration
	// TunnelProbeConcurrency is how many GET /tunnels probes run at once; default DefaultTunnelProbeConcurrency.
	TunnelProbeConcurrency int
	// LatencyChanged decides whether a probe's latency moved enough to be reported again; default
	// tunnelclient.LatencyChanged.
	// Tests inject it so that real-time jitter cannot decide what they assert.
	LatencyChanged func(reported, measured time.Duration) bool
	// Clock times ShutdownTimeout and PeerWait; default the real clock.
	Clock clock.WithDelayedExecution

	Log logr.Logger
}

func (o *Options) defaults() {
	if o.ServerCount < 1 {
		o.ServerCount = 1
	}
	if o.ReloadInterval <= 0 {
		o.ReloadInterval = DefaultReloadInterval
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.FrontendKeepaliveTime <= 0 {
		o.FrontendKeepaliveTime = DefaultKeepaliveTime
	}
	if o.AgentKeepaliveTime <= 0 {
		o.AgentKeepaliveTime = DefaultAgentKeepaliveTime
	}
	if o.AgentReconnectWait == 0 {
		o.AgentReconnectWait = DefaultAgentReconnectWait
	}
	o.AgentReconnectWait = max(o.AgentReconnectWait, 0)
	if o.PeerWait <= 0 {
		o.PeerWait = DefaultPeerWait
	}
	if o.PeerPollInterval <= 0 {
		o.PeerPollInterval = DefaultPeerPollInterval
	}
	if o.TunnelProbeConcurrency <= 0 {
		o.TunnelProbeConcurrency = DefaultTunnelProbeConcurrency
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// UserServer is what the server needs of the user-server (internal/server/userserver.Server).
type UserServer interface {
	// Serve serves on ln, which is already TLS, until ctx ends; then it stops being ready, drains and returns.
	Serve(ctx context.Context, ln net.Listener) error
	Ready() bool
}

// Gateway is a server that sends requests on through the user-server (the aggregated API, gateway.Server): Run
// serves until ctx ends, then drains and returns. The proxy-server runs it within its own lifecycle: a gateway that
// fails is logged and the tunnels serve on, and at shutdown its drain ends before the tunnels it uses do.
type Gateway interface {
	Run(ctx context.Context) error
}

// Server is one proxy-server.
type Server struct {
	opts Options
	// gateway, when set (AddGateway), runs beside the user-server.
	gateway Gateway
	log     logr.Logger
	router  *router
	access  *frontendAccess
	// streams counts the frontend streams of each client certificate (--max-streams-per-client).
	streams *clientStreams
	agents  *Agents
	// tunnels answers GET /tunnels.
	tunnels *tunnelReports

	frontendTLS, agentTLS, userTLS *tlsreload.Source
	impersonatorTLS                *tlsreload.Source // nil without an impersonator certificate
	tlsProfile                     *tlsreload.Profile

	frontend, agentEndpoint    *grpc.Server
	httpConnect, health, admin *http.Server

	// inProcess tracks the user-server's tunnels (DialCluster); tunnelCtx bounds them and ends after the user-server
	// has drained.
	inProcess     inProcessTunnels
	tunnelCtx     context.Context
	cancelTunnels context.CancelFunc

	listenOnce sync.Once
	listenErr  error
	listeners  struct{ frontend, agent, health, admin, httpConnect, user net.Listener }

	ready atomic.Bool
	user  atomic.Pointer[userServerHolder]
}

type userServerHolder struct{ UserServer }

// New reads the certificates and builds the servers; nothing listens until Listen or Run.
func New(opts Options) (*Server, error) {
	opts.defaults()
	if opts.ServerID == "" {
		return nil, errors.New("server ID is empty")
	}
	s := &Server{opts: opts, log: opts.Log, agents: NewAgents()}

	// Without a CA the frontends and the agent endpoint would not ask for client certificates.
	if opts.ServerCACert == "" || opts.ClusterCACert == "" {
		return nil, errors.New("the frontend client CA and the agent CA are required")
	}
	var err error
	if s.tlsProfile, err = tlsreload.NewProfile(opts.TLSProfileFile); err != nil {
		return nil, err
	}
	if s.frontendTLS, err = tlsreload.New(opts.ServerCert, opts.ServerKey, opts.ServerCACert); err != nil {
		return nil, fmt.Errorf("frontend certificates: %w", err)
	}
	if s.agentTLS, err = tlsreload.New(opts.ClusterCert, opts.ClusterKey, opts.ClusterCACert); err != nil {
		return nil, fmt.Errorf("agent endpoint certificates: %w", err)
	}
	s.frontendTLS.WithProfile(s.tlsProfile)
	s.agentTLS.WithProfile(s.tlsProfile)
	if opts.UserServerAddr != "" {
		if s.userTLS, err = tlsreload.New(opts.UserServerCert, opts.UserServerKey, ""); err != nil {
			return nil, fmt.Errorf("user-server certificates: %w", err)
		}
		s.userTLS.WithProfile(s.tlsProfile)
	}

	if opts.ImpersonatorCert != "" {
		// Agents' certificates are checked against the agent endpoint's CA bundle.
		if s.impersonatorTLS, err = tlsreload.New(opts.ImpersonatorCert, opts.ImpersonatorKey, opts.ClusterCACert); err != nil {
			return nil, fmt.Errorf("impersonator certificate: %w", err)
		}
	}

	backends := newNewestBackends(opts.Clock, opts.AgentReconnectWait)
	s.agents.reconnecting = backends.reconnecting
	s.router = newRouter(opts.ServerID, opts.ServerCount, s.agents, backends, s.log)
	s.router.queue = newQueuePolicy(opts.FrontendQueueBytes, opts.FrontendStallTimeout, opts.Clock)
	s.router.limits = agentLimits{connections: opts.MaxConnectionsPerAgent, pendingDials: opts.MaxPendingDialsPerAgent}.withDefaults()
	s.streams = newClientStreams(opts.MaxStreamsPerClient)

	s.frontend = grpc.NewServer(
		grpc.Creds(tlsbatch.Credentials(credentials.NewTLS(mutualTLS(s.frontendTLS, "h2", refuseNonClientCertificates)))),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: opts.FrontendKeepaliveTime}),
	)
	s.access = newFrontendAccess(opts.Hub, opts.AdoptedProxyClients, opts.Audit, s.log.WithName("frontend-access"))
	client.RegisterProxyServiceServer(s.frontend, proxyService{r: s.router, access: s.access, streams: s.streams})

	s.agentEndpoint = grpc.NewServer(
		grpc.Creds(tlsbatch.Credentials(credentials.NewTLS(mutualTLS(s.agentTLS, "h2", nil)))),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: opts.AgentKeepaliveTime}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: agentKeepaliveMinTime, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(packet.NewCodec()),
		// Memory per agent: gRPC holds a connection's read buffer for its life (its default, 32 KiB, was a third of
		// an idle agent's cost; its write buffer already goes back to a shared pool after each flush). Over TLS the
		// buffer copies what crypto/tls has already buffered, a whole record, so the framer reads the TLS
		// connection directly.
		grpc.ReadBufferSize(0),
		// An agent opens a stream or two in a connection's life, so an HPACK table of its headers compresses nothing
		// and costs about 0.8 KiB per agent for the connection's life: agents are asked not to index them.
		grpc.HeaderTableSize(0),
		experimental.BufferPool(packet.Buffers),
	)
	agent.RegisterAgentServiceServer(s.agentEndpoint, agentService{r: s.router})

	// The user-server's tunnels are frontend streams of the router in memory (DialCluster), not reachable from outside.
	s.tunnelCtx, s.cancelTunnels = context.WithCancel(context.Background())

	if opts.HTTPConnectAddr != "" {
		s.httpConnect = &http.Server{
			Handler:           s.httpConnectHandler(),
			ReadHeaderTimeout: readHeaderTimeout,
			// CONNECT hijacks the connection, which HTTP/2 cannot do.
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
			ErrorLog:     httpErrorLog(s.log, "http-connect"),
		}
	}
	s.health = &http.Server{Handler: s.healthHandler(), ReadHeaderTimeout: readHeaderTimeout, ErrorLog: httpErrorLog(s.log, "health")}
	s.admin = &http.Server{Handler: adminHandler(opts.Profiling), ReadHeaderTimeout: readHeaderTimeout, ErrorLog: httpErrorLog(s.log, "admin")}
	s.tunnels = newTunnelReports(s.DialCluster, s.agents, opts.ServerID, opts.TunnelProbeConcurrency, opts.LatencyChanged)
	s.tunnels.records = opts.RecordSinks
	metricsAgents.Store(s.agents)
	metricsProfile.Store(s.tlsProfile)
	return s, nil
}

// mutualTLS serves the source's current certificate and requires client certificates verified against its current
// CA; nextProto is the one ALPN protocol the listener speaks.
// ImpersonatorTLS is the TLS client side of the tunnels that carry hub users to cluster's service-proxy
// (hubidentity.ImpersonatorTLSConfig with the impersonator certificate and the agents' CA bundle), nil without an
// impersonator certificate.
func (s *Server) ImpersonatorTLS() func(cluster string) *tls.Config {
	src := s.impersonatorTLS
	if src == nil {
		return nil
	}
	return func(cluster string) *tls.Config {
		return hubidentity.ImpersonatorTLSConfig(cluster, src.Certificate, src.CAPool)
	}
}

func mutualTLS(src *tlsreload.Source, nextProto string, verify func(tls.ConnectionState) error) *tls.Config {
	cfg := src.ServerConfig()
	// The per-handshake configs are clones of this one, so these settings reach every handshake.
	cfg.NextProtos = []string{nextProto}
	cfg.VerifyConnection = verify
	return cfg
}

// Agents is the set of connected agents; it answers the user-server's Connected and Known.
func (s *Server) Agents() *Agents { return s.agents }

// Addrs are the bound listener addresses, empty for listeners that are off or not yet open.
type Addrs struct {
	Frontend, Agent, Health, Admin, HTTPConnect, UserServer string
}

// Addrs reports where the server listens.
func (s *Server) Addrs() Addrs {
	addr := func(l net.Listener) string {
		if l == nil {
			return ""
		}
		return l.Addr().String()
	}
	l := &s.listeners
	return Addrs{addr(l.frontend), addr(l.agent), addr(l.health), addr(l.admin), addr(l.httpConnect), addr(l.user)}
}

// Listen opens every listener; on error the ones already open are closed. Run calls it when it was not called.
func (s *Server) Listen() error {
	s.listenOnce.Do(func() { s.listenErr = s.listen() })
	return s.listenErr
}

func (s *Server) listen() error {
	var opened []net.Listener
	open := func(addr string, cfg *tls.Config) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		opened = append(opened, l)
		if cfg != nil {
			// The user-server batches the records of its HTTP/1 responses through tlsbatch; on the HTTP-CONNECT
			// frontend nothing starts a batch and every write passes straight through.
			l = tls.NewListener(tlsbatch.Listener(l), cfg)
		}
		return l, nil
	}
	var userCfg, connectCfg *tls.Config
	if s.userTLS != nil {
		userCfg = s.userTLS.ServerConfig()
		userCfg.NextProtos = []string{"h2", "http/1.1"}
	}
	if s.httpConnect != nil {
		connectCfg = mutualTLS(s.frontendTLS, "http/1.1", refuseNonClientCertificates)
	}
	l := &s.listeners
	steps := []struct {
		name string
		addr string
		cfg  *tls.Config
		into *net.Listener
	}{
		{"frontend", s.opts.FrontendAddr, nil, &l.frontend}, // gRPC does its own TLS
		{"agent endpoint", s.opts.AgentAddr, nil, &l.agent},
		{"health", s.opts.HealthAddr, nil, &l.health},
		{"admin", s.opts.AdminAddr, nil, &l.admin},
		{"HTTP-CONNECT", s.opts.HTTPConnectAddr, connectCfg, &l.httpConnect},
		{"user-server", s.opts.UserServerAddr, userCfg, &l.user},
	}
	for _, st := range steps {
		ln, err := open(st.addr, st.cfg)
		if err != nil {
			for _, o := range opened {
				_ = o.Close()
			}
			*l = struct{ frontend, agent, health, admin, httpConnect, user net.Listener }{}
			return fmt.Errorf("listen %s on %s: %w", st.name, st.addr, err)
		}
		*st.into = ln
	}
	if l.frontend == nil || l.agent == nil {
		return errors.New("the frontend and agent addresses are required")
	}
	return nil
}

// Run serves until ctx ends, then shuts down: it stops being ready and sends the agents GOAWAY; the user-server drains
// (bounded by its own drain timeout) while the frontends accept for the lame duck and then stop gracefully within the
// shutdown timeout; then the agents' streams end. It turns Ready after start as awaitPeers decides. user may be nil
// when the user-server is off. Call it once.
// AddGateway has Run run g beside the user-server; call it before Run.
func (s *Server) AddGateway(g Gateway) { s.gateway = g }

func (s *Server) Run(ctx context.Context, user UserServer) error {
	if (user == nil) != (s.opts.UserServerAddr == "") {
		return errors.New("a user-server needs a user-server address and the other way round")
	}
	if err := s.Listen(); err != nil {
		return err
	}
	if user != nil {
		s.user.Store(&userServerHolder{user})
	}
	log := s.log
	l := &s.listeners

	reloadCtx, stopReload := context.WithCancel(context.Background())
	defer stopReload()
	for _, src := range []*tlsreload.Source{s.frontendTLS, s.agentTLS, s.userTLS, s.impersonatorTLS} {
		if src != nil {
			go src.Run(reloadCtx, s.opts.ReloadInterval, log)
		}
	}
	go s.tlsProfile.Run(reloadCtx, s.opts.ReloadInterval, log)

	failed := make(chan error, 8)
	var serving sync.WaitGroup
	serve := func(name string, fn func() error) {
		serving.Go(func() {
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				failed <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	serve("frontend", func() error { return s.frontend.Serve(l.frontend) })
	serve("agent endpoint", func() error { return s.agentEndpoint.Serve(l.agent) })
	if l.health != nil {
		serve("health", func() error { return s.health.Serve(l.health) })
	}
	if l.admin != nil {
		serve("admin", func() error { return s.admin.Serve(l.admin) })
	}
	if l.httpConnect != nil {
		serve("HTTP-CONNECT", func() error { return s.httpConnect.Serve(l.httpConnect) })
	}
	// The user-server logs through the logger in its context.
	userCtx, stopUser := context.WithCancel(logr.NewContext(context.Background(), log))
	defer stopUser()
	userDone := make(chan struct{})
	if user != nil {
		go func() {
			defer close(userDone)
			if err := user.Serve(userCtx, l.user); err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("user-server: %w", err)
			}
		}()
	} else {
		close(userDone)
	}
	gatewayCtx, stopGateway := context.WithCancel(logr.NewContext(context.Background(), log))
	defer stopGateway()
	gatewayDone := make(chan struct{})
	if s.gateway != nil {
		go func() {
			defer close(gatewayDone)
			// The tunnels serve on without it; the hub's APIService then reports it unavailable.
			if err := s.gateway.Run(gatewayCtx); err != nil {
				log.Error(err, "The aggregated API stopped")
			}
		}()
	} else {
		close(gatewayDone)
	}
	log.Info("Proxy-server serving", "serverID", s.opts.ServerID, "addresses", s.Addrs())
	peersCtx, stopPeers := context.WithCancel(ctx)
	defer stopPeers()
	peersDone := make(chan struct{})
	go func() {
		defer close(peersDone)
		s.awaitPeers(peersCtx)
	}()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("Shutting down")
	case runErr = <-failed:
		log.Error(runErr, "A listener failed, shutting down")
	}
	stopPeers()
	<-peersDone // so that it cannot turn the server Ready again
	s.ready.Store(false)

	shutdownCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound := s.opts.Clock.AfterFunc(s.opts.ShutdownTimeout, cancel)
	defer bound.Stop()
	// GOAWAY tells the agents at once that this server goes: they look for another (a new replica, in a rolling
	// update) while their streams here keep serving what is open; no new agent is taken. Stop below ends the streams.
	var agentsTold sync.WaitGroup
	agentsTold.Go(s.agentEndpoint.GracefulStop)
	var stopping sync.WaitGroup
	stopping.Go(func() {
		// The user-server and the gateway bound their own drains, side by side; the in-process tunnels they use stay up
		// until both have returned, or until the shutdown's bound.
		stopGateway()
		stopUser()
		<-userDone
		select {
		case <-gatewayDone:
		case <-shutdownCtx.Done():
		}
		s.cancelTunnels()
		s.inProcess.stop(shutdownCtx)
	})
	// After the lame duck, the kept-alive connections of the gRPC and HTTP-CONNECT frontends close between their
	// requests, so that the graceful stop below ends with them rather than cutting them at the bound.
	retireCtx, stopRetiring := context.WithCancel(shutdownCtx)
	defer stopRetiring()
	go func() {
		s.lameDuck(retireCtx)
		s.retireIdleConnections(retireCtx)
	}()
	stopping.Go(func() {
		s.lameDuck(shutdownCtx)
		gracefulStop(shutdownCtx, s.frontend)
	})
	if s.httpConnect != nil {
		stopping.Go(func() {
			s.lameDuck(shutdownCtx)
			// Shutdown does not wait for CONNECT tunnels: they are hijacked connections and end with the process.
			_ = s.httpConnect.Shutdown(shutdownCtx)
		})
	}
	stopping.Wait()
	stopRetiring()
	// Agents reconnect to another replica; nothing is left to drain through them once the frontends are gone.
	s.agentEndpoint.Stop()
	agentsTold.Wait()
	_ = s.health.Shutdown(shutdownCtx)
	_ = s.admin.Shutdown(shutdownCtx)
	serving.Wait()
	stopReload()
	log.Info("Proxy-server stopped")
	return runErr
}

// lameDuck waits LameDuck, or until ctx ends.
func (s *Server) lameDuck(ctx context.Context) {
	if s.opts.LameDuck <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-s.opts.Clock.After(s.opts.LameDuck):
	}
}

// retireInterval is how often a shutdown closes the idle connections of the gRPC and HTTP-CONNECT frontends
// (router.retireIdle): a connection is idle once it has carried nothing for a whole interval since an answer reached
// its client, so a client that pauses 100 ms between requests is moved within its first pause.
const retireInterval = 40 * time.Millisecond

// retireIdleConnections closes idle frontend connections every retireInterval until ctx ends.
func (s *Server) retireIdleConnections(ctx context.Context) {
	total := 0
	for {
		select {
		case <-ctx.Done():
			if total > 0 {
				s.log.Info("Closed idle frontend connections while stopping", "connections", total)
			}
			return
		case <-s.opts.Clock.After(retireInterval):
			total += s.router.retireIdle()
		}
	}
}

// gracefulStop lets open streams finish until ctx ends, then cuts them.
func gracefulStop(ctx context.Context, g *grpc.Server) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
		<-done
	}
}

// Ready reports whether the listeners are up, the peer wait is over (awaitPeers) and the user-server, if any, is
// ready.
func (s *Server) Ready() bool {
	if !s.ready.Load() {
		return false
	}
	if u := s.user.Load(); u != nil {
		return u.Ready()
	}
	return true
}
