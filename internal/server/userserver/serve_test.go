package userserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsbatch"
)

// serving runs s.Serve on a loopback listener until the returned cancel is called; done yields Serve's result.
func serving(t *testing.T, s *Server) (addr string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		result <- s.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return ln.Addr().String(), cancel, result
}

func TestServeDrainsInFlightRequestsAndRefusesNewConnections(t *testing.T) {
	g := NewWithT(t)
	arrived, released := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(released) })
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-released
		}
		_, _ = io.WriteString(w, "done "+r.URL.Path)
	})
	e := newEnv(t, backend, Options{DrainTimeout: time.Minute}, "c1")
	g.Expect(e.server.Ready()).To(BeFalse(), "not ready before Serve")
	addr, cancel, done := serving(t, e.server)
	// Registered after the server's cleanups, so it runs first: a failed assertion must not leave the slow request,
	// and so those cleanups, waiting forever.
	t.Cleanup(release)
	g.Eventually(e.server.Ready).Should(BeTrue())

	type result struct {
		code int
		body string
		err  error
	}
	slow := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/c1/slow", nil)
		req.Header.Set("Authorization", testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		slow <- result{code: resp.StatusCode, body: string(body), err: err}
	}()
	g.Eventually(arrived).WithTimeout(5 * time.Second).Should(BeClosed())

	cancel()
	g.Eventually(e.server.Ready).Should(BeFalse())
	g.Eventually(func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err
	}).WithTimeout(5*time.Second).Should(HaveOccurred(), "the listener is closed while draining")
	g.Consistently(done).WithTimeout(100*time.Millisecond).ShouldNot(Receive(), "Serve waits for the slow request")

	release()
	var r result
	g.Eventually(slow).WithTimeout(5 * time.Second).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.code).To(Equal(http.StatusOK))
	g.Expect(r.body).To(Equal("done /slow"))
	g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(BeNil()))
}

func TestServeWaitsForUpgradedConnectionsUntilTheDrainTimeout(t *testing.T) {
	t.Run("closes them when the drain times out", func(t *testing.T) {
		g := NewWithT(t)
		const drainTimeout = time.Minute
		clk := clocktesting.NewFakeClock(time.Now())
		e := newEnv(t, http.HandlerFunc(upgradeBackend), Options{DrainTimeout: drainTimeout, Clock: clk}, "c1")
		addr, cancel, done := serving(t, e.server)
		g.Eventually(e.server.Ready).Should(BeTrue())
		conn, r := dialUpgrade(t, addr, "/c1/exec", "SPDY/3.1")
		_, err := r.ReadString('\n')
		g.Expect(err).NotTo(HaveOccurred())

		cancel()
		g.Eventually(clk.HasWaiters).Should(BeTrue(), "the drain started its bound")
		clk.Step(drainTimeout - time.Nanosecond)
		_, err = io.WriteString(conn, "still here\n")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.ReadString('\n')).To(Equal("echo still here\n"), "the upgraded connection has the whole drain")
		g.Expect(done).NotTo(Receive(), "Serve waits for it")
		clk.Step(time.Nanosecond)
		g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(BeNil()))
		g.Expect(conn.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
		_, err = r.ReadString('\n')
		g.Expect(err).To(MatchError(io.EOF), "the upgraded connection was closed, not left to the deadline")
	})

	t.Run("returns as soon as they end by themselves", func(t *testing.T) {
		g := NewWithT(t)
		// The clock never moves, so only the connection ending can end the drain.
		clk := clocktesting.NewFakeClock(time.Now())
		e := newEnv(t, http.HandlerFunc(upgradeBackend), Options{DrainTimeout: time.Minute, Clock: clk}, "c1")
		addr, cancel, done := serving(t, e.server)
		g.Eventually(e.server.Ready).Should(BeTrue())
		conn, r := dialUpgrade(t, addr, "/c1/exec", "websocket")
		_, err := r.ReadString('\n')
		g.Expect(err).NotTo(HaveOccurred())

		cancel()
		g.Eventually(e.server.Ready).Should(BeFalse())
		_, err = io.WriteString(conn, "still here\n")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.ReadString('\n')).To(Equal("echo still here\n"), "the session works while draining")
		g.Consistently(done).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())
		_ = conn.Close()
		g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(BeNil()))
	})
}

func TestServeKeepsAcceptingDuringMinDrainDuration(t *testing.T) {
	g := NewWithT(t)
	const minDrain = time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	e := newEnv(t, http.HandlerFunc((&seen{}).handler), Options{MinDrainDuration: minDrain, Clock: clk}, "c1")
	addr, cancel, done := serving(t, e.server)
	g.Eventually(e.server.Ready).Should(BeTrue())

	cancel()
	g.Eventually(e.server.Ready).Should(BeFalse())
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the minimum drain started")
	clk.Step(minDrain - time.Nanosecond)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/c1/api", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", testToken)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "load balancers get time to notice Ready turned false")
	g.Expect(done).NotTo(Receive(), "still in the minimum drain")
	clk.Step(time.Nanosecond)
	g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(BeNil()))
}

// writeSizes is a connection beneath TLS that keeps the size of each write.
type writeSizes struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (c *writeSizes) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.sizes = append(c.sizes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

type writeSizesListener struct {
	net.Listener
	conns chan *writeSizes
}

func (l writeSizesListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	w := &writeSizes{Conn: c}
	l.conns <- w
	return w, nil
}

// The reverse proxy copies a body 32 KiB at a time, two TLS records each; on HTTP/1 both leave in one write.
func TestABodyLeavesTwoTLSRecordsPerWriteOverHTTP1(t *testing.T) {
	g := NewWithT(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<20/16)
	backend := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	e := newEnv(t, backend, Options{}, "c1")

	ca, err := certs.NewCA("user-server-test", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "user-server", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Duration: time.Hour}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	raw := writeSizesListener{Listener: tcp, conns: make(chan *writeSizes, 1)}
	ln := tls.NewListener(tlsbatch.Listener(raw), &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.server.Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+tcp.Addr().String()+"/c1/bulk", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", testToken)
	resp, err := client.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(bytes.Equal(got, body)).To(BeTrue(), "the body arrives whole and in order")

	conn := <-raw.conns
	conn.mu.Lock()
	defer conn.mu.Unlock()
	twoRecords := 0
	for _, n := range conn.sizes {
		if n > 2*tlsbatch.RecordPayload {
			twoRecords++
		}
	}
	// 1 MiB in 32 KiB copies is 32 of them; the first 128 KiB of a connection go in smaller records.
	g.Expect(twoRecords).To(BeNumerically(">=", 24), "writes of two records: %v", conn.sizes)
}
