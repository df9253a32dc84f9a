//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
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
		agent := world.proxiedAgent("agent-via-tinyproxy", "http://"+proxy.address, world.bundlePath)
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

	It("connects through squid over TLS to the proxy, trusting the proxy's own CA from the bundle", func() {
		proxyCA := must(certs.NewCA("corporate-proxy-ca", time.Hour, time.Now()))
		proxy := startSquidTLS(world.ports.agent, proxyCA)
		defer proxy.stop(true)
		bundle := writeFile("pki/bundle-with-proxy-ca.crt", append(must(os.ReadFile(world.bundlePath)), proxyCA.CertPEM...))

		agent := world.proxiedAgent("agent-via-squid", "https://"+proxy.address, bundle)
		agent.start()
		defer agent.stop(true)
		expectServedBy("agent-via-squid")

		By("the tunnel runs through squid: stopping squid drops it (gracefully, so squid logs the tunnel it closes)")
		proxy.stop(false)
		Eventually(func(g Gomega) { g.Expect(world.connectedAgents(g)).To(BeEmpty()) }).Should(Succeed())
		Expect(proxy.logContains("CONNECT "+addr(world.ports.agent))).To(BeTrue(), "squid logged the CONNECT:\n%s", proxy.tail())
	})

	It("does not connect through an HTTPS proxy whose CA it does not trust", func() {
		proxyCA := must(certs.NewCA("untrusted-proxy-ca", time.Hour, time.Now()))
		proxy := startSquidTLS(world.ports.agent, proxyCA)
		defer proxy.stop(true)
		agent := world.proxiedAgent("agent-untrusted-proxy", "https://"+proxy.address, world.bundlePath)
		agent.start()
		defer agent.stop(true)
		Consistently(func(g Gomega) { g.Expect(world.connectedAgents(g)).To(BeEmpty()) }, "3s", "200ms").Should(Succeed())
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
func (w *harness) proxiedAgent(id, proxyURL, caBundle string) *process {
	args := replaceFlag(w.agentArgs, "--agent-id", id)
	args = replaceFlag(args, "--health-server-port", fmt.Sprint(freePort()))
	args = replaceFlag(args, "--ca-cert", caBundle)
	p := newProcess(id, w.agent.bin, args...)
	p.env = []string{"HTTPS_PROXY=" + proxyURL, "https_proxy=" + proxyURL, "NO_PROXY=", "no_proxy="}
	return p
}

// forwardProxy is a squid or tinyproxy process with the address it listens on.
type forwardProxy struct {
	*process
	address   string
	accessLog string // where CONNECT lines go, when not the process log
}

func (p *forwardProxy) logContains(s string) bool {
	if p.accessLog == "" {
		return p.process.logContains(s)
	}
	raw, err := os.ReadFile(p.accessLog)
	return err == nil && strings.Contains(string(raw), s)
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

// startSquidTLS runs squid with an https_port (TLS to the proxy itself) serving a certificate of ca, allowing
// CONNECT to connectPort only.
func startSquidTLS(connectPort int, ca *certs.KeyPair) *forwardProxy {
	dir := must(os.MkdirTemp(workDir, "squid-"))
	// squid drops root privileges to its own user, which must read its configuration and write its logs.
	Expect(os.Chmod(workDir, 0o755)).To(Succeed())
	Expect(os.Chmod(dir, 0o777)).To(Succeed())
	leaf := must(certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "proxy", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, time.Now()))
	Expect(os.WriteFile(filepath.Join(dir, "proxy.crt"), leaf.CertPEM, 0o644)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "proxy.key"), leaf.KeyPEM, 0o644)).To(Succeed()) //nolint:gosec // a throw-away test key squid's user must read
	port := freePort()
	conf := strings.Join([]string{
		fmt.Sprintf("https_port 127.0.0.1:%d tls-cert=%s/proxy.crt tls-key=%s/proxy.key", port, dir, dir),
		fmt.Sprintf("acl agent_port port %d", connectPort),
		"acl CONNECT method CONNECT",
		"http_access allow CONNECT agent_port",
		"http_access deny all",
		"cache deny all",
		"pid_filename " + dir + "/squid.pid",
		"cache_log stdio:" + dir + "/cache.log",
		"access_log stdio:" + dir + "/access.log",
		"logfile_rotate 0",
		"coredump_dir " + dir,
		"shutdown_lifetime 0 seconds",
		"",
	}, "\n")
	confPath := filepath.Join(dir, "squid.conf")
	Expect(os.WriteFile(confPath, []byte(conf), 0o644)).To(Succeed())
	p := &forwardProxy{process: newProcess(filepath.Base(dir), "squid", "-N", "-f", confPath), address: addr(port),
		accessLog: filepath.Join(dir, "access.log")} // squid writes a CONNECT line when the tunnel ends
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
