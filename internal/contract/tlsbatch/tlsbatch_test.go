package tlsbatch

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

// recordingConn is the TCP connection beneath: it keeps what each Write got.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	fail   error
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, bytes.Clone(p))
	return c.Conn.Write(p)
}

// taken returns the writes since the last call.
func (c *recordingConn) taken() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes
	c.writes = nil
	return w
}

// pipe returns a Conn over a recordingConn and the other end of an in-memory connection, read into a buffer as it
// arrives; wait returns what arrived once n bytes have.
func pipe(t *testing.T) (*Conn, *recordingConn, func(n int) []byte) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	rec := &recordingConn{Conn: a}
	arrived := make(chan []byte, 1)
	go func() {
		got, _ := io.ReadAll(b)
		arrived <- got
	}()
	var got []byte
	wait := func(n int) []byte {
		if got == nil {
			_ = a.Close()
			got = <-arrived
		}
		Expect(got).To(HaveLen(n))
		return got
	}
	return New(rec), rec, wait
}

func TestWritesOutsideABatchPassStraightThrough(t *testing.T) {
	RegisterTestingT(t)
	c, rec, arrived := pipe(t)
	for _, s := range []string{"one", "two"} {
		_, err := c.Write([]byte(s))
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(rec.taken()).To(Equal([][]byte{[]byte("one"), []byte("two")}))
	Expect(arrived(6)).To(Equal([]byte("onetwo")))
}

func TestABatchSendsWhatWasWrittenDuringItInOneWriteWhenItEnds(t *testing.T) {
	RegisterTestingT(t)
	c, rec, arrived := pipe(t)
	n, err := c.Batch(func() (int, error) {
		_, _ = c.Write([]byte("a"))
		// A record from another goroutine (an alert, a key update) is kept in its place as well.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.Write([]byte("b"))
		}()
		<-done
		_, _ = c.Write([]byte("c"))
		Expect(rec.taken()).To(BeEmpty(), "nothing may leave before the batch ends")
		return 3, nil
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(n).To(Equal(3))
	Expect(rec.taken()).To(Equal([][]byte{[]byte("abc")}))
	Expect(c.buf).To(BeNil(), "an ended batch gives its buffer back")
	Expect(arrived(3)).To(Equal([]byte("abc")))
}

func TestABatchLargerThanItsBufferLeavesInOrder(t *testing.T) {
	RegisterTestingT(t)
	c, rec, arrived := pipe(t)
	var want []byte
	_, err := c.Batch(func() (int, error) {
		for i := range 5 {
			chunk := bytes.Repeat([]byte{byte('a' + i)}, 30<<10)
			want = append(want, chunk...)
			if _, err := c.Write(chunk); err != nil {
				return 0, err
			}
		}
		big := bytes.Repeat([]byte{'z'}, 2*bufferSize) // more than the buffer holds at all
		want = append(want, big...)
		return c.Write(big)
	})
	Expect(err).NotTo(HaveOccurred())
	writes := rec.taken()
	Expect(len(writes)).To(BeNumerically(">", 1))
	Expect(len(writes)).To(BeNumerically("<", 6), "the 30 KiB chunks leave two at a time")
	Expect(bytes.Join(writes, nil)).To(Equal(want))
	Expect(arrived(len(want))).To(Equal(want))
}

func TestABatchReturnsTheErrorOfSendingWhatItKept(t *testing.T) {
	RegisterTestingT(t)
	c, rec, _ := pipe(t)
	broken := errors.New("connection reset")
	_, err := c.Batch(func() (int, error) {
		_, _ = c.Write([]byte("kept"))
		rec.mu.Lock()
		rec.fail = broken
		rec.mu.Unlock()
		return 4, nil
	})
	Expect(err).To(MatchError(broken))
	Expect(c.buf).To(BeNil())
}

func TestANilConnRunsTheWriteAlone(t *testing.T) {
	RegisterTestingT(t)
	var c *Conn
	n, err := c.Batch(func() (int, error) { return 7, nil })
	Expect(n, err).To(Equal(7))
	var w bytes.Buffer
	big := bytes.Repeat([]byte{'x'}, 2*RecordPayload)
	n, err = c.BatchedWrite(&w, big)
	Expect(n, err).To(Equal(len(big)))
	Expect(w.Len()).To(Equal(len(big)))
}

// tlsPair returns a TLS client over a Conn over a recordingConn, connected over loopback TCP to a TLS server whose
// reads arrive on the returned channel.
func tlsPair(t *testing.T) (client *tls.Conn, under *Conn, rec *recordingConn, received func(n int) []byte) {
	t.Helper()
	serverCfg, clientCfg := tlsConfigs(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		b, _ := io.ReadAll(tls.Server(c, serverCfg))
		got <- b
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	Expect(err).NotTo(HaveOccurred())
	rec = &recordingConn{Conn: raw}
	under = New(rec)
	client = tls.Client(under, clientCfg)
	t.Cleanup(func() { _ = client.Close() })
	Expect(client.Handshake()).To(Succeed())
	rec.taken()
	return client, under, rec, func(n int) []byte {
		Expect(client.Close()).To(Succeed())
		var b []byte
		Eventually(got).WithTimeout(10 * time.Second).Should(Receive(&b))
		Expect(b).To(HaveLen(n))
		return b
	}
}

func tlsConfigs(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca, err := certs.NewCA("tlsbatch-test", time.Hour, time.Now())
	Expect(err).NotTo(HaveOccurred())
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "server", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Duration: time.Hour}, time.Now())
	Expect(err).NotTo(HaveOccurred())
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	Expect(err).NotTo(HaveOccurred())
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2", "http/1.1"}},
		// Full records from the first byte, as after the first 128 KiB of a connection.
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true}
}

func TestAWriteOfTwoRecordsLeavesInOneSystemCall(t *testing.T) {
	RegisterTestingT(t)
	client, under, rec, received := tlsPair(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), 2*RecordPayload/16)

	// What crypto/tls does alone: one write per record.
	_, err := client.Write(body)
	Expect(err).NotTo(HaveOccurred())
	Expect(len(rec.taken())).To(Equal(2))

	n, err := under.BatchedWrite(client, body)
	Expect(err).NotTo(HaveOccurred())
	Expect(n).To(Equal(len(body)))
	writes := rec.taken()
	Expect(len(writes)).To(Equal(1))
	Expect(len(writes[0])).To(BeNumerically(">", len(body)), "both records with their headers and tags")

	// One record's worth is not batched.
	_, err = under.BatchedWrite(client, body[:RecordPayload])
	Expect(err).NotTo(HaveOccurred())
	Expect(len(rec.taken())).To(Equal(1))

	Expect(received(5 * RecordPayload)).To(Equal(bytes.Join([][]byte{body, body, body[:RecordPayload]}, nil)))
}
