package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentproto "sigs.k8s.io/apiserver-network-proxy/proto/agent"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/memtest"
)

func TestKubeAPIServerAddress(t *testing.T) {
	for host, want := range map[string]string{
		"https://10.96.0.1:443":            "10.96.0.1:443",
		"https://kubernetes.default.svc":   "kubernetes.default.svc:443",
		"http://127.0.0.1":                 "127.0.0.1:80",
		"127.0.0.1:6443":                   "127.0.0.1:6443",
		"https://[fd00::1]:6443/some/path": "[fd00::1]:6443",
	} {
		got, err := KubeAPIServerAddress(&rest.Config{Host: host})
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), host)
		NewWithT(t).Expect(got).To(Equal(want), host)
	}
	_, err := KubeAPIServerAddress(&rest.Config{Host: "https://"})
	NewWithT(t).Expect(err).To(HaveOccurred())
}

func TestNewChecksItsOptions(t *testing.T) {
	env := newEnv(t)
	for name, change := range map[string]func(*Options){
		"no host identifier":          func(o *Options) { o.Identifiers = "ipv4=10.0.0.1" },
		"server address without port": func(o *Options) { o.ServerAddress = serverName },
		"no agent ID":                 func(o *Options) { o.AgentID = "" },
		"service-proxy on 443":        func(o *Options) { o.ServiceProxyPort = 443 },
		"read buffer too large":       func(o *Options) { o.ReadBufferSize = 8 << 20 },
		"no kube-apiserver":           func(o *Options) { o.KubeAPIServer = "" },
	} {
		opts := env.options(t)
		change(&opts)
		_, err := New(opts)
		NewWithT(t).Expect(err).To(HaveOccurred(), name)
	}
	a, err := New(env.options(t))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(a.hosts).To(Equal(map[string]bool{"c1": true, "c1.ns": true}))
}

// packetRecorder is a tunnel's stream that keeps the payload sizes of the DATA packets sent on it.
type packetRecorder struct {
	agentproto.AgentService_ConnectClient
	sizes []int
}

func (r *packetRecorder) Send(pkt *client.Packet) error {
	if pkt.Type == client.PacketType_DATA {
		r.sizes = append(r.sizes, len(pkt.GetData().Data))
	}
	return nil
}

func TestAFullReadIsSentAsTwoWholePackets(t *testing.T) {
	env := newEnv(t)
	for name, size := range map[string]int{"the default": 0, "64 KiB": 64 << 10} {
		opts := env.options(t)
		opts.ReadBufferSize = size
		a, err := New(opts)
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), name)
		stream := &packetRecorder{}
		ctx, cancel := context.WithCancel(context.Background())
		tn := &tunnel{a: a, stream: stream, ctx: ctx, cancel: cancel, conns: map[int64]*endpoint{}}
		dest, far := newMemPipe()
		// A first small read that fills, then two full reads: the pipe holds all of it, so every read is full.
		_, err = far.Write(bulkBody[:smallRead+2*a.opts.ReadBufferSize])
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), name)
		_ = far.Close()
		tn.newEndpoint(dest).readLoop()
		cancel()
		p := maxPacketPayload
		NewWithT(t).Expect(stream.sizes).To(Equal([]int{smallRead, p, p, p, p}), name)
	}
}

func TestBackoffGrowsToItsCapWithJitter(t *testing.T) {
	g := NewWithT(t)
	b := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	g.Expect(b.next()).To(BeNumerically("~", 100*time.Millisecond, 20*time.Millisecond))
	g.Expect(b.next()).To(BeNumerically("~", 200*time.Millisecond, 40*time.Millisecond))
	for range 10 {
		b.next()
	}
	g.Expect(b.next()).To(BeNumerically("~", 4500*time.Millisecond, 500*time.Millisecond))
	b.reset()
	g.Expect(b.next()).To(BeNumerically("<=", 120*time.Millisecond))
}

func TestMemPipeCarriesBothWaysAndEnds(t *testing.T) {
	g := NewWithT(t)
	a, b := newMemPipe()
	go func() {
		_, _ = a.Write(bulkBody[:1<<20]) // more than the pipe holds: the writer waits for the reader
		_ = a.Close()
	}()
	got, err := io.ReadAll(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sha(got)).To(Equal(sha(bulkBody[:1<<20])))

	_, err = b.Write([]byte("x"))
	g.Expect(err).To(MatchError(io.ErrClosedPipe), "the peer is gone")
	g.Expect(b.Close()).To(Succeed())
	_, err = b.Write([]byte("x"))
	g.Expect(err).To(MatchError(io.ErrClosedPipe))
}

func TestMemPipeFillAndDrainCyclesReuseTheirChunks(t *testing.T) {
	g := NewWithT(t)
	a, b := newMemPipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	data := bulkBody[:memPipeSize]
	buf := make([]byte, 48<<10) // reads that straddle chunks
	cycle := func() {
		if n, err := a.Write(data); err != nil || n != len(data) {
			t.Fatalf("wrote %d bytes of a full pipe: %v", n, err)
		}
		for got := 0; got < len(data); {
			n, err := b.Read(buf)
			if err != nil || !bytes.Equal(buf[:n], data[got:got+n]) {
				t.Fatalf("read %d bytes at %d: %v, or not what was written", n, got, err)
			}
			got += n
		}
	}
	allocs := testing.AllocsPerRun(20, cycle)
	if memtest.PoolsReuse {
		g.Expect(allocs).To(BeZero(), "allocations per fill and drain of the pipe")
	}
}

func TestMemPipeDeadlines(t *testing.T) {
	g := NewWithT(t)
	a, b := newMemPipe()
	defer func() { _ = a.Close(); _ = b.Close() }()

	// A deadline in the past interrupts a blocked read, as http.Server does to stop its background read.
	done := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 1))
		done <- err
	}()
	g.Consistently(done).WithTimeout(50 * time.Millisecond).ShouldNot(Receive())
	g.Expect(b.SetReadDeadline(time.Unix(1, 0))).To(Succeed())
	var err error
	g.Eventually(done).Should(Receive(&err))
	g.Expect(errors.Is(err, os.ErrDeadlineExceeded)).To(BeTrue())

	// Cleared, reads work again; a future deadline fires by itself.
	g.Expect(b.SetReadDeadline(time.Time{})).To(Succeed())
	_, _ = a.Write([]byte("hi"))
	buf := make([]byte, 2)
	n, err := b.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf[:n])).To(Equal("hi"))
	g.Expect(b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))).To(Succeed())
	_, err = b.Read(buf)
	g.Expect(errors.Is(err, os.ErrDeadlineExceeded)).To(BeTrue())

	// A writer blocked on a full pipe is released by its deadline.
	g.Expect(a.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))).To(Succeed())
	_, err = a.Write(make([]byte, 2*memPipeSize))
	g.Expect(errors.Is(err, os.ErrDeadlineExceeded)).To(BeTrue())
}

func TestMemListenerHandsOutConnections(t *testing.T) {
	g := NewWithT(t)
	l := newMemListener("test")
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hello"))
			_ = c.Close()
		}
	}()
	c, err := l.DialContext(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	got, err := io.ReadAll(c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("hello"))

	g.Expect(l.Close()).To(Succeed())
	_, err = l.Accept()
	g.Expect(err).To(MatchError(net.ErrClosed))
	_, err = l.DialContext(context.Background())
	g.Expect(err).To(MatchError(net.ErrClosed))
}
