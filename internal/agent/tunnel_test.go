package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// clusterAddress is the kube-apiserver of the test cluster as hub clients dial it.
var clusterAddress = testCluster + ":443"

func waitForTunnel(g *WithT, a *Agent, n int) {
	g.Eventually(a.Tunnels).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(n))
}

func TestDialsReachTheKubeAPIServerAndTheServiceProxy(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	a, err := New(env.options(t))
	g.Expect(err).NotTo(HaveOccurred())
	health := httptest.NewServer(a.HealthHandler())
	defer health.Close()
	g.Expect(httpStatus(health.URL + "/readyz")).To(Equal(http.StatusServiceUnavailable))
	g.Expect(httpStatus(health.URL + "/healthz")).To(Equal(http.StatusOK))
	run(t, a)
	waitForTunnel(g, a, 1)
	g.Expect(httpStatus(health.URL + "/readyz")).To(Equal(http.StatusOK))
	g.Expect(httpStatus(health.URL + "/healthz")).To(Equal(http.StatusOK))

	// Both identifiers' hosts name the cluster; port 443 is the kube-apiserver, 7443 the in-process service-proxy.
	g.Expect(env.srv.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
	g.Expect(env.srv.get(testCluster+".ns:443", "/small")).To(Equal("small from kube-apiserver"))
	g.Expect(env.srv.get(testCluster+":7443", "/small")).To(Equal("small from service-proxy"))

	metrics := httpBody(health.URL + "/metrics")
	g.Expect(metrics).To(ContainSubstring("cluster_proxy_agent_tunnels 1"))
	g.Expect(metrics).To(ContainSubstring(`cluster_proxy_agent_dials_total{destination="kube-apiserver",result="success"} 2`))
	g.Expect(metrics).To(ContainSubstring(`cluster_proxy_agent_dials_total{destination="service-proxy",result="success"} 1`))
	g.Expect(metrics).To(MatchRegexp(`cluster_proxy_agent_bytes_total\{direction="to_hub"\} [1-9]`))
	g.Eventually(func() string { return httpBody(health.URL + "/metrics") }).
		Should(ContainSubstring("cluster_proxy_agent_open_connections 0"))
}

func TestBulkTransfersArriveIntact(t *testing.T) {
	env := newEnv(t)
	a, _ := runAgent(t, env.options(t))
	waitForTunnel(NewWithT(t), a, 1)

	for _, address := range []string{clusterAddress, testCluster + ":7443"} {
		t.Run("download via "+address, func(t *testing.T) {
			g := NewWithT(t)
			start := time.Now()
			body, err := env.srv.get(address, "/bulk")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(HaveLen(bulkSize))
			g.Expect(sha([]byte(body))).To(Equal(sha(bulkBody)))
			t.Logf("16 MiB in %v", time.Since(start))
		})
		t.Run("upload via "+address, func(t *testing.T) {
			g := NewWithT(t)
			resp, err := env.srv.httpClient(address).Post("http://"+address+"/sha", "application/octet-stream", bytes.NewReader(bulkBody))
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = resp.Body.Close() }()
			got, _ := io.ReadAll(resp.Body)
			g.Expect(string(got)).To(Equal(sha(bulkBody)))
		})
	}
}

func TestDialsToOtherDestinationsAreRefused(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	opts := env.options(t)
	opts.ServiceProxy = nil // port 7443 is then off too
	a, _ := runAgent(t, opts)
	waitForTunnel(g, a, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, address := range []string{testCluster + ":22", testCluster + ":7443"} {
		_, err := env.srv.dial(ctx, address)
		g.Expect(err).To(MatchError(ContainSubstring("destination not served by this agent")), address)
	}
	// A host that is not one of the identifiers never reaches this agent's destinations, even though it was
	// sent here: the agent checks it too.
	conn, dest, err := a.dialDestination(ctx, "tcp", "other-cluster:443")
	g.Expect(conn).To(BeNil())
	g.Expect(dest).To(Equal(destOther))
	g.Expect(err).To(MatchError(errRefused))

	g.Expect(env.srv.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
}

func TestManyConcurrentConnectionsLeaveNothingBehind(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	a, _ := runAgent(t, env.options(t))
	waitForTunnel(g, a, 1)
	// Warm up both destinations so lazily started goroutines are part of the baseline.
	g.Expect(env.srv.get(clusterAddress, "/small")).To(ContainSubstring("small"))
	g.Expect(env.srv.get(testCluster+":7443", "/small")).To(ContainSubstring("small"))
	baseline := settledGoroutines()

	n := manyConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			address := clusterAddress
			if i%2 == 1 {
				address = testCluster + ":7443"
			}
			c, err := env.srv.dial(ctx, address)
			if err != nil {
				errs <- fmt.Errorf("dial %d: %w", i, err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	// All n are open at once; each then answers a request.
	g.Eventually(func() int { return a.openConns() }).Should(Equal(n))
	held := runtime.NumGoroutine()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
			if err == nil {
				resp, rerr := http.ReadResponse(bufio.NewReader(c), nil)
				if err = rerr; err == nil {
					body, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if !strings.HasPrefix(string(body), "small from") {
						err = fmt.Errorf("connection %d: body %q", i, body)
					}
				}
			}
			if err != nil {
				t.Errorf("connection %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	for _, c := range conns {
		_ = c.Close()
	}
	g.Eventually(func() int { return a.openConns() }).WithTimeout(15 * time.Second).Should(BeZero())
	g.Eventually(runtime.NumGoroutine).WithTimeout(20*time.Second).WithPolling(50*time.Millisecond).
		Should(BeNumerically("<=", baseline), "goroutines after closing %d connections", n)
	t.Logf("goroutines: %d before, %d with %d connections open (client, server, agent and destinations), %d after",
		baseline, held, n, runtime.NumGoroutine())
}

func TestSlowDestinationDoesNotStallTheOthers(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	opts := env.options(t)
	opts.QueueSize = 256 << 10
	opts.StallTimeout = time.Second
	a, _ := runAgent(t, opts)
	waitForTunnel(g, a, 1)

	// An upload to /sink, which reads nothing: the pipe to the service-proxy and the connection's queue fill up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stuck, err := env.srv.dial(ctx, testCluster+":7443")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = stuck.Close() }()
	uploadDone := make(chan error, 1)
	go func() {
		_, err := io.WriteString(stuck, "POST /sink HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n")
		for i := 0; err == nil && i < 64; i++ {
			_, err = stuck.Write(bulkBody[:1<<20])
		}
		uploadDone <- err
	}()

	// Other connections keep working: at worst they wait for the stalled one to be closed.
	start := time.Now()
	for range 5 {
		g.Expect(env.srv.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))
	}
	g.Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
	// The stalled connection is closed by the agent: the hub side sees it end.
	readDone := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(stuck)
		readDone <- err
	}()
	g.Eventually(readDone).WithTimeout(10 * time.Second).Should(Receive())
}

func TestAbandonedDialIsCancelled(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	opts := env.options(t)
	// The kube-apiserver never answers: dials to it wait until cancelled.
	dialing := make(chan struct{}, 1)
	opts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == kubeName {
			dialing <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return env.resolve.DialContext(ctx, network, addr)
	}
	opts.DialTimeout = time.Minute
	a, _ := runAgent(t, opts)
	waitForTunnel(g, a, 1)

	// The client goes away while its dial is pending; the proxy-server tells the agent with DIAL_CLS. (A client that
	// cancels only the dial sends DIAL_CLS itself, which ANP v0.36 does not pass on to the agent.)
	ctx, cancel := context.WithCancel(context.Background())
	dialed := make(chan error, 1)
	go func() {
		_, err := env.srv.dialTunnel(context.Background(), ctx, clusterAddress)
		dialed <- err
	}()
	g.Eventually(dialing).WithTimeout(10 * time.Second).Should(Receive())
	cancel()
	g.Eventually(dialed).Should(Receive(HaveOccurred()))
	g.Eventually(func() float64 { return counterValue(a.metrics.dials.WithLabelValues(destKubeAPIServer, dialCancelled)) }).
		WithTimeout(10 * time.Second).Should(Equal(1.0))
	g.Expect(a.openConns()).To(BeZero())
}

func TestSurvivesAProxyServerRestart(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	a, _ := runAgent(t, env.options(t))
	waitForTunnel(g, a, 1)
	g.Expect(env.srv.get(clusterAddress, "/small")).To(Equal("small from kube-apiserver"))

	// The proxy-server goes away and a new one comes up on the same port.
	addr := env.srv.agentLis.Addr().String()
	env.srv.stop()
	g.Eventually(a.Tunnels).Should(BeZero())
	// It stays away long enough for the agent to fail a few times and back off.
	g.Eventually(func() float64 { return counterValue(a.metrics.connects.WithLabelValues("error")) }).
		WithTimeout(10 * time.Second).Should(BeNumerically(">=", 3))
	restarted := time.Now()
	srv := startServer(t, env.pki, "server-a-restarted", 1, addr)

	g.Eventually(func() (string, error) { return srv.get(clusterAddress, "/small") }).
		WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal("small from kube-apiserver"))
	t.Logf("traffic flows again %v after the new proxy-server started", time.Since(restarted).Round(time.Millisecond))
}

func TestDrainsOnShutdown(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	opts := env.options(t)
	opts.DrainTimeout = 20 * time.Second
	a, stop := runAgent(t, opts)
	waitForTunnel(g, a, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := env.srv.dial(ctx, clusterAddress)
	g.Expect(err).NotTo(HaveOccurred())

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	g.Eventually(env.srv.drainsSeen).Should(Equal(1))
	g.Expect(a.Ready()).To(BeFalse())
	// New dials are refused; the open connection, which has not had its first answer yet, still works.
	_, err = env.srv.dial(ctx, clusterAddress)
	g.Expect(err).To(MatchError(ContainSubstring("shutting down")))
	g.Consistently(stopped).WithTimeout(200 * time.Millisecond).ShouldNot(BeClosed())
	_, err = io.WriteString(held, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	r := bufio.NewReader(held)
	resp, err := http.ReadResponse(r, nil)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()

	// Answered and quiet, the connection pauses between requests: the drain closes it and ends.
	_, err = r.ReadByte()
	g.Expect(err).To(HaveOccurred())
	g.Eventually(stopped).WithTimeout(5 * time.Second).Should(BeClosed())
	g.Eventually(env.srv.activeStreams).Should(BeZero())
	g.Expect(counterValue(a.metrics.drained.WithLabelValues(drainedPaused))).To(Equal(1.0))
	g.Expect(counterValue(a.metrics.drained.WithLabelValues(drainedCut))).To(BeZero())
}

// A rolling update replaces an agent while hub clients keep their connections alive from request to request. The
// drain closes each connection in a pause between its requests, so every client dials again, reaches the agent that
// stays and loses nothing; none is left to cut at the drain timeout in the middle of an answer.
func TestDrainMovesKeptAliveClientsToAnotherAgentBetweenRequests(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	opts := env.options(t)
	opts.DrainTimeout = 30 * time.Second
	going, stop := runAgent(t, opts)
	waitForTunnel(g, going, 1)

	// Each client sends a request, reads its answer and waits 60 ms, on one connection.
	const clients = 6
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var answered [clients]atomic.Int64
	var mu sync.Mutex
	var failures []error
	for i := range clients {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return env.srv.dial(ctx, clusterAddress) },
		}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				body, err := c.Get("http://" + clusterAddress + "/small")
				if err == nil {
					var b []byte
					b, err = io.ReadAll(body.Body)
					_ = body.Body.Close()
					if err == nil && string(b) != "small from kube-apiserver" {
						err = fmt.Errorf("answer %q", b)
					}
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				} else {
					answered[i].Add(1)
				}
				time.Sleep(60 * time.Millisecond)
			}
		}()
	}
	allAnsweredSince := func(base []int64) func() bool {
		return func() bool {
			for i := range answered {
				if answered[i].Load() <= base[i] {
					return false
				}
			}
			return true
		}
	}
	g.Eventually(allAnsweredSince(make([]int64, clients))).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(going.openConns()).To(Equal(clients), "each client keeps one connection through the agent")

	opts.AgentID = "agent-2"
	staying, _ := runAgent(t, opts)
	waitForTunnel(g, staying, 1)
	stop()
	g.Expect(counterValue(going.metrics.drained.WithLabelValues(drainedPaused))).To(Equal(float64(clients)),
		"every connection was closed in a pause between requests")
	g.Expect(counterValue(going.metrics.drained.WithLabelValues(drainedCut))).To(BeZero(), "no connection was cut at the drain timeout")

	base := make([]int64, clients)
	for i := range answered {
		base[i] = answered[i].Load()
	}
	g.Eventually(allAnsweredSince(base)).WithTimeout(10*time.Second).Should(BeTrue(), "every client is answered through the agent that stays")
	g.Expect(staying.openConns()).To(Equal(clients))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(failures).To(BeEmpty())
}

// settledGoroutines waits until the number of goroutines stops changing and returns it.
func settledGoroutines() int {
	last, stable := runtime.NumGoroutine(), 0
	for stable < 10 {
		time.Sleep(50 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	return last
}

func httpStatus(url string) int {
	resp, err := http.Get(url) //nolint:gosec,noctx // test URL
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func httpBody(url string) string {
	resp, err := http.Get(url) //nolint:gosec,noctx // test URL
	if err != nil {
		return err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// manyConnections is 200, or AGENT_TEST_CONNECTIONS (e.g. 1000, the target of docs/performance.md).
func manyConnections() int {
	if n, err := strconv.Atoi(os.Getenv("AGENT_TEST_CONNECTIONS")); err == nil && n > 0 {
		return n
	}
	return 200
}
