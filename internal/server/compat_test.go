package server

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	anpagent "sigs.k8s.io/apiserver-network-proxy/pkg/agent"
)

// The router speaks ANP's protocol: ANP's own agent, as its binary sets it up, serves every frontend through it.
// The agent's cluster is named localhost, because ANP's agent dials the address of the DIAL_REQ as it is.
func TestUpstreamANPAgentServesEveryFrontendThroughTheRouter(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := startTCPTarget(t, echo)
	_, portText, err := net.SplitHostPort(target.addr)
	g.Expect(err).NotTo(HaveOccurred())
	port, err := strconv.Atoi(portText)
	g.Expect(err).NotTo(HaveOccurred())

	stop := make(chan struct{})
	cs := (&anpagent.ClientSetConfig{
		Address:           f.addrs.Agent,
		AgentID:           "anp-agent",
		AgentIdentifiers:  "host=localhost",
		SyncInterval:      time.Second,
		ProbeInterval:     time.Second,
		SyncIntervalCap:   10 * time.Second,
		XfrChannelSize:    150,
		ServerCountSource: "default",
		DialOptions: []grpc.DialOption{
			grpc.WithTransportCredentials(credentials.NewTLS(f.agentTL("localhost", ""))),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Hour, PermitWithoutStream: true}),
		},
	}).NewAgentClientSet(make(chan struct{}), stop)
	cs.SetServerCounter(anpagent.NewResponseBasedCounter(cs))
	cs.Serve()
	t.Cleanup(func() { close(stop) })
	g.Eventually(func() bool { return f.srv.Agents().Connected("localhost") }).Should(BeTrue())

	address := net.JoinHostPort("localhost", portText)
	grpcConn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "localhost", port)
	g.Expect(err).NotTo(HaveOccurred())
	inProcessConn, err := f.srv.DialCluster(context.Background(), "localhost", port)
	g.Expect(err).NotTo(HaveOccurred())
	connectConn, connectReader, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, address)
	g.Expect(err).NotTo(HaveOccurred())

	for name, conn := range map[string]net.Conn{"gRPC": grpcConn, "in-process": inProcessConn, "HTTP-CONNECT": readerConn{connectConn, connectReader}} {
		data := randomData(t, 256<<10)
		got, err := exchange(conn, data)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(got).To(Equal(data), name)
		g.Expect(conn.Close()).To(Succeed(), name)
	}
	g.Eventually(target.closedConns).Should(Equal(3), "each close reached the agent, which closed its connection")
}

// readerConn reads through the reader that took the CONNECT answer, which may hold the first bytes after it.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }
