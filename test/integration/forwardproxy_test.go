//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/squid"
)

// The agent reaches the proxy-server only through a real forward proxy. The direct agent is stopped first, so the
// only way the cluster can be reached is the proxied agent; stopping the proxy must take the tunnel down with it.
var _ = Describe("Through a forward proxy", Ordered, func() {
	BeforeAll(func() {
		world.agent.stop(false)
		Eventually(func(g Gomega) { g.Expect(world.connectedAgents(g)).To(BeEmpty()) }).Should(Succeed())
		DeferCleanup(func() {
			world.agent.start()
			world.waitConnected()
		})
	})

	It("connects through tinyproxy (plain HTTP CONNECT), and recovers by itself when the proxy restarts", func() {
		proxy := startTinyproxy(world.ports.agent)
		defer proxy.stop(true)
		agent := world.proxiedAgent("agent-via-tinyproxy", "http://"+proxy.address, "", "")
		agent.start()
		defer agent.stop(true)

		expectServedBy("agent-via-tinyproxy")
		Expect(proxy.logContains(fmt.Sprintf("CONNECT %s", addr(world.ports.agent)))).To(BeTrue(),
			"tinyproxy logged the agent's CONNECT to the agent port:\n%s", proxy.tail())

		By("the proxy going down takes the tunnel with it: the agent had no other route")
		proxy.stop(true)
		Eventually(func(g Gomega) { g.Expect(world.connectedAgents(g)).To(BeEmpty()) }).Should(Succeed())

		By("the proxy coming back brings the tunnel back without touching the agent")
		proxy.start()
		expectServedBy("agent-via-tinyproxy")
	})

	It("connects through squid over TLS to the proxy, trusting the proxy's own CA for that hop", func() {
		sq := must(squid.Start(filepath.Join(workDir, "squid-trusted"), squid.Options{}))
		DeferCleanup(sq.Stop)
		proxyCA := writeFile("pki/squid-trusted-ca.crt", sq.CA())

		agent := world.proxiedAgent("agent-via-squid", sq.TLSURL(), "", proxyCA)
		agent.start()
		defer agent.stop(true)
		expectServedBy("agent-via-squid")

		By("the tunnel runs through squid: stopping squid drops it (gracefully, so squid logs the tunnel it closes)")
		Expect(sq.Stop()).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(world.connectedAgents(g)).To(BeEmpty()) }).Should(Succeed())
		Expect(sq.Tunnels()).To(ContainElement(squid.Tunnel{Target: addr(world.ports.agent), TLS: true}),
			"squid's TLS port carried the agent's CONNECT to the agent port")
	})

	It("does not connect through an HTTPS proxy whose CA it trusts only as the hub's", func() {
		sq := must(squid.Start(filepath.Join(workDir, "squid-untrusted"), squid.Options{}))
		DeferCleanup(sq.Stop)
		proxyAddress := strings.TrimPrefix(sq.TLSURL(), "https://")
		waitListening(proxyAddress)
		// The proxy's CA in the hub's bundle, as the agent's one bundle held it before the two were kept apart: it
		// verifies the proxy-server and the impersonator there, and the proxy hop not at all.
		merged := writeFile("pki/bundle-with-proxy-ca.crt", append(must(os.ReadFile(world.bundlePath)), sq.CA()...))
		agent := world.proxiedAgent("agent-untrusted-proxy", sq.TLSURL(), merged, "")
		agent.start()
		defer agent.stop(true)

		Eventually(func() bool {
			return agent.logContains("TLS to the forward proxy") && agent.logContains("unknown authority")
		}).
			Should(BeTrue(), "the agent refuses the proxy's certificate:\n%s", agent.tail())
		Consistently(func(g Gomega) {
			g.Expect(agent.running()).To(BeTrue(), "the agent keeps running and retrying:\n%s", agent.tail())
			g.Expect(world.connectedAgents(g)).To(BeEmpty())
		}, "3s", "200ms").Should(Succeed())

		By("the proxy itself works for a client that trusts its CA: only the trust was missing")
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(sq.CA())).To(BeTrue())
		conn, err := tls.Dial("tcp", proxyAddress, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.Close()).To(Succeed())
	})
})

// expectServedBy waits until agentID is the cluster's only agent and a request through the tunnel succeeds.
func expectServedBy(agentID string) {
	EventuallyWithOffset(1, func(g Gomega) {
		g.Expect(world.connectedAgents(g)).To(ConsistOf(agentID))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, body, err := world.grpcGet(ctx, "/healthz")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(body).To(Equal("ok"))
	}).Should(Succeed())
}

// proxiedAgent is the agent's rendered command line with HTTPS_PROXY set, as an AddOnDeploymentConfig proxyConfig
// renders it, and caBundle as its CA bundle.
// hubCA, when set, replaces the hub's CA bundle (--ca-cert); proxyCA, when set, is the proxy's (--proxy-ca-cert).
func (w *harness) proxiedAgent(id, proxyURL, hubCA, proxyCA string) *process {
	args := replaceFlag(w.agentArgs, "--agent-id", id)
	args = replaceFlag(args, "--health-server-port", fmt.Sprint(freePort()))
	if hubCA != "" {
		args = replaceFlag(args, "--ca-cert", hubCA)
	}
	if proxyCA != "" {
		args = append(args, "--proxy-ca-cert="+proxyCA)
	}
	p := newProcess(id, w.agent.bin, args...)
	p.env = []string{"HTTPS_PROXY=" + proxyURL, "https_proxy=" + proxyURL, "NO_PROXY=", "no_proxy="}
	return p
}

// forwardProxy is a tinyproxy process with the address it listens on.
type forwardProxy struct {
	*process
	address string
}

func startTinyproxy(connectPort int) *forwardProxy {
	dir := filepath.Join(workDir, "tinyproxy")
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	port := freePort()
	conf := fmt.Sprintf(`Port %d
Listen 127.0.0.1
Timeout 600
LogLevel Connect
MaxClients 100
Allow 127.0.0.1
ConnectPort %d
`, port, connectPort)
	confPath := filepath.Join(dir, "tinyproxy.conf")
	Expect(os.WriteFile(confPath, []byte(conf), 0o644)).To(Succeed())
	p := &forwardProxy{process: newProcess("tinyproxy", "tinyproxy", "-d", "-c", confPath), address: addr(port)}
	p.start()
	waitListening(p.address)
	return p
}

func waitListening(address string) {
	EventuallyWithOffset(1, func() error {
		c, err := net.DialTimeout("tcp", address, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}).Should(Succeed())
}
