package server

import (
	"context"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
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
	g.Expect(other.send(&client.Packet{Type: client.PacketType_DIAL_RSP, Payload: &client.Packet_DialResponse{
		DialResponse: &client.DialResponse{Random: req.Random, ConnectID: spoofed},
	}})).To(Succeed())
	g.Eventually(other.closeReqs).Should(Receive(Equal(int64(spoofed))), "the answer's connection is closed at its agent")

	// Had the answer been taken, the dial would have succeeded; it still waits for the agent it went to.
	owner.Close()
	var r dialResult
	g.Eventually(dialed).Should(Receive(&r))
	g.Expect(r.err).To(MatchError(ContainSubstring(errAgentStreamEnded.Error())))
}
