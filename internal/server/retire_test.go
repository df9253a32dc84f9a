package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// slowTarget is an HTTP target whose /slow answers only once release is called; arrived receives a value when a
// /slow request has arrived.
func slowTarget(t *testing.T) (addr string, arrived chan struct{}, release func()) {
	arrived, released := make(chan struct{}, 1), make(chan struct{})
	release = sync.OnceFunc(func() { close(released) })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-released
		}
		_, _ = fmt.Fprintf(w, "c1 %s", r.URL.Path)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(release) // before ts.Close, which waits for the handler
	return ts.Listener.Addr().String(), arrived, release
}

// A pass closes the connections of the gRPC and HTTP-CONNECT frontends that carried nothing since the pass before
// and whose last packet answered the client: between requests. A request waiting for its answer keeps its
// connection, and so do the in-process tunnels of the user-server, which drains its own.
func TestIdleFrontendConnectionsCloseBetweenRequestsNotDuringOne(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target, arrived, release := slowTarget(t)
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())
	r := f.srv.router

	type kept struct {
		conn net.Conn
		br   *bufio.Reader
	}
	dialGRPC := func() kept {
		conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = conn.Close() })
		return kept{conn, bufio.NewReader(conn)}
	}
	grpcConn, waiting := dialGRPC(), dialGRPC()
	connectConn, connectBR, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = connectConn.Close() })
	inProcess, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = inProcess.Close() })
	inProcessBR := bufio.NewReader(inProcess)

	for name, c := range map[string]kept{"gRPC": grpcConn, "HTTP-CONNECT": {connectConn, connectBR}, "in-process": {inProcess, inProcessBR}} {
		g.Expect(get(c.conn, c.br, "c1", "/")).To(Equal("c1 /"), name)
	}
	// A request whose answer has not come.
	_, err = fmt.Fprintf(waiting.conn, "GET /slow HTTP/1.1\r\nHost: c1\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	<-arrived

	g.Expect(r.retireIdle()).To(BeZero(), "the first pass only notes what each connection carried")
	g.Expect(r.retireIdle()).To(Equal(2), "the gRPC and HTTP-CONNECT connections were quiet since their answers")
	for name, c := range map[string]kept{"gRPC": grpcConn, "HTTP-CONNECT": {connectConn, connectBR}} {
		_, err := c.br.ReadByte()
		g.Expect(err).To(MatchError(io.EOF), "%s: the client sees its connection end", name)
	}
	for range 3 {
		g.Expect(r.retireIdle()).To(BeZero(), "a request waiting for its answer keeps its connection; so does the in-process tunnel")
	}
	g.Expect(get(inProcess, inProcessBR, "c1", "/again")).To(Equal("c1 /again"))

	release()
	resp, err := http.ReadResponse(waiting.br, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(body)).To(Equal("c1 /slow"), "the answer came whole")
	g.Expect(r.retireIdle()).To(BeZero())
	g.Expect(r.retireIdle()).To(Equal(1), "answered, the connection is idle")
	_, err = waiting.br.ReadByte()
	g.Expect(err).To(MatchError(io.EOF))
}

// A shutdown moves the kept-alive connections of the gRPC frontend's clients between their requests, so its graceful
// stop ends once they have moved, long before its bound, and no request is cut: a client sees only dials that fail,
// because the one replica here has stopped listening.
func TestShutdownEndsOnceKeptAliveClientsAreBetweenRequests(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	f := startFixture(t, false, nil, func(o *Options) { o.ShutdownTimeout, o.Clock = time.Hour, clk })
	target := httpTarget(t, "c1-apiserver")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target})
	g.Expect(err).NotTo(HaveOccurred())

	dialer := &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}
	transport := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialer.DialCluster(ctx, "c1", 443)
	}}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	var (
		mu       sync.Mutex
		answered int
		failures []error
	)
	stopLoops := make(chan struct{})
	var loops sync.WaitGroup
	for range 2 {
		loops.Go(func() {
			for {
				select {
				case <-stopLoops:
					return
				default:
				}
				resp, err := client.Get("http://c1/loop")
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					_ = resp.Body.Close()
				}
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					answered++
				}
				mu.Unlock()
				time.Sleep(30 * time.Millisecond) // a pause longer than the passes' interval: the stepped clock makes one every poll of Eventually (10 ms)
			}
		})
	}
	g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return answered }).Should(BeNumerically(">", 40))

	stopped := make(chan error, 1)
	go func() { stopped <- f.stop() }()
	stepped := time.Duration(0)
	g.Eventually(func() bool {
		clk.Step(retireInterval)
		stepped += retireInterval
		return len(stopped) > 0
	}).WithTimeout(20 * time.Second).Should(BeTrue())
	g.Expect(<-stopped).To(Succeed())
	g.Expect(stepped).To(BeNumerically("<", time.Hour), "it stopped once the connections had moved, not at its bound")
	close(stopLoops)
	loops.Wait()

	mu.Lock()
	defer mu.Unlock()
	g.Expect(answered).To(BeNumerically(">", 40))
	for _, err := range failures {
		// The only way left is the stopped frontend: each failure is a dial, never a request cut in flight.
		g.Expect(err).To(MatchError(ContainSubstring("tunnel to")), "a request was cut: %v", err)
	}
	resp, err := client.Get("http://c1/after")
	if err == nil {
		_ = resp.Body.Close()
	}
	g.Expect(err).To(MatchError(ContainSubstring("tunnel to")), "no kept-alive connection is left: a request dials")
}
