package server

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

func TestAClientCertificateHoldsAtMostItsStreams(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, func(o *Options) { o.MaxStreamsPerClient = 2 })
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": httpTarget(t, "c1")})
	g.Expect(err).NotTo(HaveOccurred())
	before := testutil.ToFloat64(limitRefusals.WithLabelValues(limitStreamsPerClient))

	grpcConn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	connectConn, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).NotTo(HaveOccurred())

	_, _, err = httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).To(MatchError(ContainSubstring("429")), "a third stream of the same certificate, on either frontend")
	_, err = (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL, NoAgentWait: -1}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).To(HaveOccurred(), "the stream ends with ResourceExhausted, which konnectivity-client reports as a closed tunnel")
	g.Expect(testutil.ToFloat64(limitRefusals.WithLabelValues(limitStreamsPerClient)) - before).To(BeNumerically(">=", 2))

	otherCert, otherKey, _ := f.pki.issue(t, "other-client", leafSpec{cn: "another-hub-program", uris: []string{contract.ProxyClientRoleURI}})
	other, _, err := httpConnect(f.addrs.HTTPConnect, f.pki.clientTLS(t, otherCert, otherKey), "c1:443")
	g.Expect(err).NotTo(HaveOccurred(), "another certificate has streams of its own")
	_ = other.Close()

	_ = grpcConn.Close()
	g.Eventually(func() error {
		c, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
		if err == nil {
			_ = c.Close()
		}
		return err
	}).Should(Succeed(), "a closed stream is given back")
	_ = connectConn.Close()
}

func TestAnAgentStreamHoldsAtMostItsPendingDialsAndConnections(t *testing.T) {
	t.Run("pending dials", func(t *testing.T) {
		g := NewWithT(t)
		f := startFixture(t, false, nil, func(o *Options) { o.MaxPendingDialsPerAgent = 2 })
		a, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": httpTarget(t, "c1")})
		g.Expect(err).NotTo(HaveOccurred())
		a.unresponsive.Store(true) // it drops every dial, which stays pending
		before := testutil.ToFloat64(limitRefusals.WithLabelValues(limitPendingDialsPerAgent))
		for range 2 {
			go func() {
				if c, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443"); err == nil {
					_ = c.Close()
				}
			}()
			g.Eventually(a.dropped).Should(Receive())
		}
		_, _, err = httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
		g.Expect(err).To(MatchError(ContainSubstring("503")), "refused at once, as a cluster without an agent is")
		_, err = f.srv.DialCluster(context.Background(), "c1", 443)
		g.Expect(err).To(MatchError(errAgentBusy))
		g.Expect(testutil.ToFloat64(limitRefusals.WithLabelValues(limitPendingDialsPerAgent)) - before).To(BeEquivalentTo(2))
	})

	t.Run("connections", func(t *testing.T) {
		g := NewWithT(t)
		f := startFixture(t, false, nil, func(o *Options) { o.MaxConnectionsPerAgent = 2 })
		_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": httpTarget(t, "c1")})
		g.Expect(err).NotTo(HaveOccurred())
		before := testutil.ToFloat64(limitRefusals.WithLabelValues(limitConnectionsPerAgent))
		var open []func()
		for range 2 {
			c, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
			g.Expect(err).NotTo(HaveOccurred())
			open = append(open, func() { _ = c.Close() })
		}
		_, err = f.srv.DialCluster(context.Background(), "c1", 443)
		g.Expect(err).To(MatchError(errAgentBusy), "the user-server's tunnels count too")
		g.Expect(testutil.ToFloat64(limitRefusals.WithLabelValues(limitConnectionsPerAgent)) - before).To(BeEquivalentTo(1))
		open[0]()
		g.Eventually(func() error {
			c, err := f.srv.DialCluster(context.Background(), "c1", 443)
			if err == nil {
				_ = c.Close()
			}
			return err
		}).Should(Succeed(), "a closed connection is given back")
		open[1]()
	})
}
