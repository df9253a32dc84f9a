package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// healthPort stands in for an agent's tunnel health port: plain HTTP, /healthz answers "ok" while healthy, 500
// otherwise. It counts the requests it answered, and the connections that began with a TLS handshake record (none
// should: a TLS client would get no answer from it).
func healthPort(t *testing.T, healthy *atomic.Bool, requests, tlsHellos *atomic.Int32) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "[-]etcd failed")
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	ts.Listener = helloSniffer{Listener: ts.Listener, hellos: tlsHellos}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// helloSniffer counts the accepted connections whose first byte is a TLS handshake record's.
type helloSniffer struct {
	net.Listener
	hellos *atomic.Int32
}

func (l helloSniffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffedConn{Conn: c, hellos: l.hellos}, nil
}

type sniffedConn struct {
	net.Conn
	hellos *atomic.Int32
	seen   bool
}

func (c *sniffedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.seen {
		c.seen = true
		if b[0] == 0x16 { // TLS record type "handshake"
			c.hellos.Add(1)
		}
	}
	return n, err
}

func TestTunnelReportsProbeTheHealthPortAndAnswerOnlyWhatChanged(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, func(o *Options) {
		// Real latencies jitter: here no move counts, so what is reported depends on results and agents only.
		o.LatencyChanged = func(_, _ time.Duration) bool { return false }
	})
	var healthy1, healthy2 atomic.Bool
	healthy1.Store(true)
	healthy2.Store(true)
	var requests1, requests2, tlsHellos atomic.Int32
	port := strconv.Itoa(contract.TunnelHealthPort)
	_, err := f.agent(t, "c1", "ns-c1", "c1-agent", "host=c1", map[string]string{"c1:" + port: healthPort(t, &healthy1, &requests1, &tlsHellos)})
	g.Expect(err).NotTo(HaveOccurred())
	a2, err := f.agent(t, "c2", "ns-c2", "c2-agent", "host=c2", map[string]string{"c2:" + port: healthPort(t, &healthy2, &requests2, &tlsHellos)})
	g.Expect(err).NotTo(HaveOccurred())
	// An agent from before the health port: only its kube-apiserver, with TLS.
	_, err = f.agent(t, "old", "ns-old", "old-agent", "host=old", map[string]string{"old:443": httptestTLSHealthz(t, "ok")})
	g.Expect(err).NotTo(HaveOccurred())
	client := httpsClient(f.proxyTL)
	base := "https://" + f.addrs.HTTPConnect
	ask := func(cursor tunnelclient.TunnelsCursor) tunnelclient.TunnelsView {
		v, err := tunnelclient.Tunnels(context.Background(), client, base, cursor, 0)
		g.Expect(err).NotTo(HaveOccurred())
		return v
	}
	cursor := func(v tunnelclient.TunnelsView) tunnelclient.TunnelsCursor {
		return tunnelclient.TunnelsCursor{Instance: v.Instance, Generation: v.Generation}
	}

	first := ask(tunnelclient.TunnelsCursor{})
	g.Expect(first.Full).To(BeTrue())
	g.Expect(first.Clusters).To(HaveLen(3))
	for cluster, agentID := range map[string]string{"c1": "c1-agent", "c2": "c2-agent", "old": "old-agent"} {
		c := first.Clusters[cluster]
		g.Expect(c.Agents).To(Equal([]string{agentID}))
		g.Expect(c.Probe).NotTo(BeNil())
		g.Expect(c.Probe.Healthy).To(BeTrue(), c.Probe.Message)
		g.Expect(c.Probe.LatencyMicros).To(BeNumerically(">", 0))
	}
	g.Expect(tlsHellos.Load()).To(BeZero(), "the health port is probed in plain HTTP inside the tunnel")
	g.Expect(requests1.Load()).To(BeEquivalentTo(1), "one probe of c1 per ask")
	g.Expect(requests2.Load()).To(BeEquivalentTo(1))

	// Rounds that change nothing answer nothing, though each probes every cluster again.
	v := first
	for range 3 {
		next := ask(cursor(v))
		g.Expect(next.Full).To(BeFalse())
		g.Expect(next.Clusters).To(BeEmpty())
		g.Expect(next.Generation).To(Equal(v.Generation))
		v = next
	}
	g.Expect(requests1.Load()).To(BeEquivalentTo(4))
	g.Expect(requests2.Load()).To(BeEquivalentTo(4))

	// C1's kube-apiserver fails its health check: only c1 is answered, once.
	healthy1.Store(false)
	next := ask(cursor(v))
	g.Expect(next.Full).To(BeFalse())
	g.Expect(next.Clusters).To(HaveKey("c1"))
	g.Expect(next.Clusters).To(HaveLen(1))
	g.Expect(next.Clusters["c1"].Probe.Healthy).To(BeFalse())
	g.Expect(next.Clusters["c1"].Probe.Message).To(ContainSubstring("500"))
	v = next
	next = ask(cursor(v))
	g.Expect(next.Clusters).To(BeEmpty(), "failing again is no change")
	v = next

	// C2's agent goes: c2 is answered without agents, and a later full answer leaves it out.
	a2.Close()
	g.Eventually(func() bool { return f.srv.Agents().Connected("c2") }).Should(BeFalse())
	next = ask(cursor(v))
	g.Expect(next.Clusters).To(Equal(map[string]tunnelclient.ClusterTunnel{"c2": {}}))
	full := ask(tunnelclient.TunnelsCursor{Instance: "another-process", Generation: next.Generation})
	g.Expect(full.Full).To(BeTrue(), "an asker whose answers came from another process gets everything")
	g.Expect(full.Clusters).To(HaveLen(2))
	g.Expect(full.Clusters).To(HaveKey("c1"))
	g.Expect(full.Clusters).To(HaveKey("old"))
	ahead := ask(tunnelclient.TunnelsCursor{Instance: full.Instance, Generation: full.Generation + 1})
	g.Expect(ahead.Full).To(BeTrue(), "a generation this process never had gets everything")
}

func TestTunnelReportsRejectABadQueryNamingTheParameter(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	client := httpsClient(f.proxyTL)
	for query, param := range map[string]string{"timeout=soon": "timeout", "timeout=2h": "timeout", "since=-1": "since"} {
		resp, err := client.Get("https://" + f.addrs.HTTPConnect + "/tunnels?" + query)
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), query)
		g.Expect(string(body)).To(ContainSubstring("query parameter "+param), query)
	}
}

func TestTunnelReportsCarryTheStateOfTheRecordSinksInEveryAnswer(t *testing.T) {
	g := NewWithT(t)
	var down atomic.Bool
	f := startFixture(t, false, nil, func(o *Options) {
		o.RecordSinks = func() []tunnelclient.RecordSink {
			if down.Load() {
				return []tunnelclient.RecordSink{{Sink: tunnelclient.RecordSinkAuditWebhook, Message: "connection refused"}}
			}
			return []tunnelclient.RecordSink{{Sink: tunnelclient.RecordSinkAuditWebhook, Up: true}}
		}
	})
	client := httpsClient(f.proxyTL)
	base := "https://" + f.addrs.HTTPConnect
	first, err := tunnelclient.Tunnels(context.Background(), client, base, tunnelclient.TunnelsCursor{}, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Records).To(Equal([]tunnelclient.RecordSink{{Sink: "audit-webhook", Up: true}}))
	down.Store(true)
	next, err := tunnelclient.Tunnels(context.Background(), client, base,
		tunnelclient.TunnelsCursor{Instance: first.Instance, Generation: first.Generation}, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next.Full).To(BeFalse())
	g.Expect(next.Records).To(Equal([]tunnelclient.RecordSink{{Sink: "audit-webhook", Message: "connection refused"}}),
		"an answer of what changed carries the sinks' state too")
}
