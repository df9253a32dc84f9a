package agent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	kclient "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/pkg/server"
	"sigs.k8s.io/apiserver-network-proxy/pkg/server/proxystrategies"
	agentproto "sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// serverName is the proxy-server's name in tests; --resolve-style mapping sends it to 127.0.0.1. It is not a
// loopback name, so forward-proxy rules apply to it.
const serverName = "proxy-server.test"

const testCluster = "c1"

// testPKI is a CA with the certificates a proxy-server, its clients and agents use.
type testPKI struct {
	dir    string
	ca     *certs.KeyPair
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA("test-hub-ca", time.Hour, now)
	must(t, err)
	p := &testPKI{dir: t.TempDir(), ca: ca, pool: x509.NewCertPool()}
	p.pool.AddCert(ca.Cert)
	p.server = p.leaf(t, certs.LeafSpec{CommonName: "proxy-server", DNSNames: []string{serverName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	p.client = p.leaf(t, certs.LeafSpec{CommonName: "proxy-client", Usages: []certs.Usage{certs.UsageClientAuth}})
	return p
}

func (p *testPKI) issue(t testing.TB, spec certs.LeafSpec) *certs.KeyPair {
	t.Helper()
	if spec.Duration == 0 {
		spec.Duration = time.Hour
	}
	kp, err := certs.IssueLeaf(p.ca, spec, time.Now())
	must(t, err)
	return kp
}

func (p *testPKI) leaf(t testing.TB, spec certs.LeafSpec) tls.Certificate {
	t.Helper()
	kp := p.issue(t, spec)
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	must(t, err)
	return c
}

// agentFiles writes a fresh agent certificate (and the CA bundle, plus extra CAs) to files and returns the
// certificate's serial.
func (p *testPKI) agentFiles(t testing.TB, extraCAs ...[]byte) (certFile, keyFile, caFile string, serial *big.Int) {
	t.Helper()
	kp := p.issue(t, certs.LeafSpec{
		CommonName:    contract.AgentCommonNamePrefix + testCluster,
		Organizations: []string{contract.AgentCertificateGroup},
		Usages:        []certs.Usage{certs.UsageClientAuth},
	})
	certFile, keyFile, caFile = filepath.Join(p.dir, "tls.crt"), filepath.Join(p.dir, "tls.key"), filepath.Join(p.dir, "ca.crt")
	bundle := append([]byte{}, p.ca.CertPEM...)
	for _, extra := range extraCAs {
		bundle = append(bundle, extra...)
	}
	must(t, os.WriteFile(caFile, bundle, 0o600))
	must(t, os.WriteFile(keyFile, kp.KeyPEM, 0o600))
	must(t, os.WriteFile(certFile, kp.CertPEM, 0o600))
	return certFile, keyFile, caFile, kp.Cert.SerialNumber
}

func (p *testPKI) serverTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

func (p *testPKI) clientTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.client}, RootCAs: p.pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
}

func counterValue(c prometheus.Counter) float64 {
	m := &dto.Metric{}
	_ = c.Write(m)
	return m.GetCounter().GetValue()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testServer is a real ANP proxy-server (destHost strategy) with its agent endpoint and gRPC frontend on loopback,
// both mTLS. It records the certificate serial of every agent stream, the streams open and the DRAINs received.
type testServer struct {
	id        string
	pki       *testPKI
	ps        *server.ProxyServer
	agentLis  net.Listener
	agentSrv  *grpc.Server
	frontLis  net.Listener
	frontSrv  *grpc.Server
	mu        sync.Mutex
	serials   []*big.Int
	active    int
	drains    int
	stopOnce  sync.Once
	agentPort int
	// refuseHeld makes the server refuse, as the product's does, the stream of an agent that names it among the
	// servers it holds (contract.HeldServersMetadata).
	refuseHeld atomic.Bool
	held       [][]string // the servers each stream named as held, in order
	handled    int        // streams handed to ANP
}

// startServer listens for agents on agentAddr ("" for any loopback port).
func startServer(t testing.TB, pki *testPKI, id string, count int, agentAddr string) *testServer {
	t.Helper()
	if agentAddr == "" {
		agentAddr = "127.0.0.1:0"
	}
	s := &testServer{id: id, pki: pki}
	s.ps = server.NewProxyServer(id, []proxystrategies.ProxyStrategy{proxystrategies.ProxyStrategyDestHost}, count,
		&server.AgentTokenAuthenticationOptions{}, 10)
	var err error
	s.agentLis, err = net.Listen("tcp", agentAddr)
	must(t, err)
	s.agentPort = s.agentLis.Addr().(*net.TCPAddr).Port
	s.agentSrv = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(pki.serverTLS())),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}),
		grpc.StreamInterceptor(s.intercept),
	)
	agentproto.RegisterAgentServiceServer(s.agentSrv, s.ps)
	go func() { _ = s.agentSrv.Serve(s.agentLis) }()

	s.frontLis, err = net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	s.frontSrv = grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.serverTLS())))
	client.RegisterProxyServiceServer(s.frontSrv, s.ps)
	go func() { _ = s.frontSrv.Serve(s.frontLis) }()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) stop() {
	s.stopOnce.Do(func() {
		s.agentSrv.Stop()
		s.frontSrv.Stop()
	})
}

// agentAddress is the address agents use: the server name, mapped to the listener by the agent's resolver.
func (s *testServer) agentAddress() string {
	return net.JoinHostPort(serverName, strconv.Itoa(s.agentPort))
}

func (s *testServer) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	held := metadata.ValueFromIncomingContext(ss.Context(), contract.HeldServersMetadata)
	s.mu.Lock()
	s.held = append(s.held, held)
	s.mu.Unlock()
	if s.refuseHeld.Load() && slices.Contains(held, s.id) {
		return status.Errorf(codes.AlreadyExists, "the agent holds %s already", s.id)
	}
	if p, ok := peer.FromContext(ss.Context()); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			s.mu.Lock()
			s.serials = append(s.serials, info.State.PeerCertificates[0].SerialNumber)
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.active++
	s.handled++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	return handler(srv, &watchedStream{ServerStream: ss, s: s})
}

// watchedStream counts the DRAIN packets an agent sends.
type watchedStream struct {
	grpc.ServerStream
	s *testServer
}

func (w *watchedStream) RecvMsg(m any) error {
	err := w.ServerStream.RecvMsg(m)
	if pkt, ok := m.(*client.Packet); ok && err == nil && pkt.Type == client.PacketType_DRAIN {
		w.s.mu.Lock()
		w.s.drains++
		w.s.mu.Unlock()
	}
	return err
}

func (s *testServer) activeStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// streamsHandled is how many streams the server handed to ANP.
func (s *testServer) streamsHandled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handled
}

// heldNamed is what each stream named as held, in order.
func (s *testServer) heldNamed() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.held)
}

func (s *testServer) drainsSeen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drains
}

func (s *testServer) agentSerials() []*big.Int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*big.Int(nil), s.serials...)
}

// dial opens a connection to address through the frontend, as a hub client does: one single-use tunnel per
// connection.
func (s *testServer) dial(ctx context.Context, address string) (net.Conn, error) {
	return s.dialTunnel(ctx, context.Background(), address)
}

// dialTunnel is dial with a tunnel that ends with tunnelCtx.
func (s *testServer) dialTunnel(ctx, tunnelCtx context.Context, address string) (net.Conn, error) {
	tun, err := kclient.CreateSingleUseGrpcTunnelWithContext(ctx, tunnelCtx, s.frontLis.Addr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(s.pki.clientTLS())))
	if err != nil {
		return nil, err
	}
	return tun.DialContext(ctx, "tcp", address)
}

// httpClient sends every request over a new tunnel to address.
func (s *testServer) httpClient(address string) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return s.dial(ctx, address) },
			DisableKeepAlives: true,
		},
	}
}

// get fetches path from address through the server and returns the body.
func (s *testServer) get(address, path string) (string, error) {
	resp, err := s.httpClient(address).Get("http://" + address + path)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", &statusError{resp.StatusCode, string(body)}
	}
	return string(body), nil
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return strconv.Itoa(e.code) + ": " + e.body }

// bulkSize is the size of /bulk.
const bulkSize = 16 << 20

var bulkBody = func() []byte {
	b := make([]byte, bulkSize)
	r := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // test data
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// targetHandler is the destination: /small, /bulk (16 MiB), /sha (hash of the request body), /sink (reads nothing
// and waits for the client to go away), /who (names the serving destination).
func targetHandler(name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "small from "+name) })
	mux.HandleFunc("/bulk", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bulkSize))
		_, _ = w.Write(bulkBody)
	})
	mux.HandleFunc("/sha", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		_, _ = io.Copy(h, r.Body)
		_, _ = io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("/sink", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	return mux
}

// kubeName is the kube-apiserver name the agent is given; the agent's resolver maps it to the test target.
const kubeName = "kube.test:443"

// testEnv is a proxy-server, a destination standing in for the kube-apiserver and the agent's options.
type testEnv struct {
	pki      *testPKI
	srv      *testServer
	target   *httptest.Server
	resolve  resolve.Resolver
	certFile string
	keyFile  string
	caFile   string
	serial   *big.Int
	src      *tlsreload.Source
}

func newEnv(t testing.TB) *testEnv { return newEnvWithServers(t, 1) }

// newEnvWithServers starts server-a, which says there are count proxy-servers.
func newEnvWithServers(t testing.TB, count int) *testEnv {
	t.Helper()
	e := &testEnv{pki: newPKI(t)}
	e.srv = startServer(t, e.pki, "server-a", count, "")
	e.target = httptest.NewServer(targetHandler("kube-apiserver"))
	t.Cleanup(e.target.Close)
	e.certFile, e.keyFile, e.caFile, e.serial = e.pki.agentFiles(t)
	var err error
	e.src, err = tlsreload.New(e.certFile, e.keyFile, e.caFile)
	must(t, err)
	e.resolve = resolve.Resolver{
		e.srv.agentAddress(): e.srv.agentLis.Addr().String(),
		kubeName:             e.target.Listener.Addr().String(),
	}
	return e
}

// renewAgentCert writes a new agent certificate (and the CA bundle with extraCAs) over the files and reloads them.
func (e *testEnv) renewAgentCert(t testing.TB, extraCAs ...[]byte) *big.Int {
	t.Helper()
	_, _, _, e.serial = e.pki.agentFiles(t, extraCAs...)
	changed, err := e.src.Reload()
	must(t, err)
	if !changed {
		t.Fatal("the reloaded files did not change")
	}
	return e.serial
}

func (e *testEnv) options(t testing.TB) Options {
	return Options{
		ServerAddress:    e.srv.agentAddress(),
		AgentID:          "agent-1",
		Identifiers:      contract.AgentIdentifiers(testCluster, "ns"),
		TLS:              e.src,
		Dial:             e.resolve.DialContext,
		KubeAPIServer:    kubeName,
		ServiceProxy:     targetHandler("service-proxy"),
		ServiceProxyPort: contract.ServiceProxyPort,
		ReconnectMax:     500 * time.Millisecond,
		Log:              testr.NewWithInterface(t, testr.Options{Verbosity: 1}),
	}
}

// runAgent runs an agent until the test ends; stop cancels it and waits for Run to return.
func runAgent(t testing.TB, opts Options) (a *Agent, stop func()) {
	t.Helper()
	a, err := New(opts)
	must(t, err)
	return a, run(t, a)
}

// run runs a until the test ends; stop cancels it and waits for Run to return.
func run(t testing.TB, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// connectProxy is an HTTP CONNECT forward proxy on loopback, over plain TCP or TLS. It records each CONNECT target
// and Proxy-Authorization header.
type connectProxy struct {
	ln      net.Listener
	resolve resolve.Resolver
	mu      sync.Mutex
	targets []string
	auths   []string
}

func startConnectProxy(t testing.TB, cert *tls.Certificate, resolve resolve.Resolver) *connectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})
	}
	p := &connectProxy{ln: ln, resolve: resolve}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.handle(c)
			}()
		}
	}()
	return p
}

func (p *connectProxy) handle(c net.Conn) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, req.Host)
	p.auths = append(p.auths, req.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := p.resolve.DialContext(context.Background(), "tcp", req.Host)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer func() { _ = up.Close() }()
	_, _ = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, br)
		_ = up.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	<-done
}

func (p *connectProxy) seen() (targets, auths []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...), append([]string(nil), p.auths...)
}
