package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// A host that lost its last agent stream is waited for until one of its agents connects again, for reconnectWait
// after the loss; a host never seen, or gone longer, is not.
func TestAwaitWaitsForTheAgentsOfAHostThatJustLostThem(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	m := newNewestBackends(clk, 10*time.Second)
	ctx := context.Background()
	awaited := func(host string) <-chan *backend {
		got := make(chan *backend, 1)
		go func() { got <- m.await(ctx, host) }()
		return got
	}

	g.Expect(m.await(ctx, "never-seen")).To(BeNil(), "a host no agent served fails at once")
	first := &backend{hosts: []string{"c1", "c1.ns"}}
	m.add(first)
	g.Expect(m.await(ctx, "c1")).To(BeIdenticalTo(first))

	m.remove(first)
	g.Expect(m.reconnecting("c1")).To(BeTrue())
	g.Expect(m.reconnecting("c1.ns")).To(BeTrue())
	waiting := awaited("c1")
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	other := &backend{hosts: []string{"c2"}}
	m.add(other)
	g.Consistently(waiting).WithTimeout(50*time.Millisecond).ShouldNot(Receive(), "another host's agent is not the one awaited")
	clk.Step(9 * time.Second)
	g.Consistently(waiting).WithTimeout(50 * time.Millisecond).ShouldNot(Receive())
	back := &backend{hosts: []string{"c1", "c1.ns"}}
	m.add(back)
	g.Eventually(waiting).Should(Receive(BeIdenticalTo(back)), "the agent that reconnects takes the dial")
	g.Expect(m.reconnecting("c1")).To(BeFalse())

	m.remove(back)
	waiting = awaited("c1")
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(10 * time.Second)
	g.Eventually(waiting).Should(Receive(BeNil()), "after the wait, the dial fails")
	g.Expect(m.reconnecting("c1")).To(BeFalse())
	g.Expect(m.await(ctx, "c1")).To(BeNil(), "a host gone longer fails at once")

	m.add(back)
	m.remove(back)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	g.Expect(m.await(cancelled, "c1")).To(BeNil(), "the dial's client gave up")
}

// With no wait, a host that lost its agents fails at once, as ANP's server does.
func TestAwaitDoesNotWaitWhenReconnectWaitIsZero(t *testing.T) {
	g := NewWithT(t)
	m := newNewestBackends(clocktesting.NewFakeClock(time.Now()), 0)
	b := &backend{hosts: []string{"c1"}}
	m.add(b)
	m.remove(b)
	g.Expect(m.reconnecting("c1")).To(BeFalse())
	g.Expect(m.await(context.Background(), "c1")).To(BeNil())
}

// recordedStream is an agent stream whose sends are recorded, or fail with broken while it is set; onBroken runs after
// a failed send, as the stream's own end follows it.
type recordedStream struct {
	agent.AgentService_ConnectServer
	mu       sync.Mutex
	sent     []*client.Packet
	broken   error
	onBroken func()
}

func (s *recordedStream) Send(pkt *client.Packet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		go s.onBroken()
		return s.broken
	}
	s.sent = append(s.sent, pkt)
	return nil
}

func (s *recordedStream) packets() []*client.Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// A frontend stream that sends one packet, then waits to be closed; what it is sent is recorded.
type oneDialFrontend struct {
	dial   *client.Packet
	recvd  atomic.Bool
	closed chan struct{}
	mu     sync.Mutex
	got    []*client.Packet
}

func (f *oneDialFrontend) Recv() (*client.Packet, error) {
	if !f.recvd.Swap(true) {
		return f.dial, nil
	}
	<-f.closed
	return nil, io.EOF
}

func (f *oneDialFrontend) Send(pkt *client.Packet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, pkt)
	return nil
}

func (f *oneDialFrontend) answers() []*client.Packet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// An agent stream can break under a dial before it has ended here (its forward proxy died). The dial waits until the
// broken stream is gone and goes to the agent that connects next, instead of failing.
func TestADialWhoseAgentStreamBreaksUnderItGoesToTheNextAgent(t *testing.T) {
	g := NewWithT(t)
	r := newRouter("s", 1, NewAgents(), newNewestBackends(clocktesting.NewFakeClock(time.Now()), time.Minute), logr.Discard())
	next := &recordedStream{}
	broken := &recordedStream{broken: errors.New("rpc error: code = Unavailable desc = transport is closing")}
	dying := &backend{stream: broken, agentID: "c1/dying", hosts: []string{"c1"}, gone: make(chan struct{})}
	broken.onBroken = func() {
		r.backendGone(dying) // the stream's own end, which follows its failed send
		r.backends.add(&backend{stream: next, agentID: "c1/next", hosts: []string{"c1"}, gone: make(chan struct{})})
	}
	r.backends.add(dying)

	front := &oneDialFrontend{dial: packet.DialRequest("c1:443", 7), closed: make(chan struct{})}
	served := make(chan error, 1)
	go func() {
		served <- r.serveFrontend(front, false, r.awaiting(context.Background()))
	}()
	g.Eventually(next.packets).Should(HaveLen(1), "the dial went to the agent that connected next")
	g.Expect(next.packets()[0].GetDialRequest().GetRandom()).To(BeEquivalentTo(7))
	g.Expect(front.answers()).To(BeEmpty(), "the client was not told the dial failed")
	close(front.closed)
	g.Eventually(served).Should(Receive(BeNil()))
}
