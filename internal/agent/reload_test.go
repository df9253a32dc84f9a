package agent

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// balancer spreads connections over proxy-servers as route says for the n-th connection (from 1); "" drops it.
type balancer struct {
	ln       net.Listener
	route    func(n int32) string
	accepted atomic.Int32
}

func startBalancer(t *testing.T, route func(n int32) string) *balancer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	b := &balancer{ln: ln, route: route}
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
			backend := b.route(b.accepted.Add(1))
			if backend == "" {
				_ = c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				splice(c, backend)
			}()
		}
	}()
	return b
}

func splice(c net.Conn, backend string) {
	defer func() { _ = c.Close() }()
	up, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	<-done
}

func TestNewConnectionsUseTheRenewedCertificateWhileTunnelsStayUp(t *testing.T) {
	g := NewWithT(t)
	// Two proxy-servers behind one address; each says there are two, so the agent wants a tunnel to each.
	env := newEnvWithServers(t, 2)
	serverA := env.srv
	serverB := startServer(t, env.pki, "server-b", 2, "")
	// The first connection reaches server A; later ones reach B once the gate opens, like a load balancer whose
	// second backend was not ready.
	var open atomic.Bool
	lb := startBalancer(t, func(n int32) string {
		switch {
		case n == 1:
			return serverA.agentLis.Addr().String()
		case open.Load():
			return serverB.agentLis.Addr().String()
		}
		return ""
	})
	opts := env.options(t)
	opts.ServerAddress = env.behind(lb)
	a, _ := runAgent(t, opts)
	waitForTunnel(g, a, 1)
	oldSerial := env.serial
	g.Expect(serverA.agentSerials()).To(ConsistOf(oldSerial))

	// The certificate is renewed on disk; then the second proxy-server becomes reachable.
	newSerial := env.renewAgentCert(t)
	g.Expect(newSerial).NotTo(Equal(oldSerial))
	open.Store(true)
	waitForTunnel(g, a, 2)

	g.Expect(serverB.agentSerials()).To(ConsistOf(newSerial), "the new connection presents the renewed certificate")
	g.Expect(serverA.agentSerials()).To(ConsistOf(oldSerial), "the first tunnel was never re-established")
	g.Expect(serverA.activeStreams()).To(Equal(1))
	g.Expect(serverB.activeStreams()).To(Equal(1))
	// Both tunnels carry traffic.
	g.Expect(serverA.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
	g.Expect(serverB.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
}

// behind makes the agent's server address lead to lb.
func (e *testEnv) behind(lb *balancer) string {
	address := net.JoinHostPort(serverName, strconv.Itoa(lb.ln.Addr().(*net.TCPAddr).Port))
	e.resolve[address] = lb.ln.Addr().String()
	return address
}

// landingTwiceOnAHeldServer runs an agent whose connections reach server A, A, A, then B, both saying there are two
// servers: the second and third land on a server the agent already holds. refuseHeld makes both servers refuse a
// stream that names them as held, as the product's proxy-server does; raw ANP accepts it.
func landingTwiceOnAHeldServer(t *testing.T, refuseHeld bool) (a *Agent, serverA, serverB *testServer, lb *balancer) {
	t.Helper()
	env := newEnvWithServers(t, 2)
	serverA = env.srv
	serverB = startServer(t, env.pki, "server-b", 2, "")
	serverA.refuseHeld.Store(refuseHeld)
	serverB.refuseHeld.Store(refuseHeld)
	lb = startBalancer(t, func(n int32) string {
		if n <= 3 {
			return serverA.agentLis.Addr().String()
		}
		return serverB.agentLis.Addr().String()
	})
	opts := env.options(t)
	opts.ServerAddress = env.behind(lb)
	a, _ = runAgent(t, opts)
	waitForTunnel(NewWithT(t), a, 2)
	return a, serverA, serverB, lb
}

func TestHoldsOneTunnelPerProxyServerAndClosesDuplicates(t *testing.T) {
	g := NewWithT(t)
	a, serverA, serverB, lb := landingTwiceOnAHeldServer(t, false)

	g.Expect(counterValue(a.metrics.connects.WithLabelValues("duplicate"))).To(Equal(2.0))
	g.Expect(counterValue(a.metrics.connects.WithLabelValues("success"))).To(Equal(2.0))
	g.Eventually(serverA.activeStreams).Should(Equal(1))
	g.Expect(serverB.activeStreams()).To(Equal(1))
	// Holding as many tunnels as there are servers, the agent stops connecting.
	g.Consistently(lb.accepted.Load).WithTimeout(300 * time.Millisecond).Should(Equal(int32(4)))
	g.Expect(serverA.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
	g.Expect(serverB.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
}

// The agent names the servers it holds when it connects. A server of this product refuses a stream that names it,
// before it becomes a backend there that the cluster's dials could be routed to; the agent takes the refusal as a
// landing on a held server. Raw ANP servers accept such a stream, and the agent closes it (above).
func TestNamesTheServersItHoldsSoThatTheyRefuseItsDuplicates(t *testing.T) {
	g := NewWithT(t)
	a, serverA, serverB, _ := landingTwiceOnAHeldServer(t, true)

	g.Expect(serverA.heldNamed()).To(Equal([][]string{nil, {"server-a"}, {"server-a"}}))
	g.Expect(serverB.heldNamed()).To(Equal([][]string{{"server-a"}}))
	g.Expect(serverA.streamsHandled()).To(Equal(1), "the duplicates never reached ANP")
	g.Expect(counterValue(a.metrics.connects.WithLabelValues("duplicate"))).To(Equal(2.0))
	g.Expect(counterValue(a.metrics.connects.WithLabelValues("error"))).To(BeZero(), "a refused duplicate is no failure")
	g.Expect(counterValue(a.metrics.connects.WithLabelValues("success"))).To(Equal(2.0))
	g.Expect(serverA.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
	g.Expect(serverB.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
}

// A proxy-server that stops gracefully sends GOAWAY: the agent looks for another server at once, although it held as
// many as the servers say there are, and the going server's tunnel still serves dials until its stream ends.
func TestLooksForAnotherServerWhenItsServerGoesAwayAndKeepsServingThroughIt(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	going := env.srv
	next := startServer(t, env.pki, "server-b", 1, "")
	lb := startBalancer(t, func(n int32) string {
		if n == 1 {
			return going.agentLis.Addr().String()
		}
		return next.agentLis.Addr().String()
	})
	opts := env.options(t)
	opts.ServerAddress = env.behind(lb)
	a, _ := runAgent(t, opts)
	waitForTunnel(g, a, 1)
	g.Consistently(lb.accepted.Load).WithTimeout(200*time.Millisecond).Should(Equal(int32(1)), "one server of one held")

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		going.agentSrv.GracefulStop()
	}()
	g.Eventually(next.activeStreams).Should(Equal(1), "the agent reached the next server")
	g.Eventually(a.Tunnels).Should(Equal(2))
	g.Expect(going.activeStreams()).To(Equal(1), "the going server's stream is still up")
	g.Expect(going.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"), "and serves a new dial")
	g.Expect(next.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))

	going.agentSrv.Stop()
	<-stopped
	g.Eventually(a.Tunnels).Should(Equal(1))
}
