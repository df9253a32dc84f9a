// Command proxy-server runs the hub side of the data plane: ANP's proxy server with the gRPC and HTTP-CONNECT
// frontends, the agent endpoint, and the user-server. Flags and wiring only; internal/server does the work.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/go-logr/logr"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/gateway"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/sessionrec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
)

const (
	// The user-server drains within this, and the frontends stop within it; the pod's default grace period is 30s.
	drainTimeout = 20 * time.Second
	// Keep accepting this long after turning not ready, while endpoints and load balancers catch up.
	minDrainDuration = 3 * time.Second
	// A new replica answers a cluster it has not seen with a retryable 503 this long: it is Ready before the agents
	// reach it, and in a rolling update they reach it only once an old replica goes (measured up to about 20 s).
	defaultAgentWarmup = time.Minute
)

type config struct {
	adoptedProxyClients               [][sha256.Size]byte
	serverCount                       int
	proxyStrategies                   string
	bindAddress                       string
	healthBindAddress                 string // "": --bind-address's
	serverID                          string
	serverPort, agentPort, healthPort int
	adminPort, httpConnectPort        int
	profiling                         bool
	userServerPort, serviceProxyPort  int
	serverCACert, serverCert          string
	serverKey                         string
	clusterCACert, clusterCert        string
	clusterKey                        string
	userServerCert, userServerKey     string
	impersonatorCert, impersonatorKey string
	hubKubeconfig                     string
	hubAuthorization                  string
	hubUserPrefix                     string
	hubServiceAccountGroups           string
	perClusterMetrics                 bool
	gatewayPort                       int
	gatewayCert, gatewayKey           string
	tlsProfileFile                    string
	allowed                           allowlist.List
	keepaliveTime, frontendKeepalive  time.Duration
	frontendQueueBytes                int
	tokenReviewConcurrency            int
	maxStreamsPerClient               int
	maxConnectionsPerAgent            int
	maxPendingDialsPerAgent           int
	frontendStallTimeout              time.Duration
	agentWarmup                       time.Duration
	agentReconnectWait                time.Duration
	peerAddress, peerCert, peerKey    string
	peerWait                          time.Duration
	verbosity                         int
	zap                               zap.Options
	audit                             audit.Options
	sessionRecordingDir               string
	sessionRecordingStdin             bool
	sessionRecordingFailClosed        bool
}

// parseFlags reads the command line render.ServerArgs produces; unknown flags and stray arguments are errors.
// minFrontendQueueBytes is the smallest --frontend-queue-bytes: two of the largest DATA packets.
const minFrontendQueueBytes = 64 << 10

func parseFlags(args []string, output io.Writer) (*config, error) {
	c := &config{audit: audit.NewOptions()}
	fs := flag.NewFlagSet("proxy-server", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.IntVar(&c.serverCount, "server-count", 1, "number of proxy-server replicas; agents connect to each")
	fs.StringVar(&c.proxyStrategies, "proxy-strategies", "destHost", "how tunnels choose an agent; only destHost is supported")
	fs.StringVar(&c.bindAddress, "bind-address", "", "IP address the listeners bind to, all interfaces when empty (the admin port always binds loopback)")
	fs.StringVar(&c.healthBindAddress, "health-bind-address", "", "IP address the health port binds to, --bind-address's when empty. "+
		"Bound to the pod's IP alone it is out of reach of port-forward, which connects to the pod's loopback")
	fs.StringVar(&c.serverID, "server-id", "", "this replica's ID, the hostname when empty")
	fs.IntVar(&c.serverPort, "server-port", 8090, "gRPC frontend port (mTLS)")
	fs.IntVar(&c.agentPort, "agent-port", 8091, "agent endpoint port (mTLS)")
	fs.IntVar(&c.healthPort, "health-port", 8092, "health and metrics port (plain HTTP)")
	fs.IntVar(&c.adminPort, "admin-port", 8095, "pprof port, on loopback (it serves the profiler only with --enable-profiling)")
	fs.BoolVar(&c.profiling, "enable-profiling", false, "serve the Go profiler (/debug/pprof) on the admin port")
	fs.IntVar(&c.httpConnectPort, "http-connect-port", 8094, "HTTP-CONNECT frontend and /agents port (mTLS); 0 turns it off")
	fs.IntVar(&c.userServerPort, "user-server-port", 9092, "user-server HTTPS port; 0 turns it off")
	fs.IntVar(&c.serviceProxyPort, "service-proxy-port", 7443, "tunnel port of the agents' service-proxy")
	fs.StringVar(&c.serverCACert, "server-ca-cert", "", "CA bundle frontend client certificates are verified against")
	fs.StringVar(&c.serverCert, "server-cert", "", "frontend serving certificate")
	fs.StringVar(&c.serverKey, "server-key", "", "frontend serving key")
	fs.StringVar(&c.clusterCACert, "cluster-ca-cert", "", "CA bundle agent certificates are verified against")
	fs.StringVar(&c.clusterCert, "cluster-cert", "", "agent endpoint serving certificate")
	fs.StringVar(&c.clusterKey, "cluster-key", "", "agent endpoint serving key")
	fs.StringVar(&c.userServerCert, "user-server-cert", "", "user-server serving certificate")
	fs.StringVar(&c.userServerKey, "user-server-key", "", "user-server serving key")
	fs.StringVar(&c.impersonatorCert, "impersonator-cert", "", "client certificate presented to agents' service-proxies "+
		"when a hub user is sent on as impersonation; without it hub users are answered 503")
	fs.StringVar(&c.impersonatorKey, "impersonator-key", "", "key of --impersonator-cert")
	fs.StringVar(&c.hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub, where callers' tokens are reviewed and "+
		"their RBAC is checked; empty: the pod's own ServiceAccount when in a cluster, else hub tokens are not reviewed")
	fs.StringVar(&c.hubAuthorization, "hub-authorization", "SubjectAccessReview", "SubjectAccessReview: a hub user "+
		"needs the verb on clusters/proxy (gateway.proxy.open-cluster-management.io) of the cluster in the hub's RBAC; "+
		"None: only the managed cluster's RBAC decides, as in the existing add-on")
	fs.StringVar(&c.hubUserPrefix, "hub-user-prefix", "", "put this in front of every hub user and group name on the "+
		"managed clusters; empty: hub ServiceAccounts get cluster:hub:, other names stay")
	fs.StringVar(&c.hubServiceAccountGroups, "hub-service-account-groups", "prefixed", "without --hub-user-prefix, how the "+
		"groups of hub ServiceAccounts are named on the managed clusters: prefixed (cluster:hub:system:serviceaccounts:<ns>, "+
		"as the ServiceAccount) or unprefixed (as the existing add-on sends them)")
	fs.BoolVar(&c.perClusterMetrics, "per-cluster-metrics", true, "label cluster_proxy_cluster_requests_total and "+
		"cluster_proxy_cluster_request_duration_seconds with the cluster; false keeps one set of series for the whole fleet "+
		"(clusters x verbs x codes may be more series than Prometheus should hold); the access log names the cluster either way")
	fs.IntVar(&c.gatewayPort, "gateway-port", 0, "HTTPS port of the hub's aggregated API (gateway.proxy.open-cluster-management.io), "+
		"behind the hub kube-apiserver; 0 turns it off")
	fs.StringVar(&c.gatewayCert, "gateway-cert", "", "serving certificate of the aggregated API; it must name the Service its APIService names")
	fs.StringVar(&c.gatewayKey, "gateway-key", "", "key of --gateway-cert")
	fs.DurationVar(&c.agentWarmup, "agent-warmup", defaultAgentWarmup, "for this long after start, the user-server answers a "+
		"cluster no agent has reached here yet with 503 and Retry-After (client-go retries it on a new connection) "+
		"instead of 404; 0 turns it off")
	fs.StringVar(&c.peerAddress, "peer-address", "", "host:port of the HTTP-CONNECT port of the proxy-servers' client "+
		"Service; when set, a new replica turns Ready only once it holds an agent of every cluster the Ready replica "+
		"answering there holds, no replica is Ready, or --peer-wait has passed")
	fs.StringVar(&c.peerCert, "peer-cert", "", "client certificate (proxy-client) presented at --peer-address")
	fs.StringVar(&c.peerKey, "peer-key", "", "client key presented at --peer-address")
	fs.DurationVar(&c.peerWait, "peer-wait", server.DefaultPeerWait, "the longest a new replica holds its readiness back for its peers' agents")
	fs.IntVar(&c.frontendQueueBytes, "frontend-queue-bytes", server.DefaultFrontendQueueBytes, "bytes of one frontend "+
		"connection that may wait for its client to read them; this product's agent is then told to stop reading the "+
		"connection's destination until the client has read half, and an agent that cannot be told so is waited for")
	fs.DurationVar(&c.frontendStallTimeout, "frontend-stall-timeout", server.DefaultFrontendStallTimeout, "the longest an "+
		"agent that cannot pause one connection waits for that connection's client to read, when the client reads "+
		"nothing; a client that then falls twice --frontend-queue-bytes behind loses the connection")
	fs.IntVar(&c.tokenReviewConcurrency, "token-review-concurrency", review.DefaultConcurrency, "TokenReviews on the hub "+
		"in flight at once for tokens the hub knew before, and as many again for any other token; a request whose token "+
		"would need one more is answered 429 with Retry-After at once")
	fs.IntVar(&c.maxStreamsPerClient, "max-streams-per-client", server.DefaultMaxStreamsPerClient, "gRPC streams and "+
		"CONNECT tunnels one client certificate may hold at once on this replica (every hub program that mounts "+
		"proxy-client shares one); beyond it a stream ends with ResourceExhausted and a CONNECT is answered 429")
	fs.IntVar(&c.maxConnectionsPerAgent, "max-connections-per-agent", server.DefaultMaxConnectionsPerAgent, "connections "+
		"one agent stream may carry, established and dialing; a dial beyond it is refused (the user-server answers 503 with Retry-After)")
	fs.IntVar(&c.maxPendingDialsPerAgent, "max-pending-dials-per-agent", server.DefaultMaxPendingDialsPerAgent, "dials "+
		"one agent stream may have unanswered; a dial beyond it is refused like one beyond --max-connections-per-agent")
	fs.StringVar(&c.tlsProfileFile, "tls-profile-file", "", "the TLS profile of every listener (JSON: minTLSVersion, "+
		"cipherSuites), re-read like the certificates; missing: TLS 1.2 and Go's secure cipher suites")
	fs.Func(contract.AdoptedProxyClientFlag, "the SHA-256 fingerprint (hex) of a proxy-client certificate the existing add-on "+
		"issued, which reaches every cluster on the frontends as the operator's proxy-client does; repeatable (the "+
		"manager sets it when it takes the add-on's CA over)", func(v string) error {
		raw, err := hex.DecodeString(v)
		if err != nil || len(raw) != sha256.Size {
			return fmt.Errorf("want %d hexadecimal digits of a SHA-256 fingerprint, got %q", 2*sha256.Size, v)
		}
		c.adoptedProxyClients = append(c.adoptedProxyClients, [sha256.Size]byte(raw))
		return nil
	})
	var allowed []string
	fs.Func("allowed-service", "a service the user-server may reach, namespace/name[:port]; repeatable", func(v string) error {
		allowed = append(allowed, v)
		return nil
	})
	// Flags of ANP's proxy-server that configurations written for the existing addon pass in additionalArgs.
	fs.DurationVar(&c.keepaliveTime, "keepalive-time", server.DefaultAgentKeepaliveTime, "how often the agent endpoint pings idle agents")
	fs.DurationVar(&c.agentReconnectWait, "agent-reconnect-wait", server.DefaultAgentReconnectWait, "how long after a cluster "+
		"lost its last agent a dial to it waits for one to connect instead of failing (0: no wait)")
	fs.DurationVar(&c.frontendKeepalive, "frontend-keepalive-time", server.DefaultKeepaliveTime, "how often the frontends ping idle clients")
	fs.IntVar(&c.verbosity, "v", 0, "log verbosity (higher logs more), as ANP's -v")
	c.audit.AddFlags(fs)
	fs.StringVar(&c.sessionRecordingDir, "session-recording-dir", "", "folder exec and attach sessions are recorded in, as "+
		"asciicast v2 files <cluster>/<date>/<session>.cast; empty records none")
	fs.BoolVar(&c.sessionRecordingStdin, "session-recording-stdin", false, "record what is typed into sessions too "+
		"(passwords included), not only their output")
	fs.BoolVar(&c.sessionRecordingFailClosed, "session-recording-fail-closed", false, "refuse a session that cannot be "+
		"recorded, and end one whose recording fails; without it such sessions go on unrecorded, logged and counted")
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.verbosity > 0 && c.zap.Level == nil {
		c.zap.Level = zapcore.Level(-c.verbosity)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.proxyStrategies != "destHost" {
		return nil, fmt.Errorf("--proxy-strategies=%s: only destHost is supported", c.proxyStrategies)
	}
	if c.serverCount < 1 {
		return nil, fmt.Errorf("--server-count=%d: want at least 1", c.serverCount)
	}
	if c.frontendQueueBytes < minFrontendQueueBytes {
		return nil, fmt.Errorf("--frontend-queue-bytes=%d: want at least %d", c.frontendQueueBytes, minFrontendQueueBytes)
	}
	for name, v := range map[string]int{"max-streams-per-client": c.maxStreamsPerClient,
		"max-connections-per-agent": c.maxConnectionsPerAgent, "max-pending-dials-per-agent": c.maxPendingDialsPerAgent} {
		if v < 1 {
			return nil, fmt.Errorf("--%s=%d: want at least 1", name, v)
		}
	}
	if c.tokenReviewConcurrency < 1 {
		return nil, fmt.Errorf("--token-review-concurrency=%d: want at least 1", c.tokenReviewConcurrency)
	}
	if c.frontendStallTimeout <= 0 {
		return nil, fmt.Errorf("--frontend-stall-timeout=%s: want a positive duration", c.frontendStallTimeout)
	}
	for name, p := range map[string]int{
		"server-port": c.serverPort, "agent-port": c.agentPort, "health-port": c.healthPort, "admin-port": c.adminPort,
		"service-proxy-port": c.serviceProxyPort,
	} {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("--%s=%d: want a port from 1 to 65535", name, p)
		}
	}
	for name, p := range map[string]int{"http-connect-port": c.httpConnectPort, "user-server-port": c.userServerPort, "gateway-port": c.gatewayPort} {
		if p < 0 || p > 65535 {
			return nil, fmt.Errorf("--%s=%d: want a port from 1 to 65535, or 0 for off", name, p)
		}
	}
	var missing []string
	for name, v := range map[string]string{
		"server-ca-cert": c.serverCACert, "server-cert": c.serverCert, "server-key": c.serverKey,
		"cluster-ca-cert": c.clusterCACert, "cluster-cert": c.clusterCert, "cluster-key": c.clusterKey,
	} {
		if v == "" {
			missing = append(missing, "--"+name)
		}
	}
	if c.userServerPort != 0 && (c.userServerCert == "" || c.userServerKey == "") {
		missing = append(missing, "--user-server-cert and --user-server-key (or --user-server-port=0)")
	}
	if c.gatewayPort != 0 && (c.gatewayCert == "" || c.gatewayKey == "" || c.userServerPort == 0) {
		missing = append(missing, "--gateway-cert, --gateway-key and the user-server (or --gateway-port=0)")
	}
	if (c.impersonatorCert == "") != (c.impersonatorKey == "") {
		missing = append(missing, "both --impersonator-cert and --impersonator-key, or neither")
	}
	if c.hubAuthorization != "SubjectAccessReview" && c.hubAuthorization != "None" {
		return nil, fmt.Errorf("--hub-authorization=%s: want SubjectAccessReview or None", c.hubAuthorization)
	}
	if c.hubServiceAccountGroups != "prefixed" && c.hubServiceAccountGroups != "unprefixed" {
		return nil, fmt.Errorf("--hub-service-account-groups=%s: want prefixed or unprefixed", c.hubServiceAccountGroups)
	}
	if c.bindAddress != "" && net.ParseIP(c.bindAddress) == nil {
		return nil, fmt.Errorf("--bind-address=%s: want an IP address (the pod's, $(POD_IP), in a cluster) or nothing", c.bindAddress)
	}
	if c.healthBindAddress != "" && net.ParseIP(c.healthBindAddress) == nil {
		return nil, fmt.Errorf("--health-bind-address=%s: want an IP address (the pod's, $(POD_IP), in a cluster) or nothing", c.healthBindAddress)
	}
	if c.peerAddress != "" {
		if _, _, err := net.SplitHostPort(c.peerAddress); err != nil {
			return nil, fmt.Errorf("--peer-address=%s: want host:port: %w", c.peerAddress, err)
		}
		if c.peerCert == "" || c.peerKey == "" {
			missing = append(missing, "--peer-cert and --peer-key (or no --peer-address)")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	var err error
	if c.allowed, err = allowlist.ParseAll(allowed); err != nil {
		return nil, fmt.Errorf("--allowed-service: %w", err)
	}
	if c.serverID == "" {
		if c.serverID, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("--server-id is empty and the hostname is unknown: %w", err)
		}
	}
	return c, nil
}

func (c *config) options() server.Options {
	bind := func(host string, port int) string {
		if port == 0 {
			return ""
		}
		return net.JoinHostPort(host, strconv.Itoa(port))
	}
	addr := func(port int) string { return bind(c.bindAddress, port) }
	healthHost := c.bindAddress
	if c.healthBindAddress != "" {
		healthHost = c.healthBindAddress
	}
	return server.Options{
		ServerID:        c.serverID,
		ServerCount:     c.serverCount,
		FrontendAddr:    addr(c.serverPort),
		AgentAddr:       addr(c.agentPort),
		HealthAddr:      bind(healthHost, c.healthPort),
		AdminAddr:       net.JoinHostPort("127.0.0.1", strconv.Itoa(c.adminPort)),
		Profiling:       c.profiling,
		HTTPConnectAddr: addr(c.httpConnectPort),
		UserServerAddr:  addr(c.userServerPort),
		ServerCert:      c.serverCert, ServerKey: c.serverKey, ServerCACert: c.serverCACert,
		ClusterCert: c.clusterCert, ClusterKey: c.clusterKey, ClusterCACert: c.clusterCACert,
		UserServerCert: c.userServerCert, UserServerKey: c.userServerKey,
		ImpersonatorCert: c.impersonatorCert, ImpersonatorKey: c.impersonatorKey,
		AdoptedProxyClients: c.adoptedProxyClients,
		TLSProfileFile:      c.tlsProfileFile,
		ShutdownTimeout:     drainTimeout,
		LameDuck:            minDrainDuration,
		AgentKeepaliveTime:  c.keepaliveTime, FrontendKeepaliveTime: c.frontendKeepalive, AgentReconnectWait: noWaitIfZero(c.agentReconnectWait),
		PeerWait:           c.peerWait,
		FrontendQueueBytes: c.frontendQueueBytes, FrontendStallTimeout: c.frontendStallTimeout,
		MaxStreamsPerClient: c.maxStreamsPerClient, MaxConnectionsPerAgent: c.maxConnectionsPerAgent,
		MaxPendingDialsPerAgent: c.maxPendingDialsPerAgent,
	}
}

// hubReviewer reviews callers on the hub --hub-kubeconfig names, or the pod's cluster; nil outside a cluster without
// a kubeconfig.
func (c *config) hubReviewer(log logr.Logger) (userserver.HubReviewer, error) {
	var cfg *rest.Config
	var err error
	if c.hubKubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.hubKubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			log.Info("Not in a cluster and no --hub-kubeconfig: hub tokens are not reviewed, and go to the service-proxy, which refuses them")
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("hub client configuration: %w", err)
	}
	r, err := hubidentity.NewReviewer(cfg, hubidentity.ReviewerOptions{TokenReviewConcurrency: c.tokenReviewConcurrency})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy-server:", err)
		os.Exit(2)
	}
	log := zap.New(zap.UseFlagOptions(&c.zap))
	// Libraries log through controller-runtime\'s logger (the service-proxy, the user-server).
	ctrllog.SetLogger(log)
	// ANP logs through klog.
	klog.SetLogger(log.WithName("anp"))

	opts := c.options()
	opts.Log = log
	if c.peerAddress != "" {
		peerTLS, err := tlsreload.New(c.peerCert, c.peerKey, c.serverCACert)
		if err != nil {
			log.Error(err, "Unable to read the peer client certificate")
			os.Exit(1)
		}
		host, _, _ := net.SplitHostPort(c.peerAddress)
		opts.Peers = server.PeerClustersAt(c.peerAddress, func() (*tls.Config, error) {
			// Read again on every ask: the wait is short and the files may have been renewed meanwhile.
			if _, err := peerTLS.Reload(); err != nil {
				return nil, err
			}
			return peerTLS.ClientConfig(host), nil
		})
	}
	c.audit.Replica = c.serverID
	var auditor *audit.Auditor
	if c.audit.LogPath != "" || c.audit.WebhookKubeconfig != "" {
		if auditor, err = audit.New(c.audit); err != nil {
			log.Error(err, "Unable to set up the audit")
			os.Exit(1)
		}
	}
	hub, err := c.hubReviewer(log)
	if err != nil {
		log.Error(err, "Unable to reach the hub")
		os.Exit(1)
	}
	opts.Audit = auditor
	recorder := c.sessionRecorder(log)
	opts.RecordSinks = func() []tunnelclient.RecordSink { return recordSinks(auditor, recorder) }
	// A ProxyCertificate's client certificate reaches, on the frontends, the clusters the hub's RBAC grants it (none
	// without a hub: a nil HubReviewer is a nil ClusterAuthorizer).
	opts.Hub = hub
	srv, err := server.New(opts)
	if err != nil {
		log.Error(err, "Unable to set up the proxy-server")
		os.Exit(1)
	}
	var user server.UserServer
	if opts.UserServerAddr != "" {
		user = userserver.New(userserver.Options{
			Dialer:               srv,
			Clusters:             srv.Agents(),
			Hub:                  hub,
			SkipHubAuthorization: c.hubAuthorization == "None",
			Mapping: hubidentity.Mapping{Prefix: c.hubUserPrefix,
				UnprefixedServiceAccountGroups: c.hubServiceAccountGroups == "unprefixed"},
			MetricsWithoutCluster: !c.perClusterMetrics,
			ImpersonatorTLS:       srv.ImpersonatorTLS(),
			ServiceProxyPort:      c.serviceProxyPort,
			Allowed:               c.allowed,
			DrainTimeout:          drainTimeout,
			MinDrainDuration:      minDrainDuration,
			AgentWarmup:           c.agentWarmup,
			Audit:                 auditor,
			Sessions:              recorder,
			Replica:               c.serverID,
		})
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if c.gatewayPort != 0 {
		gw, err := gateway.New(gateway.Options{BindAddress: c.bindAddress, Port: c.gatewayPort, CertFile: c.gatewayCert,
			KeyFile: c.gatewayKey, TLSProfileFile: c.tlsProfileFile, HubKubeconfig: c.hubKubeconfig, Forward: user.(*userserver.Server), ShutdownDelay: minDrainDuration})
		if err != nil {
			log.Error(err, "Unable to set up the aggregated API")
			os.Exit(1)
		}
		srv.AddGateway(gw)
	}
	// The audit's sinks outlive the drain: the events of the requests it ends are written before the process ends.
	auditor.Run(ctx)
	err = srv.Run(ctx, user)
	auditor.Shutdown()
	if err != nil {
		log.Error(err, "The proxy-server stopped with an error")
		os.Exit(1)
	}
}

// sessionRecorder records sessions in --session-recording-dir; nil without one.
func (c *config) sessionRecorder(log logr.Logger) *sessionrec.Recorder {
	if c.sessionRecordingDir == "" {
		return nil
	}
	return sessionrec.New(sessionrec.Options{Sink: sessionrec.DirSink{Dir: c.sessionRecordingDir}, RecordStdin: c.sessionRecordingStdin,
		FailClosed: c.sessionRecordingFailClosed, Logger: log.WithName("session-recording")})
}

// recordSinks is the state of the audit's sinks and the session recorder's as the manager reads it
// (RecordsWritable).
func recordSinks(auditor *audit.Auditor, recorder *sessionrec.Recorder) []tunnelclient.RecordSink {
	var out []tunnelclient.RecordSink
	for _, h := range auditor.Health() {
		out = append(out, tunnelclient.RecordSink{Sink: "audit-" + h.Sink, Up: h.Up, Message: h.LastError})
	}
	if recorder != nil {
		up, message := recorder.Health()
		out = append(out, tunnelclient.RecordSink{Sink: tunnelclient.RecordSinkSessionRecording, Up: up, Message: message})
	}
	return out
}

// noWaitIfZero maps a flag's 0 ("no wait") to the negative duration server.Options means it by (0 is its default).
func noWaitIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
