package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	testingclock "k8s.io/utils/clock/testing"
)

// countedPeers counts how often the peers are asked.
func countedPeers(calls *atomic.Int32, ask PeerClusters) PeerClusters {
	return func(ctx context.Context) ([]string, error) {
		calls.Add(1)
		return ask(ctx)
	}
}

func TestReadinessWaitsUntilTheReplicaHoldsEveryClusterAReadyPeerHolds(t *testing.T) {
	g := NewWithT(t)
	peer := startFixture(t, false, nil, nil)
	for _, cluster := range []string{"c1", "c2"} {
		_, err := peer.agent(t, cluster, "ns-"+cluster, cluster+"-agent", "host="+cluster, nil)
		g.Expect(err).NotTo(HaveOccurred())
	}
	var calls atomic.Int32
	ask := PeerClustersAt(peer.addrs.HTTPConnect, func() (*tls.Config, error) { return peer.proxyTL.Clone(), nil })
	f := startFixture(t, false, nil, func(o *Options) {
		o.Peers = countedPeers(&calls, ask)
		o.PeerPollInterval = 20 * time.Millisecond
	})

	// Asked over mTLS, the peer names both clusters; this replica holds neither, then one.
	g.Expect(ask(context.Background())).To(Equal([]string{"c1", "c2"}))
	g.Eventually(calls.Load).Should(BeNumerically(">=", 2))
	g.Expect(f.srv.Ready()).To(BeFalse(), "no agent of c1 or c2 yet")
	_, err := f.agent(t, "c1", "ns-c1", "c1-agent", "host=c1", nil)
	g.Expect(err).NotTo(HaveOccurred())
	seen := calls.Load()
	g.Eventually(calls.Load).Should(BeNumerically(">=", seen+2))
	g.Expect(f.srv.Ready()).To(BeFalse(), "no agent of c2 yet")

	_, err = f.agent(t, "c2", "ns-c2", "c2-agent", "host=c2", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(f.srv.Ready).Should(BeTrue())
	seen = calls.Load()
	g.Consistently(calls.Load, 100*time.Millisecond, 20*time.Millisecond).Should(Equal(seen), "the wait ends once Ready")
}

func TestReadinessWaitsAtMostThePeerWaitWhenThePeerCannotBeMatchedOrAsked(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakeClock(time.Now())
	var calls atomic.Int32
	// The peer holds c1, which never connects here; every other answer is an error that is not "no peer".
	ask := func(context.Context) ([]string, error) {
		if calls.Load()%2 == 0 {
			return nil, errors.New("tls: bad certificate")
		}
		return []string{"c1"}, nil
	}
	f := startFixture(t, false, nil, func(o *Options) {
		o.Peers = countedPeers(&calls, ask)
		o.Clock = clk
		o.PeerWait = 30 * time.Second
		o.PeerPollInterval = time.Second
	})

	for range 29 {
		g.Eventually(clk.HasWaiters).Should(BeTrue())
		clk.Step(time.Second)
	}
	g.Eventually(calls.Load).Should(BeNumerically("==", 30))
	g.Expect(f.srv.Ready()).To(BeFalse(), "29 s after start, still within the peer wait")

	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(time.Second)
	g.Eventually(f.srv.Ready).Should(BeTrue(), "30 s after start")
	g.Expect(calls.Load()).To(BeNumerically("==", 31))
}

func TestReadinessDoesNotWaitWhenNoPeerIsReady(t *testing.T) {
	g := NewWithT(t)
	// The client Service of replicas none of which is Ready refuses the connection.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	g.Expect(l.Close()).To(Succeed())
	ask := PeerClustersAt(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), func() (*tls.Config, error) { return &tls.Config{}, nil })
	_, err = ask(context.Background())
	g.Expect(err).To(MatchError(ErrNoPeer))

	// The default peer wait is 30 s and the clock is real: Ready within a second means it did not wait.
	f := startFixture(t, false, nil, func(o *Options) { o.Peers = ask })
	g.Eventually(f.srv.Ready).Should(BeTrue())
}
