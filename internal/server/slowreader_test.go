package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// largeTarget answers GET /large/<n> with n bytes of a pattern, and anything else with its path.
func largeTarget(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/large/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(pattern(n))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.URL.Path) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// productAgent runs this product's agent for cluster c1 against f, with the kube-apiserver at target.
func productAgent(t *testing.T, f *fixture, target string) {
	t.Helper()
	certFile, keyFile := f.pki.agentCert(t, "product-agent", "c1", "ns1")
	src, err := tlsreload.New(certFile, keyFile, f.pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Options{ServerAddress: f.addrs.Agent, AgentID: "agent-1", Identifiers: "host=c1", TLS: src,
		KubeAPIServer: target, Log: testr.NewWithInterface(t, testr.Options{})})
	if err != nil {
		t.Fatal(err)
	}
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
	NewWithT(t).Eventually(func() []string { return f.srv.Agents().Snapshot()["c1"] }).Should(ContainElement("agent-1"))
}

// stalledReader asks for a large answer and reads nothing of it yet.
type stalledReader struct {
	conn net.Conn
	br   *bufio.Reader
}

func (s stalledReader) read(size int) error {
	resp, err := http.ReadResponse(s.br, nil)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !bytes.Equal(body, pattern(size)) {
		return fmt.Errorf("%d bytes, not the %d the target sent", len(body), size)
	}
	return nil
}

// stalledReaders opens n connections through each frontend, gRPC (with fixed flow-control windows, no BDP estimate
// growing them to megabytes, so that the client stops the proxy-server after a known amount, as on a slow link) and
// HTTP-CONNECT, and asks each for size bytes.
func stalledReaders(t *testing.T, f *fixture, n, size int) []stalledReader {
	t.Helper()
	g := NewWithT(t)
	var out []stalledReader
	for range n {
		tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(context.Background(), context.Background(), f.addrs.Frontend,
			grpc.WithTransportCredentials(credentials.NewTLS(f.proxyTL)),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		g.Expect(err).NotTo(HaveOccurred())
		conn, err := tunnel.DialContext(context.Background(), "tcp", "c1:443")
		g.Expect(err).NotTo(HaveOccurred())
		out = append(out, stalledReader{conn, bufio.NewReader(conn)})
		connectConn, br, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c1:443")
		g.Expect(err).NotTo(HaveOccurred())
		out = append(out, stalledReader{connectConn, br})
	}
	for _, s := range out {
		t.Cleanup(func() { _ = s.conn.Close() })
		_, err := fmt.Fprintf(s.conn, "GET /large/%d HTTP/1.1\r\nHost: c1\r\n\r\n", size)
		g.Expect(err).NotTo(HaveOccurred())
	}
	return out
}

// answeredMeanwhile has another user of c1 send requests one after the other on a gRPC tunnel, and reports whether
// they were all answered before konnectivity-client gives up on the stalled readers' connections (it closes one it
// has not read for 10 s, which would free a waiting proxy-server at last).
func answeredMeanwhile(g Gomega, f *fixture) {
	user, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = user.Close() }()
	reader := bufio.NewReader(user)
	answered := make(chan error, 1)
	go func() {
		for range 20 {
			if _, err := get(user, reader, "c1", "/meanwhile"); err != nil {
				answered <- err
				return
			}
		}
		answered <- nil
	}()
	g.Eventually(answered).WithTimeout(8*time.Second).Should(Receive(BeNil()), "the other user's requests were answered")
}

// Clients that ask for a large answer and stop reading share the agent stream with every other user of the cluster.
// Without a queue of their own, the agent's loop would wait on them (a gRPC client's flow-control window, the
// in-process window of the HTTP-CONNECT frontend) and every other user of the cluster on this replica with it.
func TestReadersThatStopDoNotHoldUpTheOtherUsersOfTheCluster(t *testing.T) {
	const stalled, size = 4, 8 << 20

	t.Run("this product's agent pauses their connections, and they lose nothing", func(t *testing.T) {
		g := NewWithT(t)
		f := startFixture(t, false, nil, func(o *Options) { o.FrontendQueueBytes = 64 << 10 })
		productAgent(t, f, largeTarget(t))
		pausesBefore, cutBefore := testutil.ToFloat64(pausedConnections), testutil.ToFloat64(readersCut)
		readers := stalledReaders(t, f, stalled, size)
		g.Eventually(func() float64 { return testutil.ToFloat64(pausedConnections) - pausesBefore }).WithTimeout(10*time.Second).
			Should(BeNumerically(">=", 2*stalled), "every stalled reader's connection was paused at the agent")

		answeredMeanwhile(g, f)

		for _, r := range readers {
			g.Expect(r.read(size)).To(Succeed(), "a reader that reads again gets its whole answer")
		}
		g.Expect(testutil.ToFloat64(readersCut)-cutBefore).To(BeZero(), "nobody was cut off")
	})

	t.Run("with an agent without flow control they lose their connections", func(t *testing.T) {
		g := NewWithT(t)
		f := startFixture(t, false, nil, func(o *Options) { o.FrontendQueueBytes = 64 << 10 })
		_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": largeTarget(t)})
		g.Expect(err).NotTo(HaveOccurred())
		cutBefore := testutil.ToFloat64(readersCut)
		stalledReaders(t, f, stalled, size)

		answeredMeanwhile(g, f)

		g.Eventually(func() float64 { return testutil.ToFloat64(readersCut) - cutBefore }).WithTimeout(10*time.Second).
			Should(BeNumerically(">=", 1), "readers that took nothing fell twice their queue behind and lost their connections")
	})
}
