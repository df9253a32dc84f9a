//go:build bench

package dataplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	agentopts "sigs.k8s.io/apiserver-network-proxy/cmd/agent/app/options"
	serveropts "sigs.k8s.io/apiserver-network-proxy/cmd/server/app/options"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	anpagent "sigs.k8s.io/apiserver-network-proxy/pkg/agent"
	anpserver "sigs.k8s.io/apiserver-network-proxy/pkg/server"
	"sigs.k8s.io/apiserver-network-proxy/pkg/server/proxystrategies"
	"sigs.k8s.io/apiserver-network-proxy/pkg/util"
	agentproto "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent/serviceproxy"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
)

const (
	cluster        = "c1"
	agentNamespace = "open-cluster-management-cluster-proxy"
	// kubeAPIServer, webService and streamsService are names only the agent's resolver knows. The first two lead to
	// the target, the third to the streams phase's own target.
	kubeAPIServer  = "kube.bench:443"
	webService     = "web.default.svc:80"
	streamsService = "streams.default.svc:80"
	// servicePath and streamsPath are the user-server's service form for webService and streamsService; a target path
	// follows them.
	servicePath = "/" + cluster + "/api/v1/namespaces/default/services/http:web:80/proxy-service"
	streamsPath = "/" + cluster + "/api/v1/namespaces/default/services/http:streams:80/proxy-service"
	// The services authenticate their callers themselves (token=optional): a token the hub does not know reaches the
	// service unreviewed, after the hub's review (cached) has said it is not a hub user's.
	bearer = "Bearer bench-token"
)

// world is everything the benchmark talks to, all in this process on 127.0.0.1.
type world struct {
	pki    *pki
	target *target
	// streamsTarget serves the streams phase. It closes connections idle for a second, so the service-proxy's pooled
	// upstream connections from that phase end by themselves and the goroutine count can return to its baseline.
	streamsTarget *target
	// kubeTarget is the managed kube-apiserver hub users reach, at kubeTLS.
	kubeTarget *target
	anp        *anpStack
	ours       *ourStack
	hub        *hubStack // nil when BENCH_MODES asks for no hub mode
	links      string    // the first relay of startLinks
	// audited is a second user-server of the same proxy-server that audits every request to a file; nil when
	// BENCH_MODES leaves the audited mode out.
	audited *auditedUser
	logs    *logCounter
}

func newWorld(t *testing.T, only map[string]bool) *world {
	t.Helper()
	w := &world{pki: newPKI(t), logs: &logCounter{}}
	if needsHub(only) {
		w.hub = startHub(t)
	}
	// ANP logs through klog, and so does the user-server when no logger is in its context: count, don't print.
	klog.SetLogger(logr.New(w.logs).WithName("klog"))
	ctrllog.SetLogger(logr.New(w.logs)) // the service-proxy's logger
	w.target = startTarget(t, 0, nil)
	w.streamsTarget = startTarget(t, time.Second, nil)
	w.kubeTarget = w.pki.kubeTLSTarget(t)
	w.anp = startANP(t, w.pki)
	w.ours = startOurs(t, w.pki, resolve.Resolver{kubeAPIServer: w.target.addr, kubeTLS: w.kubeTarget.addr, webService: w.target.addr,
		streamsService: w.streamsTarget.addr}, w.hub, logr.New(w.logs))
	if w.hub != nil {
		w.hub.serveGateway(t, w.pki, w.ours.user)
	}
	w.links = startLinks(t, w.pki, w.target.addr)
	if only == nil || only[keyAudited] {
		w.audited = startAuditedUser(t, w.ours)
	}
	return w
}

// pki is one throw-away ECDSA P-256 CA from internal/certs that issues every certificate of every mode.
type pki struct {
	dir    string
	ca     *certs.KeyPair
	caFile string
	pool   *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := certs.NewCA("bench-ca", 24*time.Hour, time.Now())
	must(t, err)
	p := &pki{dir: t.TempDir(), ca: ca, pool: x509.NewCertPool()}
	p.pool.AddCert(ca.Cert)
	p.caFile = p.write(t, "ca.crt", ca.CertPEM)
	return p
}

func (p *pki) write(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	must(t, os.WriteFile(path, data, 0o600))
	return path
}

// serving issues a server certificate for 127.0.0.1 and writes name.crt and name.key.
func (p *pki) serving(t *testing.T, name string) (certFile, keyFile string) {
	return p.leaf(t, name, certs.LeafSpec{CommonName: name, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
}

// client issues a client certificate with the proxy-client's role, which the frontends serve every cluster.
func (p *pki) client(t *testing.T, name string) (certFile, keyFile string) {
	return p.leaf(t, name, certs.LeafSpec{CommonName: name, URIs: []*url.URL{contract.SANURL(contract.ProxyClientRoleURI)},
		Usages: []certs.Usage{certs.UsageClientAuth}})
}

func (p *pki) leaf(t *testing.T, name string, spec certs.LeafSpec) (certFile, keyFile string) {
	t.Helper()
	spec.Duration = 24 * time.Hour
	kp, err := certs.IssueLeaf(p.ca, spec, time.Now())
	must(t, err)
	return p.write(t, name+".crt", kp.CertPEM), p.write(t, name+".key", kp.KeyPEM)
}

// agentCert goes the way an agent's certificate does: a CSR with the subject the operator's signer approves, signed
// by certs.SignCSR.
func (p *pki) agentCert(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	subject := contract.AgentCertificateSubject(cluster, agentNamespace, certs.Fingerprint(p.ca.Cert))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{
		CommonName: subject.CommonName, Organization: subject.Organizations, OrganizationalUnit: subject.OrganizationalUnits,
	}}, key)
	must(t, err)
	certPEM, err := certs.SignCSR(p.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), 24*time.Hour, nil, time.Now())
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return p.write(t, name+".crt", certPEM), p.write(t, name+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// clientTLS presents certFile and trusts the CA, for servers on 127.0.0.1.
func (p *pki) clientTLS(t *testing.T, certFile, keyFile string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		must(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// Target bodies.
const (
	bulkSize  = 64 << 20
	smallSize = 100
	slowChunk = 32
	slowEvery = 250 * time.Millisecond
)

var (
	bulkBody  = randomBytes(bulkSize)
	bulkSum   = sha256.Sum256(bulkBody)
	smallBody = randomBytes(smallSize)
)

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// target is the HTTP/1.1 destination every mode reaches (over TLS for the hub modes, plain for the others): /bulk (64 MiB from one buffer), /small (100 B), /slow
// (a 32-byte chunk every 250 ms until the client goes away) and /hold (100 B once holdN requests wait in /hold).
type target struct {
	addr string
	srv  *http.Server
	mux  *http.ServeMux // more routes may be added

	holdMu      sync.Mutex
	holdN       int
	holdArrived int
	holdRelease chan struct{}
}

func startTarget(t *testing.T, idleTimeout time.Duration, tlsConfig *tls.Config) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	mux := http.NewServeMux()
	tg := &target{addr: ln.Addr().String(), mux: mux}
	mux.HandleFunc("/bulk", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bulkSize))
		_, _ = w.Write(bulkBody)
	})
	mux.HandleFunc("/upload", upload)
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(smallSize))
		_, _ = w.Write(smallBody)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		tick := time.NewTicker(slowEvery)
		defer tick.Stop()
		stop := time.After(2 * time.Minute) // never outlives a broken benchmark by much
		chunk := smallBody[:slowChunk]
		for {
			if _, err := w.Write(chunk); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			case <-stop:
				return
			}
		}
	})
	mux.HandleFunc("/hold", tg.hold)
	tg.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout}
	go func() { _ = tg.srv.Serve(ln) }()
	t.Cleanup(func() { _ = tg.srv.Close() })
	return tg
}

// upload reads a request's body and answers with how many bytes it had, or with their SHA-256 for ?sum=1.
func upload(w http.ResponseWriter, r *http.Request) {
	var sum hash.Hash
	var body io.Reader = r.Body
	if r.URL.Query().Get("sum") != "" {
		sum = sha256.New()
		body = io.TeeReader(r.Body, sum)
	}
	n, err := readAll(body, make([]byte, bufferSize))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
	case sum != nil:
		_, _ = io.WriteString(w, hex.EncodeToString(sum.Sum(nil)))
	default:
		_, _ = io.WriteString(w, strconv.FormatInt(n, 10))
	}
}

// armHold makes the next n requests to /hold wait for each other.
func (tg *target) armHold(n int) {
	tg.holdMu.Lock()
	defer tg.holdMu.Unlock()
	tg.holdN, tg.holdArrived, tg.holdRelease = n, 0, make(chan struct{})
}

func (tg *target) hold(w http.ResponseWriter, r *http.Request) {
	tg.holdMu.Lock()
	release := tg.holdRelease
	tg.holdArrived++
	if tg.holdArrived == tg.holdN {
		close(release)
	}
	tg.holdMu.Unlock()
	select {
	case <-release:
	case <-time.After(time.Minute):
		http.Error(w, "not every /hold request arrived", http.StatusServiceUnavailable)
		return
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(smallSize))
	_, _ = w.Write(smallBody)
}

// anpStack is the baseline: apiserver-network-proxy v0.36.0's ProxyServer (destHost) with the mTLS gRPC frontend and
// agent endpoint its binary sets up, and ANP's own agent as its binary builds it, everything at default settings.
type anpStack struct {
	frontend  string
	clientTLS *tls.Config
	rsa       *rsaFrontend
}

func startANP(t *testing.T, p *pki) *anpStack {
	t.Helper()
	o := serveropts.NewProxyRunOptions()
	ps := anpserver.NewProxyServer("anp-server", []proxystrategies.ProxyStrategy{proxystrategies.ProxyStrategyDestHost},
		o.ServerCount, &anpserver.AgentTokenAuthenticationOptions{}, o.XfrChannelSize)
	ps.SetBackendDialTimeout(o.BackendDialTimeout)

	serverCert, serverKey := p.serving(t, "anp-server")
	clusterCert, clusterKey := p.serving(t, "anp-cluster")
	frontend := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(anpServerTLS(t, p.caFile, serverCert, serverKey, o.TLSMinVersion))),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: o.FrontendKeepaliveTime}),
	)
	client.RegisterProxyServiceServer(frontend, ps)
	agentEndpoint := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(anpServerTLS(t, p.caFile, clusterCert, clusterKey, o.TLSMinVersion))),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: o.KeepaliveTime}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}),
	)
	agentproto.RegisterAgentServiceServer(agentEndpoint, ps)
	frontLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	agentLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = frontend.Serve(frontLn) }()
	go func() { _ = agentEndpoint.Serve(agentLn) }()

	ao := agentopts.NewGrpcProxyAgentOptions()
	ao.AgentCert, ao.AgentKey = p.client(t, "anp-agent")
	ao.CaCert = p.caFile
	ao.ProxyServerHost = "127.0.0.1"
	ao.ProxyServerPort = agentLn.Addr().(*net.TCPAddr).Port
	ao.AgentID = "anp-agent"
	ao.AgentIdentifiers = "ipv4=127.0.0.1"
	must(t, ao.Validate())
	agentTLS, err := util.GetClientTLSConfig(ao.CaCert, ao.AgentCert, ao.AgentKey, ao.ProxyServerHost, ao.AlpnProtos)
	must(t, err)
	stopAgent := make(chan struct{})
	cs := ao.ClientSetConfig(
		grpc.WithTransportCredentials(credentials.NewTLS(agentTLS)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ao.KeepaliveTime, PermitWithoutStream: true}),
	).NewAgentClientSet(make(chan struct{}), stopAgent)
	cs.SetServerCounter(anpagent.NewAggregateServerCounter(nil, anpagent.NewResponseBasedCounter(cs), ao.ServerCountSource))
	cs.Serve()
	t.Cleanup(func() {
		close(stopAgent)
		frontend.Stop()
		agentEndpoint.Stop()
	})
	waitFor(t, "ANP's agent to connect", 20*time.Second, func() bool { return cs.HealthyClientsCount() > 0 })

	clientCert, clientKey := p.client(t, "anp-client")
	return &anpStack{frontend: frontLn.Addr().String(), clientTLS: p.clientTLS(t, clientCert, clientKey),
		rsa: startRSAFrontend(t, ps, o.FrontendKeepaliveTime)}
}

// anpServerTLS is the ANP proxy-server binary's TLS configuration: client certificates required and verified against
// the CA, the minimum version from --tls-min-version.
func anpServerTLS(t *testing.T, caFile, certFile, keyFile, minVersion string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	must(t, err)
	version, err := util.GetTLSVersion(minVersion)
	must(t, err)
	pool := x509.NewCertPool()
	raw, err := os.ReadFile(caFile)
	must(t, err)
	if !pool.AppendCertsFromPEM(raw) {
		t.Fatal("no CA certificate in " + caFile)
	}
	return &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, Certificates: []tls.Certificate{cert}, ClientCAs: pool, MinVersion: version}
}

// ourStack is our data plane wired as cmd/proxy-server and cmd/proxy-agent wire it: the proxy-server with its
// user-server, and an agent of cluster c1 with the in-process service-proxy; both allow default/web:80 and
// default/streams:80. With a hub, the user-server reviews tokens on it and sends hub users on with the impersonator's
// certificate, and the aggregated API serves on the user-server.
type ourStack struct {
	srv       *server.Server
	user      *userserver.Server
	userOpts  userserver.Options // how user was built; startUser builds more user-servers the same way
	addrs     server.Addrs
	agent     *agent.Agent
	allowed   allowlist.List
	userCert  tls.Certificate
	userTLS   *tls.Config // what a user-server client trusts
	clientTLS *tls.Config // the proxy-client certificate, for the gRPC frontend
	log       logr.Logger
	// userCertFile and userKeyFile are the user-server's serving certificate, which the other user-servers serve too.
	userCertFile, userKeyFile string
	// extraTunnels counts the tunnels the other user-servers (startUser) opened: the proxy-server's metric counts
	// them with the first user-server's.
	extraTunnels atomic.Int64
}

func startOurs(t *testing.T, p *pki, resolver resolve.Resolver, hub *hubStack, log logr.Logger) *ourStack {
	t.Helper()
	allowed, err := allowlist.ParseAll([]string{"default/web:80,token=optional", "default/streams:80,token=optional"})
	must(t, err)
	frontCert, frontKey := p.serving(t, "proxy-server")
	clusterCert, clusterKey := p.serving(t, "agent-server")
	userCert, userKey := p.serving(t, "user-server")
	impersonatorCert, impersonatorKey := p.impersonator(t)
	srv, err := server.New(server.Options{
		ServerID:       "bench-server",
		FrontendAddr:   "127.0.0.1:0",
		AgentAddr:      "127.0.0.1:0",
		HealthAddr:     "127.0.0.1:0",
		AdminAddr:      "127.0.0.1:0",
		UserServerAddr: "127.0.0.1:0",
		ServerCert:     frontCert, ServerKey: frontKey, ServerCACert: p.caFile,
		ClusterCert: clusterCert, ClusterKey: clusterKey, ClusterCACert: p.caFile,
		UserServerCert: userCert, UserServerKey: userKey,
		ImpersonatorCert: impersonatorCert, ImpersonatorKey: impersonatorKey,
		ShutdownTimeout: 5 * time.Second,
		Log:             log.WithName("proxy-server"),
	})
	must(t, err)
	must(t, srv.Listen())
	userOpts := userserver.Options{
		Dialer:           srv,
		Clusters:         srv.Agents(),
		ImpersonatorTLS:  srv.ImpersonatorTLS(),
		ServiceProxyPort: contract.ServiceProxyPort,
		Allowed:          allowed,
		DrainTimeout:     5 * time.Second,
	}
	if hub != nil {
		userOpts.Hub = hub.reviewer
	}
	user := userserver.New(userOpts)
	ctx, cancel := context.WithCancel(context.Background())
	serverDone := make(chan error, 1)
	go func() { serverDone <- srv.Run(ctx, user) }()

	agentCert, agentKey := p.agentCert(t, "agent")
	source, err := tlsreload.New(agentCert, agentKey, p.caFile)
	must(t, err)
	services, err := serviceproxy.New(serviceproxy.Options{
		Kube: &rest.Config{Host: "https://" + kubeTLS, BearerToken: "agent-token",
			TLSClientConfig: rest.TLSClientConfig{CAData: p.ca.CertPEM}},
		Allowed:     allowed,
		DialContext: resolver.DialContext,
	})
	must(t, err)
	a, err := agent.New(agent.Options{
		ServerAddress:    srv.Addrs().Agent,
		AgentID:          "agent-1",
		Identifiers:      contract.AgentIdentifiers(cluster, agentNamespace),
		TLS:              source,
		Dial:             resolver.DialContext,
		KubeAPIServer:    kubeAPIServer,
		ServiceProxy:     services,
		ServiceProxyPort: contract.ServiceProxyPort,
		ServiceProxyTLS:  serviceproxy.ServerTLSConfig(source.Certificate, source.CAPool),
		Log:              log.WithName("agent"),
	})
	must(t, err)
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		_ = a.Run(agentCtx)
	}()
	t.Cleanup(func() {
		stopAgent()
		cancel()
		<-agentDone
		select {
		case err := <-serverDone:
			if err != nil {
				t.Errorf("proxy-server: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("the proxy-server did not stop within 15s")
		}
	})
	waitFor(t, "our agent to connect", 20*time.Second, func() bool { return srv.Agents().Connected(cluster) })

	pair, err := tls.LoadX509KeyPair(userCert, userKey)
	must(t, err)
	proxyClientCert, proxyClientKey := p.client(t, "proxy-client")
	return &ourStack{
		srv: srv, user: user, userOpts: userOpts, addrs: srv.Addrs(), agent: a, allowed: allowed, userCert: pair, log: log,
		userTLS:      p.clientTLS(t, "", ""),
		clientTLS:    p.clientTLS(t, proxyClientCert, proxyClientKey),
		userCertFile: userCert, userKeyFile: userKey,
	}
}

// route is one way to reach the target: a URL prefix, the headers a request needs and how connections are opened.
type route struct {
	key, label string
	base       string
	header     http.Header
	tls        *tls.Config
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	// tunnels counts the tunnels this route's dial opened, or its user-server; nil when it opens none itself.
	tunnels *atomic.Int64
	// sent, when set, counts the requests made for this route (request), for a check that each was audited.
	sent *atomic.Int64
}

// transport is the same HTTP/1.1 client shape in every mode: compression off, keep-alive with up to maxIdle idle
// connections.
func (r *route) transport(maxIdle int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         r.dial,
		TLSClientConfig:     r.tls,
		ForceAttemptHTTP2:   false,
		DisableCompression:  true,
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     90 * time.Second,
	}
}

func (r *route) request(ctx context.Context, path string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		panic(err) // the URLs are ours
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if r.sent != nil {
		r.sent.Add(1)
	}
	return req
}

// tunnelDial opens a single-use konnectivity tunnel per connection with the user-server's dial options (mTLS and a
// 10-minute keepalive) and dials address through it.
func tunnelDial(frontend string, cfg *tls.Config, address string, count *atomic.Int64) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		tun, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, context.Background(), frontend,
			grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Minute}),
		)
		if err != nil {
			return nil, fmt.Errorf("tunnel to %s: %w", frontend, err)
		}
		count.Add(1)
		conn, err := tun.DialContext(ctx, "tcp", address)
		if err != nil {
			return nil, fmt.Errorf("dial %s through %s: %w", address, frontend, err)
		}
		return conn, nil
	}
}

// Route keys; BENCH_MODES selects among them.
const (
	keyDirect     = "direct"
	keyANP        = "anp"
	keyANPPerReq  = "anp-per-request"
	keyANPPerRSA  = "anp-per-request-rsa"
	keyOursRaw    = "ours-raw"
	keyFull       = "full"
	keyLinks      = "links"
	keyANPPool    = "anp-pool"
	keyDirectPool = "direct-pool"
	keyHubUser    = "hub-user"
	keyAggregated = "aggregated"
	keyAudited    = "audited"
)

func (w *world) routes() map[string]*route {
	plain := "http://" + w.target.addr
	anp := func(key, label string) *route {
		n := &atomic.Int64{}
		return &route{key: key, label: label, base: plain, tunnels: n,
			dial: tunnelDial(w.anp.frontend, w.anp.clientTLS, w.target.addr, n)}
	}
	oursRaw, perReqRSA := &atomic.Int64{}, &atomic.Int64{}
	user := w.ours.addrs.UserServer
	routes := map[string]*route{
		keyDirect:     {key: keyDirect, label: "direct over loopback (reference)", base: plain, dial: direct},
		keyDirectPool: {key: keyDirectPool, label: "direct over loopback, 64 kept-alive conns (reference)", base: plain, dial: direct},
		keyANP:        anp(keyANP, "raw ANP tunnel, defaults, reused (baseline)"),
		keyANPPool:    anp(keyANPPool, "raw ANP tunnels, defaults, 64 reused (reference)"),
		keyANPPerReq:  anp(keyANPPerReq, "raw ANP, new tunnel + transport per request (baseline)"),
		keyANPPerRSA: {key: keyANPPerRSA, label: "the same with RSA-2048 certificates (the anchor's key type; extra)", base: plain,
			tunnels: perReqRSA, dial: tunnelDial(w.anp.rsa.addr, w.anp.rsa.clientTLS, w.target.addr, perReqRSA)},
		keyOursRaw: {key: keyOursRaw, label: "raw tunnel: our proxy-server + agent (diagnostic)", base: "http://" + kubeAPIServer,
			tunnels: oursRaw, dial: tunnelDial(w.ours.addrs.Frontend, w.ours.clientTLS, net.JoinHostPort(cluster, "443"), oursRaw)},
		keyFull: {key: keyFull, label: "full path: user-server > proxy-server > agent > service-proxy", base: "https://" + user + servicePath,
			header: http.Header{"Authorization": {bearer}}, tls: w.ours.userTLS, dial: direct},
		keyLinks: {key: keyLinks, label: "the full path's links alone: TLS > relay > TLS > relay > TCP (floor)", base: "https://" + w.links,
			tls: w.ours.userTLS, dial: direct},
	}
	maps.Copy(routes, w.hubRoutes())
	if a := w.audited; a != nil {
		routes[keyAudited] = &route{key: keyAudited, label: "full path, audited (Metadata, file): the same with a user-server that audits",
			base: "https://" + a.addr + servicePath, header: http.Header{"Authorization": {bearer}}, tls: w.ours.userTLS, dial: direct,
			tunnels: a.tunnels, sent: a.sent}
	}
	return routes
}

// logCounter is the logr sink of our components and of klog (ANP): it counts lines and keeps the errors.
type logCounter struct {
	mu     sync.Mutex
	lines  int
	errors []string
}

func (l *logCounter) Init(logr.RuntimeInfo)  {}
func (l *logCounter) Enabled(level int) bool { return level == 0 }
func (l *logCounter) Info(_ int, _ string, _ ...any) {
	l.mu.Lock()
	l.lines++
	l.mu.Unlock()
}

func (l *logCounter) Error(err error, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines++
	l.errors = append(l.errors, fmt.Sprintf("%s: %v %v", msg, err, kv))
}
func (l *logCounter) WithValues(...any) logr.LogSink { return l }
func (l *logCounter) WithName(string) logr.LogSink   { return l }
func (l *logCounter) counts() (lines int, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines, append([]string(nil), l.errors...)
}

func waitFor(t *testing.T, what string, limit time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// readAll reads a body with a 64 KiB buffer, the same way in every mode, and returns how many bytes it had.
func readAll(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
