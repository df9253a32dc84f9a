package tunnelhealth_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/tunneltest"
)

func TestSignificant(t *testing.T) {
	ms := time.Millisecond
	healthy := func(l time.Duration) *tunnelhealth.Probe { return &tunnelhealth.Probe{Healthy: true, Latency: l} }
	failed := func(msg string) *tunnelhealth.Probe { return &tunnelhealth.Probe{Message: msg} }
	for _, tc := range []struct {
		name       string
		prev, next tunnelhealth.State
		want       bool
	}{
		{"the same healthy tunnel, later", tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(3 * ms)},
			tunnelhealth.State{Time: time.Now(), ConnectedAgents: 1, Probe: healthy(4 * ms)}, false},
		{"latency doubled", tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(10 * ms)},
			tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(40 * ms)}, true},
		{"an agent more", tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(3 * ms)},
			tunnelhealth.State{ConnectedAgents: 2, Probe: healthy(3 * ms)}, true},
		{"the agent left", tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(3 * ms)}, tunnelhealth.State{}, true},
		{"the tunnel stopped answering", tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(3 * ms)},
			tunnelhealth.State{ConnectedAgents: 1, Probe: failed("timeout")}, true},
		{"still failing, another way", tunnelhealth.State{ConnectedAgents: 1, Probe: failed("timeout")},
			tunnelhealth.State{ConnectedAgents: 1, Probe: failed("500")}, false},
		{"answering again", tunnelhealth.State{ConnectedAgents: 1, Probe: failed("timeout")},
			tunnelhealth.State{ConnectedAgents: 1, Probe: healthy(3 * ms)}, true},
		{"the proxy-servers stopped answering", tunnelhealth.State{}, tunnelhealth.State{Unreachable: true}, true},
		{"still no agent", tunnelhealth.State{}, tunnelhealth.State{Time: time.Now()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tunnelhealth.Significant(tc.prev, tc.next)).To(Equal(tc.want))
		})
	}
}

// drain returns the change events already sent.
func drain(src *tunnelhealth.Source) []string {
	var out []string
	for {
		select {
		case e := <-src.Changes():
			out = append(out, e.Object)
		default:
			return out
		}
	}
}

func TestReportsConnectedHealthyClustersWithLatencyAndOnlyWhatChanged(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	// Real latencies jitter: whether a move counts is decided here, not by the clock, on the replica and the source.
	var latencyMoves atomic.Bool
	moves := func(time.Duration, time.Duration) bool { return latencyMoves.Load() }
	hub := tunneltest.Start(t, "proxy-ns", func(o *server.Options) { o.LatencyChanged = moves })
	var c1Healthy atomic.Bool
	c1Healthy.Store(true)
	api1, _ := tunneltest.KubeAPIServer(t, "v1", c1Healthy.Load)
	api2, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	hub.StartAgent(t, "c1", api1)
	c2 := hub.StartAgent(t, "c2", api2)
	reader := hub.Reader()
	src := tunnelhealth.New(tunnelhealth.Options{Reader: reader, Resolve: hub.Resolve, ProbeTimeout: 3 * time.Second, StaleAfter: time.Hour,
		LatencyChanged: moves})

	_, ok := src.Tunnel("c1")
	g.Expect(ok).To(BeFalse(), "nothing is reported before the first round")

	src.Round(ctx)
	g.Expect(drain(src)).To(Equal([]string{tunnelhealth.AllClusters}), "the first round changes every cluster")
	c1, ok := src.Tunnel("c1")
	g.Expect(ok).To(BeTrue())
	g.Expect(c1.ConnectedAgents).To(Equal(1))
	g.Expect(c1.Probe).NotTo(BeNil())
	g.Expect(c1.Probe.Healthy).To(BeTrue(), c1.Probe.Message)
	g.Expect(c1.Probe.Latency).To(BeNumerically(">", 0))
	g.Expect(c1.Time).NotTo(BeZero())
	never, ok := src.Tunnel("never-connected")
	g.Expect(ok).To(BeTrue())
	g.Expect(never.ConnectedAgents).To(BeZero())
	g.Expect(never.Probe).To(BeNil(), "nothing to probe without an agent")

	// A round that sees the same tunnels reports no change and keeps the reported observation.
	src.Round(ctx)
	g.Expect(drain(src)).To(BeEmpty())
	again, _ := src.Tunnel("c1")
	g.Expect(again).To(Equal(c1))

	// A latency that moved enough is reported for every healthy cluster, and only once.
	latencyMoves.Store(true)
	src.Round(ctx)
	g.Expect(drain(src)).To(ConsistOf("c1", "c2"))
	latencyMoves.Store(false)
	src.Round(ctx)
	g.Expect(drain(src)).To(BeEmpty())

	// A second agent of c1 connects.
	second := hub.StartAgent(t, "c1", api1)
	src.Round(ctx)
	g.Expect(drain(src)).To(ConsistOf("c1"))
	c1, _ = src.Tunnel("c1")
	g.Expect(c1.ConnectedAgents).To(Equal(2))
	second.Stop()
	src.Round(ctx)
	g.Expect(drain(src)).To(ConsistOf("c1"), "c1 is back to one agent")

	// C2's agent disconnects: c2 turns unhealthy, nothing else changes.
	c2.Stop()
	src.Round(ctx)
	g.Expect(drain(src)).To(ConsistOf("c2"))
	gone, _ := src.Tunnel("c2")
	g.Expect(gone.ConnectedAgents).To(BeZero())
	g.Expect(gone.Probe).To(BeNil())

	// C1's kube-apiserver fails its health check.
	c1Healthy.Store(false)
	src.Round(ctx)
	g.Expect(drain(src)).To(ConsistOf("c1"))
	c1, _ = src.Tunnel("c1")
	g.Expect(c1.ConnectedAgents).To(Equal(1))
	g.Expect(c1.Probe.Healthy).To(BeFalse())
	g.Expect(c1.Probe.Message).To(ContainSubstring("500"))
}

func TestProxyServersThatStopAnsweringMakeEveryClusterUnreachableOnlyAfterStaleAfter(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hub := tunneltest.Start(t, "proxy-ns")
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	hub.StartAgent(t, "c1", api)
	reader := hub.Reader()
	staleAfter := 300 * time.Millisecond
	clk := clocktesting.NewFakePassiveClock(time.Now())
	src := tunnelhealth.New(tunnelhealth.Options{Reader: reader, Resolve: hub.Resolve, ProbeTimeout: 3 * time.Second, StaleAfter: staleAfter,
		Clock: clk, LatencyChanged: func(time.Duration, time.Duration) bool { return false }})
	src.Round(ctx)
	g.Expect(drain(src)).To(Equal([]string{tunnelhealth.AllClusters}))
	before, _ := src.Tunnel("c1")

	// The proxy-client Secret disappears: the proxy-servers cannot be asked.
	g.Expect(reader.Delete(ctx, hub.ClientSecret.DeepCopy())).To(Succeed())
	src.Round(ctx)
	g.Expect(drain(src)).To(BeEmpty(), "one failed round does not flip every cluster")
	st, _ := src.Tunnel("c1")
	g.Expect(st).To(Equal(before))

	clk.SetTime(clk.Now().Add(staleAfter - time.Nanosecond))
	src.Round(ctx)
	g.Expect(drain(src)).To(BeEmpty(), "nor does an outage shorter than StaleAfter")
	clk.SetTime(clk.Now().Add(time.Nanosecond))
	src.Round(ctx)
	g.Expect(drain(src)).To(Equal([]string{tunnelhealth.AllClusters}))
	st, _ = src.Tunnel("c1")
	g.Expect(st.Unreachable).To(BeTrue())
	src.Round(ctx)
	g.Expect(drain(src)).To(BeEmpty(), "an outage that lasts changes nothing more")

	g.Expect(reader.Create(ctx, hub.ClientSecret.DeepCopy())).To(Succeed())
	src.Round(ctx)
	g.Expect(drain(src)).To(Equal([]string{tunnelhealth.AllClusters}))
	st, _ = src.Tunnel("c1")
	g.Expect(st.Unreachable).To(BeFalse())
	g.Expect(st.Probe.Healthy).To(BeTrue())
}

func TestAFirstRoundThatFailsReportsEveryClusterUnreachable(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	_ = proxyv1alpha1.AddToScheme(s)
	src := tunnelhealth.New(tunnelhealth.Options{Reader: fake.NewClientBuilder().WithScheme(s).Build()})
	src.Round(context.Background())
	g.Expect(drain(src)).To(Equal([]string{tunnelhealth.AllClusters}))
	st, ok := src.Tunnel("c1")
	g.Expect(ok).To(BeTrue())
	g.Expect(st.Unreachable).To(BeTrue())
}

func TestStartRunsRoundsUntilTheContextEnds(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	agent := hub.StartAgent(t, "c1", api)
	src := tunnelhealth.New(tunnelhealth.Options{Reader: hub.Reader(), Resolve: hub.Resolve, Interval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx) }()
	g.Eventually(src.Changes()).Should(Receive(HaveField("Object", tunnelhealth.AllClusters)))
	agent.Stop()
	g.Eventually(src.Changes()).WithTimeout(5*time.Second).Should(Receive(HaveField("Object", "c1")), "a later round sees the agent leave")
	cancel()
	g.Eventually(done).Should(Receive(BeNil()))
}

func TestRoundsReuseTheirClientAndReadTheConfigurationAgainOnlyAfterAFailedRound(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hub := tunneltest.Start(t, "proxy-ns")
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	hub.StartAgent(t, "c1", api)
	base := hub.Reader()
	var configReads atomic.Int32
	reader := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*proxyv1alpha1.ManagedProxyConfiguration); ok {
				configReads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	src := tunnelhealth.New(tunnelhealth.Options{Reader: reader, Resolve: hub.Resolve, ProbeTimeout: 3 * time.Second, StaleAfter: time.Hour})
	for range 3 {
		src.Round(ctx)
	}
	st, _ := src.Tunnel("c1")
	g.Expect(st.Probe.Healthy).To(BeTrue())
	g.Expect(configReads.Load()).To(BeEquivalentTo(1), "one client serves every round")

	g.Expect(base.Delete(ctx, hub.ClientSecret.DeepCopy())).To(Succeed())
	src.Round(ctx)
	g.Expect(base.Create(ctx, hub.ClientSecret.DeepCopy())).To(Succeed())
	src.Round(ctx)
	g.Expect(configReads.Load()).To(BeEquivalentTo(2), "a failed round drops the client; the next builds one again")
	st, _ = src.Tunnel("c1")
	g.Expect(st.Unreachable).To(BeFalse())
	g.Expect(st.Probe.Healthy).To(BeTrue())
}

func TestRecordsAreTheReplicasRecordSinksAndAChangeIsTold(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	var webhookDown atomic.Bool
	hub := tunneltest.Start(t, "proxy-ns", func(o *server.Options) {
		o.RecordSinks = func() []tunnelclient.RecordSink {
			return []tunnelclient.RecordSink{{Sink: tunnelclient.RecordSinkAuditWebhook, Up: !webhookDown.Load()}}
		}
	})
	src := tunnelhealth.New(tunnelhealth.Options{Reader: hub.Reader(), Resolve: hub.Resolve, StaleAfter: time.Hour})
	_, ok := src.Records()
	g.Expect(ok).To(BeFalse(), "nothing before a round")

	src.Round(ctx)
	records, ok := src.Records()
	g.Expect(ok).To(BeTrue())
	g.Expect(records).To(HaveLen(1))
	for _, sinks := range records {
		g.Expect(sinks).To(Equal([]tunnelclient.RecordSink{{Sink: "audit-webhook", Up: true}}))
	}
	g.Expect(src.RecordChanges()).To(Receive(HaveField("Object", "cluster-proxy")), "the first round tells")
	src.Round(ctx)
	g.Expect(src.RecordChanges()).NotTo(Receive(), "the same sinks tell nothing")

	webhookDown.Store(true)
	src.Round(ctx)
	g.Expect(src.RecordChanges()).To(Receive())
	records, _ = src.Records()
	for _, sinks := range records {
		g.Expect(sinks[0].Up).To(BeFalse())
	}
}
