package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// tcpTarget accepts connections on 127.0.0.1 and hands each to serve; closed counts the connections that ended.
type tcpTarget struct {
	addr   string
	mu     sync.Mutex
	closed int
}

func startTCPTarget(t testing.TB, serve func(net.Conn)) *tcpTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &tcpTarget{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				serve(c)
				_ = c.Close()
				tg.mu.Lock()
				tg.closed++
				tg.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return tg
}

func (tg *tcpTarget) closedConns() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.closed
}

func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// echoFixture is a proxy-server (its options changed by mutate, when not nil) whose cluster c1 has one agent,
// agent-1, through which c1:443 is the echo target it returns.
func echoFixture(t *testing.T, mutate func(*Options)) (*fixture, *tcpTarget) {
	t.Helper()
	f := startFixture(t, false, nil, mutate)
	target := startTCPTarget(t, echo)
	if _, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target.addr}); err != nil {
		t.Fatal(err)
	}
	return f, target
}

func randomData(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// exchange writes data through conn and reads the same number of bytes back from the echo target.
func exchange(conn net.Conn, data []byte) ([]byte, error) {
	written := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		written <- err
	}()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(conn, got); err != nil {
		return nil, fmt.Errorf("read back: %w", err)
	}
	if err := <-written; err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	return got, nil
}

func TestInProcessTunnelCarriesDataBothWays(t *testing.T) {
	g := NewWithT(t)
	f, _ := echoFixture(t, nil)

	conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	g.Expect(conn.RemoteAddr().String()).To(Equal("c1:443"))

	// Larger than the window and than one packet, so both directions wait for each other on the way.
	data := randomData(t, 3<<20+17)
	got, err := exchange(conn, data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Equal(got, data)).To(BeTrue(), "the echo differs from what was sent")
	g.Expect(f.srv.inProcess.count()).To(BeEquivalentTo(1))
}

func TestInProcessTunnelClosedHereEndsAtTheTargetAndFreesTheStream(t *testing.T) {
	g := NewWithT(t)
	f, target := echoFixture(t, nil)

	conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = exchange(conn, []byte("ping"))
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(conn.Close()).To(Succeed())
	g.Expect(conn.Close()).To(Succeed(), "closing twice is harmless")
	_, err = conn.Read(make([]byte, 8))
	g.Expect(err).To(MatchError(net.ErrClosed))
	_, err = conn.Write([]byte("late"))
	g.Expect(err).To(MatchError(net.ErrClosed))
	g.Eventually(target.closedConns).Should(Equal(1), "the agent closed the target connection")
	g.Eventually(f.srv.inProcess.count).Should(BeZero(), "the stream ended after the agent's CLOSE_RSP")
}

func TestInProcessTunnelClosedByTheTargetReadsToTheEnd(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	farewell := randomData(t, 200<<10)
	target := startTCPTarget(t, func(c net.Conn) { _, _ = c.Write(farewell) })
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target.addr})
	g.Expect(err).NotTo(HaveOccurred())

	conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	got, err := io.ReadAll(conn) // io.EOF after the last byte
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Equal(got, farewell)).To(BeTrue())
	_, err = conn.Write([]byte("too late"))
	g.Expect(err).To(MatchError(errTunnelClosed))
	g.Eventually(f.srv.inProcess.count).Should(BeZero())
}

func TestInProcessDialErrorsNameTheCause(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = f.srv.DialCluster(context.Background(), "nowhere", 443)
	g.Expect(err).To(MatchError(ContainSubstring("No agent available")))
	g.Expect(err).To(MatchError(ContainSubstring("dial cluster nowhere port 443")))

	_, err = f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).To(MatchError(ContainSubstring("no such target: c1:443")), "the agent's answer")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.srv.DialCluster(ctx, "c1", 443)
	g.Expect(err).To(MatchError(context.Canceled))

	g.Eventually(f.srv.inProcess.count).Should(BeZero(), "failed dials leave no stream behind")
}

func TestConcurrentInProcessTunnelsKeepTheirDataApartAndLeaveNoGoroutines(t *testing.T) {
	g := NewWithT(t)
	f, target := echoFixture(t, nil)
	// Warm up what stays: gRPC's and the agent's own goroutines.
	conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = exchange(conn, []byte("warm-up"))
	g.Expect(err).NotTo(HaveOccurred())
	_ = conn.Close()
	g.Eventually(target.closedConns).Should(Equal(1))
	g.Eventually(f.srv.inProcess.count).Should(BeZero())
	before := runtime.NumGoroutine()

	const tunnels = 64
	errs := make(chan error, tunnels)
	var wg sync.WaitGroup
	for i := range tunnels {
		wg.Go(func() {
			conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = conn.Close() }()
			data := randomData(t, 64<<10+i)
			got, err := exchange(conn, data)
			if err == nil && !bytes.Equal(got, data) {
				err = fmt.Errorf("tunnel %d: the echo differs from what was sent", i)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	g.Eventually(target.closedConns).Should(Equal(1 + tunnels))
	g.Eventually(f.srv.inProcess.count).Should(BeZero())
	g.Eventually(runtime.NumGoroutine, 5*time.Second).Should(BeNumerically("<=", before), "goroutines back to where they were")
}

func TestShutdownEndsInProcessTunnels(t *testing.T) {
	g := NewWithT(t)
	f, _ := echoFixture(t, func(o *Options) { o.ShutdownTimeout = 2 * time.Second })
	conn, err := f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 8))
		read <- err
	}()

	g.Expect(f.stop()).To(Succeed())
	g.Eventually(read).Should(Receive(HaveOccurred()), "a pending read ends with the server")
	g.Expect(f.srv.inProcess.count()).To(BeZero())
	_, err = f.srv.DialCluster(context.Background(), "c1", 443)
	g.Expect(errors.Is(err, errServerStopping)).To(BeTrue(), "got %v", err)
}

// An agent that died behind a forward proxy stays registered until the keepalive drops it; its cluster's replacement
// agent, which connected after it, takes the dials meanwhile.
func TestDialGoesToTheClusterAgentThatConnectedLast(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := startTCPTarget(t, echo)
	targets := map[string]string{"c1:443": target.addr}
	dead, err := f.agent(t, "c1", "ns1", "agent-old", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	dead.unresponsive.Store(true)
	_, err = f.agent(t, "c1", "ns1", "agent-new", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.srv.Agents().Snapshot()["c1"]).To(ConsistOf("agent-old", "agent-new"), "the dead agent is still registered")

	for range 5 {
		// Bounded, so that a dial sent to the dead agent fails instead of waiting for ANP's dial timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := f.srv.DialCluster(ctx, "c1", 443)
		cancel()
		g.Expect(err).NotTo(HaveOccurred())
		got, err := exchange(conn, []byte("ping"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal("ping"))
		g.Expect(conn.Close()).To(Succeed())
	}
}

// An in-process dial whose agent stream ends before the agent answers is made again, and reaches an agent that is
// still there instead of failing.
func TestDialWaitingOnAnAgentStreamThatEndsIsMadeAgainThroughAnother(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := startTCPTarget(t, echo)
	targets := map[string]string{"c1:443": target.addr}
	_, err := f.agent(t, "c1", "ns1", "agent-live", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	going, err := f.agent(t, "c1", "ns1", "agent-going", "host=c1", targets)
	g.Expect(err).NotTo(HaveOccurred())
	going.unresponsive.Store(true)

	type result struct {
		conn net.Conn
		err  error
	}
	dialed := make(chan result, 1)
	go func() {
		// Far longer than the dial needs; only a dial left waiting on the ended stream runs into it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := f.srv.DialCluster(ctx, "c1", 443)
		dialed <- result{conn, err}
	}()
	// The newest agent got the dial, and its stream ends before it answers.
	g.Eventually(going.dropped).Should(Receive())
	going.Close()

	var r result
	g.Eventually(dialed).WithTimeout(30 * time.Second).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	got, err := exchange(r.conn, []byte("ping"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("ping"))
	g.Expect(r.conn.Close()).To(Succeed())
}
