package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func leaseWrites(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "leases" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

// roundClock is a fake clock whose tickers tell the test each time the loop waits for the next tick: the test then
// knows that a round is over, and moves the clock only between rounds.
type roundClock struct {
	*clocktesting.FakeClock
	waiting chan struct{}
	done    <-chan struct{}
}

func (c *roundClock) NewTicker(d time.Duration) clock.Ticker {
	return roundTicker{Ticker: c.FakeClock.NewTicker(d), clock: c}
}

type roundTicker struct {
	clock.Ticker
	clock *roundClock
}

func (t roundTicker) C() <-chan time.Time {
	select {
	case t.clock.waiting <- struct{}{}:
	case <-t.clock.done:
	}
	return t.Ticker.C()
}

func TestLeaseIsRenewedOnlyWhileATunnelIsUp(t *testing.T) {
	g := NewWithT(t)
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := &roundClock{FakeClock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		waiting: make(chan struct{}), done: ctx.Done()}
	var connected atomic.Bool
	r := &LeaseRenewer{
		Client: client, Namespace: "open-cluster-management-cluster-proxy", Name: "cluster-proxy", Holder: "agent-1",
		Connected: connected.Load, Interval: 10 * time.Second, Check: time.Second, Clock: clk,
	}
	go r.Run(ctx)
	roundOver := func() { g.Eventually(clk.waiting).WithTimeout(10 * time.Second).Should(Receive()) }
	// round moves the clock by Check and returns the round's time once the loop is done with it.
	round := func() time.Time {
		clk.Step(r.Check)
		roundOver()
		return clk.Now()
	}
	renewTime := func() time.Time {
		l, err := client.CoordinationV1().Leases(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return l.Spec.RenewTime.Time
	}

	roundOver()
	round()
	g.Expect(leaseWrites(client)).To(BeZero(), "no tunnel, no lease")

	connected.Store(true)
	up := round()
	g.Expect(leaseWrites(client)).To(Equal(1), "a tunnel coming up renews at once")
	lease, err := client.CoordinationV1().Leases(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lease.Spec.HolderIdentity).To(Equal(ptr.To("agent-1")))
	g.Expect(lease.Spec.LeaseDurationSeconds).To(Equal(ptr.To[int32](60)))
	g.Expect(renewTime()).To(BeTemporally("==", up))
	for clk.Since(up) < r.Interval-r.Check {
		round()
	}
	g.Expect(leaseWrites(client)).To(Equal(1), "not renewed again before Interval")
	renewed := round()
	g.Expect(clk.Since(up)).To(Equal(r.Interval))
	g.Expect(leaseWrites(client)).To(Equal(2), "renewed once Interval has passed")
	g.Expect(renewTime()).To(BeTemporally("==", renewed))

	// A tunnel that goes down and comes back within Interval is renewed at once, not at the next Interval.
	connected.Store(false)
	round()
	connected.Store(true)
	back := round()
	g.Expect(leaseWrites(client)).To(Equal(3))
	g.Expect(renewTime()).To(BeTemporally("==", back))

	// Disconnected: no renewals, however long it lasts.
	connected.Store(false)
	round()
	clk.Step(3 * r.Interval)
	roundOver()
	round()
	g.Expect(leaseWrites(client)).To(Equal(3), "no tunnel, no renewals")

	// Reconnected: renewed at once.
	connected.Store(true)
	again := round()
	g.Expect(leaseWrites(client)).To(Equal(4))
	g.Expect(renewTime()).To(BeTemporally("==", again))
}

func TestRenewTakesOverALeaseHeldByAnotherAgent(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := metav1.NewMicroTime(now.Add(-time.Hour))
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: "ns"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-0"), RenewTime: &old, LeaseDurationSeconds: ptr.To[int32](10)},
	})
	r := &LeaseRenewer{Client: client, Namespace: "ns", Name: "cluster-proxy", Holder: "agent-1", Clock: clocktesting.NewFakeClock(now)}
	g.Expect(r.Renew(context.Background())).To(Succeed())
	l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "cluster-proxy", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*l.Spec.HolderIdentity).To(Equal("agent-1"))
	g.Expect(*l.Spec.LeaseDurationSeconds).To(Equal(int32(60)))
	g.Expect(l.Spec.RenewTime.Time).To(BeTemporally("==", now))
	g.Expect(l.Spec.AcquireTime.Time).To(BeTemporally("==", now), "acquired by the new holder")
}
