package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// dialResult is what a dial made in the background came to.
type dialResult struct {
	conn net.Conn
	err  error
}

// dialInBackground dials c1:443 through the gRPC frontend, as hub clients do, with a context far longer than the
// test waits: only a dial left waiting would run into it.
func dialInBackground(f *fixture) <-chan dialResult {
	dialed := make(chan dialResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(ctx, "c1", 443)
		dialed <- dialResult{conn, err}
	}()
	return dialed
}

// ANP leaves a gRPC client's dial waiting on an agent stream that ended until the client's own timeout. The router
// answers it when the stream ends, and says why.
func TestGRPCFrontendDialWaitingOnAnAgentStreamThatEndsFailsAtOnce(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	going, err := f.agent(t, "c1", "ns1", "agent-going", "host=c1", nil)
	g.Expect(err).NotTo(HaveOccurred())
	going.unresponsive.Store(true)

	dialed := dialInBackground(f)
	g.Eventually(going.dropped).Should(Receive())
	going.Close()

	var r dialResult
	g.Eventually(dialed).Should(Receive(&r))
	g.Expect(r.err).To(MatchError(ContainSubstring(errAgentStreamEnded.Error())))
}

// An agent answers only the dials sent to it: a DIAL_RSP naming another agent's dial is closed at the agent that sent
// it, and the dial keeps waiting for its own agent.
func TestAnAgentCannotAnswerADialSentToAnotherAgent(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	owner, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", nil)
	g.Expect(err).NotTo(HaveOccurred())
	owner.unresponsive.Store(true)
	other, err := f.agent(t, "c2", "ns2", "agent-1", "host=c2", nil)
	g.Expect(err).NotTo(HaveOccurred())

	dialed := dialInBackground(f)
	var req *client.DialRequest
	g.Eventually(owner.dropped).Should(Receive(&req))

	const spoofed = 4242
	g.Expect(other.send(packet.DialResponse(req.Random, spoofed, ""))).To(Succeed())
	g.Eventually(other.closeReqs).Should(Receive(Equal(int64(spoofed))), "the answer's connection is closed at its agent")

	// Had the answer been taken, the dial would have succeeded; it still waits for the agent it went to.
	owner.Close()
	var r dialResult
	g.Eventually(dialed).Should(Receive(&r))
	g.Expect(r.err).To(MatchError(ContainSubstring(errAgentStreamEnded.Error())))
}

// The proxy-server's gauges count what the router holds: agent streams, and connections the agents answered.
func TestGaugesFollowAgentStreamsAndConnections(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := startTCPTarget(t, echo)
	streams, conns := gaugeValue(agentStreams), gaugeValue(established)

	a, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target.addr})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gaugeValue(agentStreams)).To(Equal(streams + 1))

	conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gaugeValue(established)).To(Equal(conns + 1))
	g.Expect(conn.Close()).To(Succeed())
	g.Eventually(func() float64 { return gaugeValue(established) }).Should(Equal(conns), "the agent's CLOSE_RSP ends it")

	_, err = f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	a.Close()
	g.Eventually(func() float64 { return gaugeValue(agentStreams) }).Should(Equal(streams))
	g.Eventually(func() float64 { return gaugeValue(established) }).Should(Equal(conns), "the stream's connections went with it")
}

// A client may send its first bytes with the CONNECT request, before the answer: they reach the target first.
func TestConnectCarriesBytesSentWithTheRequest(t *testing.T) {
	g := NewWithT(t)
	f, _ := echoFixture(t, nil)

	conn, err := tls.Dial("tcp", f.addrs.HTTPConnect, f.proxyTL)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	g.Expect(conn.SetDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
	_, err = io.WriteString(conn, "CONNECT c1:443 HTTP/1.1\r\nHost: c1:443\r\n\r\nearly bytes")
	g.Expect(err).NotTo(HaveOccurred())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close() // a CONNECT answer has no body; closing it leaves the connection alone
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	got := make([]byte, len("early bytes"))
	_, err = io.ReadFull(br, got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("early bytes"))
}

func gaugeValue(gauge prometheus.Gauge) float64 {
	var m dto.Metric
	if err := gauge.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// When a cluster's agents all lose their streams at once (their forward proxy restarts), a dial through any frontend
// waits for one to connect again, for the reconnect wait after the loss, instead of failing with "No agent
// available"; the gRPC client here does not try again itself. After the wait, dials fail at once.
func TestDialsThroughEveryFrontendWaitForAClusterWhoseAgentsReconnect(t *testing.T) {
	g := NewWithT(t)
	const wait = 10 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	f := startFixture(t, false, nil, func(o *Options) { o.AgentReconnectWait, o.Clock = wait, clk })
	target := httpTarget(t, "c1-apiserver")
	targets := map[string]string{"c1:443": target}
	first, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	first.Close()
	g.Eventually(func() bool { return f.srv.Agents().Connected("c1") }).Should(BeFalse())
	g.Expect(f.srv.Agents().Reconnecting("c1")).To(BeTrue(), "the user-server sends the cluster's requests on to wait")

	type opened struct {
		name string
		conn net.Conn
		br   *bufio.Reader
		err  error
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grpcNoRetry := &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL, NoAgentWait: -1}
	dialAll := func() <-chan opened {
		results := make(chan opened, 3)
		go func() {
			conn, err := grpcNoRetry.DialCluster(ctx, "c1", 443)
			results <- opened{"gRPC frontend", conn, bufio.NewReader(conn), err}
		}()
		go func() {
			conn, br, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
			results <- opened{"HTTP-CONNECT frontend", conn, br, err}
		}()
		go func() {
			conn, err := f.srv.DialCluster(ctx, "c1", 443)
			results <- opened{"in-process tunnel (the user-server's)", conn, bufio.NewReader(conn), err}
		}()
		return results
	}
	waiting := dialAll()
	g.Consistently(waiting).WithTimeout(200*time.Millisecond).ShouldNot(Receive(), "the dials wait")
	clk.Step(wait - time.Second)
	second, err := f.agent(t, "c1", "ns1", "agent-2", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	for range 3 {
		var o opened
		g.Eventually(waiting).Should(Receive(&o))
		g.Expect(o.err).NotTo(HaveOccurred(), o.name)
		g.Expect(get(o.conn, o.br, "c1", "/after-the-reconnect")).To(Equal("c1-apiserver /after-the-reconnect"), o.name)
		_ = o.conn.Close()
	}

	// The agents stay away past the wait: the dials waiting fail then, and later ones at once. HTTP-CONNECT says it
	// with its status.
	noAgent := Or(ContainSubstring("No agent available"), ContainSubstring("503 Service Unavailable"))
	second.Close()
	g.Eventually(func() bool { return f.srv.Agents().Connected("c1") }).Should(BeFalse())
	waiting = dialAll()
	g.Consistently(waiting).WithTimeout(200 * time.Millisecond).ShouldNot(Receive())
	clk.Step(wait)
	for range 3 {
		var o opened
		g.Eventually(waiting).Should(Receive(&o))
		g.Expect(o.err).To(MatchError(noAgent), o.name)
	}
	g.Expect(f.srv.Agents().Reconnecting("c1")).To(BeFalse())
	for _, o := range []func() error{
		func() error { _, err := grpcNoRetry.DialCluster(ctx, "c1", 443); return err },
		func() error { _, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443"); return err },
		func() error { _, err := f.srv.DialCluster(ctx, "c1", 443); return err },
	} {
		g.Expect(o()).To(MatchError(noAgent))
	}
}

// A shutdown does not wait for an in-process dial (the user-server's) that waits for a reconnecting agent: the dial
// ends with the tunnels. The clock is fake and never moves, so only that can end the wait.
func TestAShutdownEndsAnInProcessDialWaitingForAReconnectingAgent(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	f := startFixture(t, false, nil, func(o *Options) { o.AgentReconnectWait, o.Clock = time.Minute, clk })
	first, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": httpTarget(t, "c1-apiserver")})
	g.Expect(err).NotTo(HaveOccurred())
	first.Close()
	g.Eventually(func() bool { return f.srv.Agents().Reconnecting("c1") }).Should(BeTrue())

	dialed := make(chan error, 1)
	go func() {
		_, err := f.srv.DialCluster(context.Background(), "c1", 443)
		dialed <- err
	}()
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the dial waits for the cluster's agents")
	g.Consistently(dialed).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())

	stopped := make(chan error, 1)
	go func() { stopped <- f.stop() }()
	g.Eventually(stopped).Should(Receive(BeNil()), "the shutdown ended the dial's wait")
	g.Expect(dialed).To(Receive(HaveOccurred()))
	g.Expect(f.srv.inProcess.count()).To(BeZero())
}

// A dial its agent leaves unanswered (the agent is cut off, its stream not yet dropped) goes, through either frontend,
// to an agent of the same cluster that connects a second or more after the dial was sent; a dial sent less than a
// second before such an agent connects keeps waiting for its own.
func TestADialAnAgentLeavesUnansweredGoesToAnAgentThatConnectsLater(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	f := startFixture(t, false, nil, func(o *Options) { o.Clock = clk })
	targets := map[string]string{"c1:443": httpTarget(t, "c1-apiserver")}
	cut, err := f.agent(t, "c1", "ns1", "agent-cut", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	cut.unresponsive.Store(true)
	moved := testutil.ToFloat64(movedDials)

	type opened struct {
		conn net.Conn
		err  error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dialAll := func(to *testAgent) map[string]chan opened {
		waiting := map[string]chan opened{}
		for name, dial := range map[string]func() (net.Conn, error){
			"gRPC frontend": func() (net.Conn, error) {
				return (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(ctx, "c1", 443)
			},
			"in-process tunnel": func() (net.Conn, error) { return f.srv.DialCluster(ctx, "c1", 443) },
		} {
			results := make(chan opened, 1)
			waiting[name] = results
			go func() {
				conn, err := dial()
				results <- opened{conn, err}
			}()
			g.Eventually(to.dropped).Should(Receive(), "the silent agent got the dial of the %s", name)
		}
		return waiting
	}

	waiting := dialAll(cut)
	clk.Step(pendingMoveAfter)
	back, err := f.agent(t, "c1", "ns1", "agent-back", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	for name, results := range waiting {
		var o opened
		g.Eventually(results).Should(Receive(&o), name)
		g.Expect(o.err).NotTo(HaveOccurred(), name)
		g.Expect(get(o.conn, bufio.NewReader(o.conn), "c1", "/moved")).To(Equal("c1-apiserver /moved"), name)
		_ = o.conn.Close()
	}
	g.Expect(testutil.ToFloat64(movedDials)).To(Equal(moved+2), "each dial moved once")

	// Dials sent to an agent just now are not moved by one that connects.
	back.unresponsive.Store(true)
	waiting = dialAll(back)
	clk.Step(pendingMoveAfter - time.Millisecond)
	_, err = f.agent(t, "c1", "ns1", "agent-next", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	for name, results := range waiting {
		g.Consistently(results).WithTimeout(200*time.Millisecond).ShouldNot(Receive(), name)
	}
	g.Expect(testutil.ToFloat64(movedDials)).To(Equal(moved + 2))
}
