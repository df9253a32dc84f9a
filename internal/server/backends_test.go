package server

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
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
