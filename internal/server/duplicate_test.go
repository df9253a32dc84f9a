package server

import (
	"bufio"
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// The product's agent and proxy-server together. The server says there are two servers, so the agent, reaching only
// this one, lands on it again and again. Each of those streams is refused before it becomes a backend: the server
// holds the agent's one stream throughout, and the dials made meanwhile all reach the agent.
func TestAnAgentLandingAgainAndAgainOnAServerItHoldsNeverBecomesASecondBackend(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, func(o *Options) { o.ServerCount = 2 })
	target := httpTarget(t, "a-apiserver")
	cert, key := f.pki.agentCert(t, "agent-real", "a", "ns-a")
	src, err := tlsreload.New(cert, key, f.pki.caFile)
	g.Expect(err).NotTo(HaveOccurred())
	a, err := agent.New(agent.Options{
		ServerAddress: f.addrs.Agent, AgentID: "agent-1", Identifiers: "host=a", TLS: src, KubeAPIServer: target,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, DrainTimeout: 100 * time.Millisecond,
		Log: testr.New(t),
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	g.Eventually(a.Tunnels).Should(Equal(1))

	refused := duplicatesRefused()
	for i := 0; duplicatesRefused() < refused+5; i++ {
		if i == 5000 {
			t.Fatalf("%v duplicate streams refused after %d dials, want 5", duplicatesRefused()-refused, i)
		}
		conn, err := f.srv.DialCluster(context.Background(), "a", 443)
		g.Expect(err).NotTo(HaveOccurred(), "dial %d", i+1)
		g.Expect(get(conn, bufio.NewReader(conn), "a", "/")).To(Equal("a-apiserver /"))
		_ = conn.Close()
		g.Expect(openStreams(f.srv.agents, "a", "agent-1")).To(Equal(1), "after dial %d", i+1)
	}
	g.Expect(a.Tunnels()).To(Equal(1))
}

func duplicatesRefused() float64 {
	var m dto.Metric
	if err := duplicateRefusals.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// openStreams is the number of open streams of cluster's agent agentID.
func openStreams(a *Agents, cluster, agentID string) int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, s := range a.connected[cluster] {
		if s.id == agentID {
			return s.streams
		}
	}
	return 0
}
