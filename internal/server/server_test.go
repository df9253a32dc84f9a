package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc/connectivity"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

func TestGRPCAndHTTPConnectFrontendsReachTheClusterAtTheSameTime(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := httpTarget(t, "c1-apiserver")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1&host=c1.ns1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())

	// A hub client's way: a konnectivity single-use tunnel over the mTLS gRPC frontend, dialing <cluster>:443.
	grpcConn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = grpcConn.Close() }()
	grpcReader := bufio.NewReader(grpcConn)
	g.Expect(get(grpcConn, grpcReader, "c1", "/via-grpc")).To(Equal("c1-apiserver /via-grpc"))

	// While that tunnel is open, curl's way: CONNECT over TLS to the HTTP-CONNECT frontend.
	connectConn, connectReader, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = connectConn.Close() }()
	g.Expect(get(connectConn, connectReader, "c1", "/via-connect")).To(Equal("c1-apiserver /via-connect"))

	// Both tunnels carry traffic side by side.
	g.Expect(get(grpcConn, grpcReader, "c1", "/again")).To(Equal("c1-apiserver /again"))
	g.Expect(get(connectConn, connectReader, "c1", "/again")).To(Equal("c1-apiserver /again"))

	// A cluster without an agent is not reachable, and says so.
	_, _, err = httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c2:443")
	g.Expect(err).To(MatchError(ContainSubstring("CONNECT c2:443")))
	g.Expect(err).To(MatchError(ContainSubstring("503 Service Unavailable")), "no agent: unavailable, not a bad gateway")
}

// handshakeRefused checks that the server refuses the TLS session with an alert: with TLS 1.3 the client finishes
// its side of the handshake first and reads the refusal on its first read.
func handshakeRefused(addr string, cfg *tls.Config) error {
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write([]byte("GET /agents HTTP/1.1\r\nHost: x\r\n\r\n"))
	_, err = conn.Read(make([]byte, 1))
	if err != nil && strings.Contains(err.Error(), "remote error: tls:") {
		return nil
	}
	return fmt.Errorf("want a TLS alert, got %w", err)
}

func TestFrontendsRefuseClientsWithoutAProxyClientCertificate(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	noCert := f.pki.clientTLS(t, "", "")
	agentCert := f.agentTL("c1", "ns1")
	// The impersonator's key vouches for hub users to the service-proxies; on a frontend it would reach every cluster
	// with no hub RBAC asked. Refused by its name and by its role, whichever it carries.
	impCert, impKey, _ := f.pki.issue(t, "impersonator", leafSpec{cn: contract.ImpersonatorCommonName, uris: []string{contract.ImpersonatorRoleURI}})
	impersonator := f.pki.clientTLS(t, impCert, impKey)
	impNameCert, impNameKey, _ := f.pki.issue(t, "impersonator-name", leafSpec{cn: contract.ImpersonatorCommonName})
	impersonatorName := f.pki.clientTLS(t, impNameCert, impNameKey)
	impRoleCert, impRoleKey, _ := f.pki.issue(t, "impersonator-role", leafSpec{cn: "renamed", uris: []string{contract.ImpersonatorRoleURI}})
	impersonatorRole := f.pki.clientTLS(t, impRoleCert, impRoleKey)

	for name, addr := range map[string]string{"gRPC frontend": f.addrs.Frontend, "HTTP-CONNECT": f.addrs.HTTPConnect} {
		g.Expect(handshakeRefused(addr, noCert)).To(Succeed(), "%s without a client certificate", name)
		// Agents hold certificates from the same CA; they may serve their cluster, not use the frontends.
		g.Expect(handshakeRefused(addr, agentCert)).To(Succeed(), "%s with an agent certificate", name)
		g.Expect(handshakeRefused(addr, impersonator)).To(Succeed(), "%s with the impersonator certificate", name)
		g.Expect(handshakeRefused(addr, impersonatorName)).To(Succeed(), "%s with the impersonator's name", name)
		g.Expect(handshakeRefused(addr, impersonatorRole)).To(Succeed(), "%s with the impersonator's role", name)
	}
	_, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: noCert}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).To(HaveOccurred())

	// The same listener with the proxy-client certificate answers.
	resp, err := httpsClient(f.proxyTL).Get("https://" + f.addrs.HTTPConnect + "/agents")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
}

func TestAgentsViewListsConnectedAgentsAndDropsThemWhenTheyLeave(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	g.Expect(fetchAgents(g, f)).To(BeEmpty())
	g.Expect(f.srv.Agents().Known("c1")).To(BeFalse())

	a1, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1&host=c1.ns1", nil)
	g.Expect(err).NotTo(HaveOccurred())
	a2, err := f.agent(t, "c1", "ns1", "agent-2", "host=c1", nil)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := f.agent(t, "c2", "ns2", "agent-1", "host=c2", nil)
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		g.Expect(fetchAgents(g, f)).To(Equal(map[string]ClusterAgents{
			"c1": {Agents: []string{"agent-1", "agent-2"}},
			"c2": {Agents: []string{"agent-1"}},
		}))
	}).Should(Succeed())
	g.Expect(f.srv.Agents().Connected("c1")).To(BeTrue())

	a1.Close()
	g.Eventually(func(g Gomega) {
		g.Expect(fetchAgents(g, f)).To(Equal(map[string]ClusterAgents{
			"c1": {Agents: []string{"agent-2"}},
			"c2": {Agents: []string{"agent-1"}},
		}))
	}).Should(Succeed())
	a2.Close()
	b.Close()
	g.Eventually(func(g Gomega) { g.Expect(fetchAgents(g, f)).To(BeEmpty()) }).Should(Succeed())
	g.Expect(f.srv.Agents().Connected("c1")).To(BeFalse())
	g.Expect(f.srv.Agents().Known("c1")).To(BeTrue(), "a cluster stays known after its agents left")

	// Only GET reads the view; other paths are not there.
	client := httpsClient(f.proxyTL)
	resp, err := client.Post("https://"+f.addrs.HTTPConnect+"/agents", "application/json", nil)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusMethodNotAllowed))
	resp, err = client.Get("https://" + f.addrs.HTTPConnect + "/other")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
}

func TestRenewedServerCertificateServesNewHandshakesAndKeepsEstablishedTunnels(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := httpTarget(t, "c1-apiserver")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())

	serial := func(g Gomega) string {
		cfg := f.proxyTL.Clone()
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.Dial("tcp", f.addrs.Frontend, cfg)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial(g)

	grpcConn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = grpcConn.Close() }()
	grpcReader := bufio.NewReader(grpcConn)
	g.Expect(get(grpcConn, grpcReader, "c1", "/before")).To(Equal("c1-apiserver /before"))
	connectConn, connectReader, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = connectConn.Close() }()

	_, _, renewed := f.pki.issue(t, "proxy-server", leafSpec{cn: "proxy-server", server: true})
	g.Expect(renewed.SerialNumber.String()).NotTo(Equal(before))
	g.Eventually(serial).Should(Equal(renewed.SerialNumber.String()))

	// The tunnels opened under the old certificate still carry traffic.
	g.Expect(get(grpcConn, grpcReader, "c1", "/after")).To(Equal("c1-apiserver /after"))
	g.Expect(get(connectConn, connectReader, "c1", "/after")).To(Equal("c1-apiserver /after"))
	// And new tunnels work under the new one.
	conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	g.Expect(get(conn, bufio.NewReader(conn), "c1", "/new")).To(Equal("c1-apiserver /new"))
}

// fakeUserServer stands in for internal/server/userserver: it answers every request with its name.
type fakeUserServer struct {
	ready atomic.Bool
}

func (u *fakeUserServer) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "user-server")
	})}
	go func() {
		<-ctx.Done()
		u.ready.Store(false)
		_ = srv.Shutdown(context.Background())
	}()
	u.ready.Store(true)
	return srv.Serve(ln)
}

func (u *fakeUserServer) Ready() bool { return u.ready.Load() }

func TestHealthReadinessFollowsTheUserServerAndMetricsShowOurs(t *testing.T) {
	g := NewWithT(t)
	user := &fakeUserServer{}
	f := startFixture(t, false, func(*Server) UserServer { return user }, nil)

	status := func(path string) int {
		resp, err := http.Get("http://" + f.addrs.Health + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	g.Expect(status("/healthz")).To(Equal(http.StatusOK))
	g.Eventually(func() int { return status("/readyz") }).Should(Equal(http.StatusOK))
	user.ready.Store(false)
	g.Expect(status("/readyz")).To(Equal(http.StatusServiceUnavailable))
	user.ready.Store(true)
	g.Expect(status("/readyz")).To(Equal(http.StatusOK))

	// The user-server listener is TLS with the user-server certificate and asks for no client certificate.
	resp, err := httpsClient(f.pki.clientTLS(t, "", "")).Get("https://" + f.addrs.UserServer + "/c1/api")
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(body)).To(Equal("user-server"))
	g.Expect(resp.TLS.PeerCertificates[0].Subject.CommonName).To(Equal("user-server"))

	text := metricsText(g, f)
	g.Expect(hasLine(text, `cluster_proxy_agent_identity_refusals_total{reason="foreign_identifier"}`)).To(BeTrue())
	g.Expect(hasLine(text, "cluster_proxy_server_agent_streams ")).To(BeTrue())
	g.Expect(hasLine(text, "cluster_proxy_server_established_connections ")).To(BeTrue())

	// The admin server serves no profiler unless asked to.
	resp, err = http.Get("http://" + f.addrs.Admin + "/debug/pprof/")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound), "profiling is off by default")
}

func TestTheAdminPortServesTheProfilerOnlyWhenAsked(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, func(o *Options) { o.Profiling = true })
	resp, err := http.Get("http://" + f.addrs.Admin + "/debug/pprof/")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
}

func TestProbeReadsTheClusterHealthThroughTheInProcessAndTheFrontendDialers(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	apiserver := httptestTLSHealthz(t, "ok")
	sick := httptestTLSHealthz(t, "[-]etcd failed")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": apiserver})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.agent(t, "c2", "ns2", "agent-1", "host=c2", map[string]string{"c2:443": sick})
	g.Expect(err).NotTo(HaveOccurred())

	for name, d := range map[string]Dialer{
		"in-process": f.srv,
		"frontend":   &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL},
	} {
		result, err := tunnelclient.Probe(context.Background(), d.DialCluster, "c1")
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(result.Healthy).To(BeTrue(), name)
		g.Expect(result.Latency).To(BeNumerically(">", 0), name)

		// An answer other than "ok" is an unhealthy result that carries the answer, not an error.
		result, err = tunnelclient.Probe(context.Background(), d.DialCluster, "c2")
		g.Expect(result.Healthy).To(BeFalse(), name)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(result.Message).To(ContainSubstring("etcd failed"), name)

		result, err = tunnelclient.Probe(context.Background(), d.DialCluster, "c3")
		g.Expect(result.Healthy).To(BeFalse(), name)
		g.Expect(err).To(HaveOccurred(), name)
	}
}

func TestShutdownEndsAtItsBoundWhileTunnelsAreOpen(t *testing.T) {
	g := NewWithT(t)
	const bound = time.Minute
	clk := clocktesting.NewFakeClock(time.Now())
	f := startFixture(t, false, nil, func(o *Options) { o.ShutdownTimeout, o.Clock = bound, clk })
	target := httpTarget(t, "c1-apiserver")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())
	for _, d := range []Dialer{f.srv, &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}} {
		conn, err := d.DialCluster(context.Background(), "c1", 443)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = conn.Close() }()
	}
	connectConn, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = connectConn.Close() }()

	stopped := make(chan error, 1)
	go func() { stopped <- f.stop() }()
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the shutdown started its bound")
	g.Expect(f.srv.Ready()).To(BeFalse())
	clk.Step(bound - time.Nanosecond)
	g.Consistently(stopped, 100*time.Millisecond).ShouldNot(Receive(), "the open tunnels hold the shutdown until its bound")
	clk.Step(time.Nanosecond)
	g.Eventually(stopped).WithTimeout(10*time.Second).Should(Receive(BeNil()), "the bound cuts the open tunnels")
	_, err = net.Dial("tcp", f.addrs.Frontend)
	g.Expect(err).To(HaveOccurred(), "the frontend no longer listens")
}

// Behind a Service, a refused connection to the frontend is a replica that is gone but still listed: the tunnel
// dialer tries again, and another attempt reaches a live one. A refusal is cheap and the Service picks the dead
// replica again at random, so it gives up only after eight refusals; a cluster no replica has is tried three times at
// once, each a tunnel, and then, unless NoAgentWait is negative as here, waited for.
func TestTunnelDialerTriesAgainWhenTheFrontendRefusesTheConnection(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := httpTarget(t, "c1-apiserver")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	goneAddr := gone.Addr().String()
	g.Expect(gone.Close()).To(Succeed())

	// dialer counts its dials and sends the nth to to(n), as a Service's endpoints would.
	var dials atomic.Int32
	dialer := func(to func(n int32) string) *TunnelDialer {
		dials.Store(0)
		return &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL, NoAgentWait: -1, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, to(dials.Add(1)))
		}}
	}
	live := func(int32) string { return f.addrs.Frontend }
	// goneFirst sends the first k dials to the gone replica, then the rest to the live one.
	goneFirst := func(k int32) func(int32) string {
		return func(n int32) string {
			if n <= k {
				return goneAddr
			}
			return f.addrs.Frontend
		}
	}

	// The first connection lands on the gone replica, as a Service's stale endpoint sends it there.
	conn, err := dialer(goneFirst(1)).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(get(conn, bufio.NewReader(conn), "c1", "/after-a-refusal")).To(Equal("c1-apiserver /after-a-refusal"))
	g.Expect(conn.Close()).To(Succeed())
	g.Expect(dials.Load()).To(BeEquivalentTo(2))

	// Seven in a row land there (one replica of three dead: 1 in 2,187), as happened once in e2e with three.
	conn, err = dialer(goneFirst(7)).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(get(conn, bufio.NewReader(conn), "c1", "/after-seven-refusals")).To(Equal("c1-apiserver /after-seven-refusals"))
	g.Expect(conn.Close()).To(Succeed())
	g.Expect(dials.Load()).To(BeEquivalentTo(8))

	_, err = dialer(func(int32) string { return goneAddr }).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	g.Expect(dials.Load()).To(BeEquivalentTo(8), "a frontend that refuses every time is given up")

	_, err = dialer(live).DialCluster(context.Background(), "nowhere", 443)
	g.Expect(err).To(MatchError(ContainSubstring("dial cluster nowhere port 443")))
	g.Expect(err).To(MatchError(ContainSubstring("No agent available")))
	g.Expect(dials.Load()).To(BeEquivalentTo(3), "a replica without the cluster's agent is tried again at once, twice")
}

// After turning unready on shutdown, both frontends still serve new connections for the lame duck, which endpoints
// and load balancers may send before they notice, through the agents, which were told with GOAWAY; then they stop.
func TestFrontendsServeNewConnectionsForTheLameDuckAfterTurningUnready(t *testing.T) {
	g := NewWithT(t)
	const lameDuck = 3 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	f := startFixture(t, false, nil, func(o *Options) { o.LameDuck, o.ShutdownTimeout, o.Clock = lameDuck, time.Hour, clk })
	target := httpTarget(t, "c1-apiserver")
	agent, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(f.srv.Ready).Should(BeTrue())

	stopped := make(chan error, 1)
	go func() { stopped <- f.stop() }()
	g.Eventually(f.srv.Ready).Should(BeFalse())
	// GOAWAY: the agent's connection leaves Ready, so a real agent looks for another server; its stream stays.
	g.Eventually(agent.conn.GetState).ShouldNot(Equal(connectivity.Ready), "the agent was told")

	conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred(), "gRPC frontend during the lame duck")
	g.Expect(get(conn, bufio.NewReader(conn), "c1", "/")).To(Equal("c1-apiserver /"))
	g.Expect(conn.Close()).To(Succeed())
	connectConn, br, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).NotTo(HaveOccurred(), "HTTP-CONNECT frontend during the lame duck")
	g.Expect(get(connectConn, br, "c1", "/")).To(Equal("c1-apiserver /"))
	g.Expect(connectConn.Close()).To(Succeed())

	stepped := time.Duration(0)
	g.Eventually(func() bool {
		clk.Step(time.Second)
		stepped += time.Second
		return len(stopped) > 0
	}).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(<-stopped).To(Succeed())
	g.Expect(stepped).To(BeNumerically("<", time.Hour), "it stopped after the lame duck, not at the shutdown bound")
	_, err = net.Dial("tcp", f.addrs.Frontend)
	g.Expect(err).To(HaveOccurred(), "the frontend no longer listens")
}

// A tunnel's connection that the cluster closed, or whose proxy-server went away, closes without an error, as a TCP
// connection its peer closed does. konnectivity's own Close reports "tunnel closed" for both: always for the second,
// and for the first at random once the agent's CLOSE_RSP and the tunnel's end have both arrived, which each round
// awaits (the tunnel closes its gRPC connection just before it ends) so that twenty rounds find it.
func TestClosingATunnelWhoseOtherEndIsGoneSucceeds(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	// The target answers a byte with "bye" and closes; until then it holds the connection open.
	target := startTCPTarget(t, func(c net.Conn) {
		if _, err := c.Read(make([]byte, 1)); err == nil {
			_, _ = io.WriteString(c, "bye")
		}
	})
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target.addr})
	g.Expect(err).NotTo(HaveOccurred())
	frontendClosed := make(chan struct{}, 100)
	dialer := &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return closeNotifier{conn, frontendClosed}, err
	}}

	for i := range 20 {
		conn, err := dialer.DialCluster(context.Background(), "c1", 443)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = conn.Write([]byte("?"))
		g.Expect(err).NotTo(HaveOccurred())
		got, err := io.ReadAll(conn)
		g.Expect(err).NotTo(HaveOccurred(), "the cluster's close is the end of the data")
		g.Expect(string(got)).To(Equal("bye"))
		g.Eventually(frontendClosed).Should(Receive(), "the tunnel ends with its connection")
		g.Expect(conn.Close()).To(Succeed(), "close %d after the cluster closed", i)
	}

	conn, err := dialer.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.stop()).To(Succeed())
	_, err = io.ReadAll(conn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.Close()).To(Succeed(), "close after the proxy-server went away")
}

// closeNotifier sends on closed when the connection is closed.
type closeNotifier struct {
	net.Conn
	closed chan<- struct{}
}

func (c closeNotifier) Close() error {
	c.closed <- struct{}{}
	return c.Conn.Close()
}
