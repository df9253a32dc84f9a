//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

var _ = Describe("Certificate rotation under load", Ordered, func() {
	It("rotates the CA and every server, agent and client certificate with zero failed requests and no new tunnel, and the agent's next tunnel uses its new certificate", func() {
		tunnels := `cluster_proxy_agent_server_connects_total{result="success"}`
		tunnelsBefore := metric(world.agentMetrics(), tunnels)
		Expect(tunnelsBefore).To(BeNumerically(">=", 1))

		load := startLoad()
		defer load.stop()
		Eventually(load.succeeded).Should(BeNumerically(">", 10), "the load runs before anything rotates")

		oldCA, newCA := world.ca, must(certs.NewCA("cluster-proxy-test-ca-2", 24*time.Hour, time.Now()))

		By("publishing the new CA beside the old one")
		writeFile("pki/ca.crt", append(append([]byte{}, oldCA.CertPEM...), newCA.CertPEM...))
		newClient := must(certs.IssueLeaf(newCA, certs.LeafSpec{CommonName: "probe", Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, time.Now()))
		for _, port := range []int{world.ports.frontend, world.ports.agent, world.ports.connect} {
			Eventually(func() error { return handshake(port, newClient, oldCA) }).Should(Succeed(),
				"port %d accepts clients of the new CA once it reloaded the bundle", port)
		}
		Eventually(func() bool { return world.agent.logContains("Reloaded certificates") }).Should(BeTrue(), "the agent reloaded the bundle")

		By("re-issuing the server certificates under the new CA")
		loopback := certs.LeafSpec{DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Duration: 12 * time.Hour,
			Usages: []certs.Usage{certs.UsageServerAuth}}
		for _, name := range []string{"proxy-server", "agent-server", "user-server"} {
			spec := loopback
			spec.CommonName = name
			world.writePair(name, must(certs.IssueLeaf(newCA, spec, time.Now())))
		}
		for _, port := range []int{world.ports.frontend, world.ports.agent, world.ports.connect, world.ports.user} {
			Eventually(func() (*x509.Certificate, error) { return servedCertificate(port) }).Should(
				HaveField("Issuer.CommonName", "cluster-proxy-test-ca-2"), "port %d serves the new certificate", port)
		}

		By("re-issuing the agent's and the hub client's certificates under the new CA")
		world.writeAgentCertificate("agent", clusterName, render.DefaultAgentNamespace, newCA)
		world.writePair("proxy-client", must(certs.IssueLeaf(newCA, certs.LeafSpec{CommonName: "proxy-client", URIs: proxyClientRole,
			Usages: []certs.Usage{certs.UsageClientAuth}, Duration: 12 * time.Hour}, time.Now())))
		world.writePair("impersonator", must(certs.IssueLeaf(newCA, certs.LeafSpec{CommonName: contract.ImpersonatorCommonName, URIs: impersonatorRole,
			Usages: []certs.Usage{certs.UsageClientAuth}, Duration: 12 * time.Hour}, time.Now())))
		world.ca = newCA

		By("retiring the old CA")
		writeFile("pki/ca.crt", newCA.CertPEM)
		oldClient := must(certs.IssueLeaf(oldCA, certs.LeafSpec{CommonName: "old", Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, time.Now()))
		for _, port := range []int{world.ports.frontend, world.ports.agent, world.ports.connect} {
			Eventually(func() error { return handshake(port, oldClient, newCA) }).ShouldNot(Succeed(),
				"port %d no longer accepts clients of the old CA", port)
		}
		Eventually(load.succeeded).Should(BeNumerically(">", load.succeeded()+20), "requests keep flowing after the rotation")

		load.stop()
		Expect(load.failures()).To(BeEmpty(), "no request failed during the rotation")
		Expect(metric(world.agentMetrics(), tunnels)).To(Equal(tunnelsBefore), "the agent's tunnel was never re-established")
		Expect(world.connectedAgents(Default)).To(ConsistOf("agent-1"))

		By("forcing a new tunnel: the restarted proxy-server trusts only the new CA, so the agent is back only if it reloaded its certificate")
		world.server.stop(false)
		world.server.start()
		world.waitConnected()
		Expect(metric(world.agentMetrics(), tunnels)).To(BeNumerically(">", tunnelsBefore), "the agent opened a new tunnel")
		Eventually(func(g Gomega) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, body, err := world.grpcGet(ctx, "/healthz")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(Equal("ok"))
		}).Should(Succeed(), "requests flow through the new tunnel")
	})
})

// load makes requests in a loop until stopped: through the user-server with a keep-alive connection, and through a
// new gRPC tunnel (new TLS handshakes) each time.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ok     atomic.Int64
	mu     sync.Mutex
	errs   []string
	once   sync.Once
}

func startLoad() *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	run := func(name string, f func() error) {
		l.wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer l.wg.Done()
			for ctx.Err() == nil {
				if err := f(); err != nil {
					l.mu.Lock()
					l.errs = append(l.errs, fmt.Sprintf("%s: %v", name, err))
					l.mu.Unlock()
				} else {
					l.ok.Add(1)
				}
				time.Sleep(20 * time.Millisecond) // pace the load; this is not a wait for a condition
			}
		}()
	}
	for name, token := range map[string]string{"user-server": world.managedToken, "user-server as a hub user": world.hubToken} {
		run(name, func() error {
			code, body, err := world.userServerDo(clusterName, "/api", token)
			if err != nil {
				return err
			}
			if code != 200 {
				return fmt.Errorf("status %d: %s", code, body)
			}
			return nil
		})
	}
	run("grpc", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, body, err := world.grpcGet(ctx, "/healthz")
		if err == nil && body != "ok" {
			err = fmt.Errorf("body %q", body)
		}
		return err
	})
	return l
}

func (l *load) succeeded() int64 { return l.ok.Load() }

func (l *load) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

func (l *load) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, l.errs...)
}

// handshake completes an mTLS handshake to a loopback port with client, trusting roots' CA for the server.
func handshake(port int, client *certs.KeyPair, roots *certs.KeyPair) error {
	pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(roots.Cert)
	bundle, _ := os.ReadFile(world.bundlePath)
	pool.AppendCertsFromPEM(bundle)
	conn, err := tls.Dial("tcp", addr(port), &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	// With TLS 1.3 the server's verdict on the client certificate arrives after the handshake: read until it
	// either closes the connection (refused) or stays quiet (accepted).
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// servedCertificate is the leaf a loopback TLS port serves (not verified: the caller inspects it).
func servedCertificate(port int) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr(port), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // only reads the served certificate
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}
