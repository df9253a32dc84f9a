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

func TestLeaseIsRenewedOnlyWhileATunnelIsUp(t *testing.T) {
	g := NewWithT(t)
	client := fake.NewClientset()
	var connected atomic.Bool
	r := &LeaseRenewer{
		Client: client, Namespace: "open-cluster-management-cluster-proxy", Name: "cluster-proxy", Holder: "agent-1",
		Connected: connected.Load, Interval: 50 * time.Millisecond, Check: 5 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	renewTime := func() time.Time {
		l, err := client.CoordinationV1().Leases(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}

	g.Consistently(func() int { return leaseWrites(client) }).WithTimeout(200 * time.Millisecond).Should(BeZero())

	connected.Store(true)
	g.Eventually(renewTime).ShouldNot(BeZero())
	lease, err := client.CoordinationV1().Leases(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lease.Spec.HolderIdentity).To(Equal(ptr.To("agent-1")))
	g.Expect(lease.Spec.LeaseDurationSeconds).To(Equal(ptr.To[int32](60)))
	first := renewTime()
	g.Eventually(renewTime).Should(BeTemporally(">", first))

	// Disconnected: once the loop has seen it, no more writes.
	connected.Store(false)
	g.Eventually(func() bool {
		n := leaseWrites(client)
		time.Sleep(3 * r.Interval)
		return leaseWrites(client) == n
	}).Should(BeTrue())
	writes := leaseWrites(client)
	g.Consistently(func() int { return leaseWrites(client) }).WithTimeout(300 * time.Millisecond).Should(Equal(writes))

	// Reconnected: renewed at once.
	stale := renewTime()
	connected.Store(true)
	g.Eventually(renewTime).Should(BeTemporally(">", stale))
}

func TestRenewTakesOverALeaseHeldByAnotherAgent(t *testing.T) {
	g := NewWithT(t)
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: "ns"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-0"), RenewTime: &old, LeaseDurationSeconds: ptr.To[int32](10)},
	})
	r := &LeaseRenewer{Client: client, Namespace: "ns", Name: "cluster-proxy", Holder: "agent-1"}
	g.Expect(r.Renew(context.Background())).To(Succeed())
	l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "cluster-proxy", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*l.Spec.HolderIdentity).To(Equal("agent-1"))
	g.Expect(*l.Spec.LeaseDurationSeconds).To(Equal(int32(60)))
	g.Expect(l.Spec.RenewTime.Time).To(BeTemporally("~", time.Now(), 5*time.Second))
}
