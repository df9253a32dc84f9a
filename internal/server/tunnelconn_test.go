package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// These tests play ANP's Proxy handler themselves, through the tunnel's stream end.

const testConnID = 7

// handlerEnd is the stream end of a tunnel with Recv results delivered on a channel, so tests can wait for them.
type handlerEnd struct {
	tunnelStream
	recv   chan *client.Packet // closed at io.EOF
	finish func()              // the handler returns
}

func newHandlerEnd(t *testing.T) *handlerEnd {
	t.Helper()
	tn := newTunnel("c1:443", testr.New(t))
	h := &handlerEnd{tunnelStream: tunnelStream{tn}, recv: make(chan *client.Packet, 64)}
	h.finish = sync.OnceFunc(func() { h.handlerDone(nil) })
	go func() {
		defer close(h.recv)
		for {
			pkt, err := h.Recv()
			if err != nil {
				return
			}
			h.recv <- pkt
		}
	}()
	t.Cleanup(h.finish)
	return h
}

func (h *handlerEnd) next(g Gomega) *client.Packet {
	var pkt *client.Packet
	g.Eventually(h.recv).Should(Receive(&pkt))
	g.Expect(pkt).NotTo(BeNil(), "the stream ended")
	return pkt
}

// unreadTunnel is a tunnel whose connection testConnID is up and whose stream nobody reads: the test takes its
// packets with Recv itself. The handler's end comes with the test's.
func unreadTunnel(t *testing.T) *tunnel {
	tn := newTunnel("c1:443", testr.New(t))
	tn.connID = testConnID
	t.Cleanup(func() { tn.handlerDone(nil) })
	return tn
}

// dialed answers the tunnel's DIAL_REQ with success and returns the connection.
func dialed(t *testing.T) (*handlerEnd, net.Conn) {
	t.Helper()
	g := NewWithT(t)
	h := newHandlerEnd(t)
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := h.dial(context.Background())
		done <- result{c, err}
	}()
	req := h.next(g)
	g.Expect(req.Type).To(Equal(client.PacketType_DIAL_REQ))
	g.Expect(req.GetDialRequest().Address).To(Equal("c1:443"))
	g.Expect(req.GetDialRequest().Protocol).To(Equal("tcp"))
	g.Expect(h.Send(dialResponse(req.GetDialRequest().Random, ""))).To(Succeed())
	var r result
	g.Eventually(done).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	return h, r.conn
}

func dialResponse(random int64, errText string) *client.Packet {
	if errText != "" {
		return packet.DialResponse(random, 0, errText)
	}
	return packet.DialResponse(random, testConnID, "")
}

func dataPacket(b []byte) *client.Packet {
	return &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: testConnID, Data: b}}}
}

func closeRSP() *client.Packet {
	return packet.CloseResponse(testConnID, "")
}

func TestTunnelDialGivenUpSendsDialCloseAndEndsTheStream(t *testing.T) {
	g := NewWithT(t)
	h := newHandlerEnd(t)
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() {
		_, err := h.dial(ctx)
		failed <- err
	}()
	req := h.next(g)
	cancel()
	g.Eventually(failed).Should(Receive(MatchError(context.Canceled)))
	cls := h.next(g)
	g.Expect(cls.Type).To(Equal(client.PacketType_DIAL_CLS))
	g.Expect(cls.GetCloseDial().Random).To(Equal(req.GetDialRequest().Random))
	g.Eventually(h.recv).Should(BeClosed(), "then io.EOF: the handler returns")
	// An answer that crosses the DIAL_CLS is refused, so that ANP closes the connection at the agent.
	g.Expect(h.Send(dialResponse(req.GetDialRequest().Random, ""))).To(MatchError(errTunnelClosed))
}

func TestTunnelDialRefusedOrClosedByTheAgent(t *testing.T) {
	for name, answer := range map[string]func(random int64) *client.Packet{
		"DIAL_RSP with an error": func(random int64) *client.Packet { return dialResponse(random, "connection refused") },
		"DIAL_CLS": func(random int64) *client.Packet {
			return packet.CloseDial(random)
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			h := newHandlerEnd(t)
			failed := make(chan error, 1)
			go func() {
				_, err := h.dial(context.Background())
				failed <- err
			}()
			req := h.next(g)
			g.Expect(h.Send(answer(req.GetDialRequest().Random))).To(Succeed())
			var err error
			g.Eventually(failed).Should(Receive(&err))
			g.Expect(err).To(Or(MatchError("connection refused"), MatchError(errDialClosed)))
			g.Eventually(h.recv).Should(BeClosed())
		})
	}
}

// The router ends a frontend stream whose dial it refused, right after its answer. A dial that finds both the answer
// and the stream's end returns the answer's error, not that the stream ended: a CONNECT to a cluster without an agent
// is 503 by that error, and was 502 when the end won.
func TestTunnelDialRefusedAsTheStreamEndsReturnsTheRefusal(t *testing.T) {
	g := NewWithT(t)
	for range 100 { // the dial picks at random between two ready channels
		tn := newTunnel("c1:443", testr.New(t))
		s := tunnelStream{tn}
		g.Expect(s.Send(packet.DialResponse(tn.random, 0, errNoAgent.Error()))).To(Succeed())
		tn.handlerDone(nil)
		_, err := tn.dial(context.Background())
		g.Expect(err).To(MatchError(errNoAgent))
	}
}

func TestTunnelDialTimesOutWithoutAnAnswer(t *testing.T) {
	g := NewWithT(t)
	h := newHandlerEnd(t)
	h.dialTimeout = 50 * time.Millisecond
	_, err := h.dial(context.Background())
	g.Expect(err).To(MatchError(errDialTimeout))
	g.Expect(h.next(g).Type).To(Equal(client.PacketType_DIAL_REQ))
	g.Expect(h.next(g).Type).To(Equal(client.PacketType_DIAL_CLS))
}

func TestTunnelWritesSplitIntoPacketsTheAgentHopEncodesCheaply(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	data := randomData(t, 2*maxDataPayload+5)
	n, err := conn.Write(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(len(data)))
	var got []byte
	for _, want := range []int{maxDataPayload, maxDataPayload, 5} {
		pkt := h.next(g)
		g.Expect(pkt.Type).To(Equal(client.PacketType_DATA))
		g.Expect(pkt.GetData().ConnectID).To(BeEquivalentTo(testConnID))
		g.Expect(pkt.GetData().Data).To(HaveLen(want))
		got = append(got, pkt.GetData().Data...)
	}
	g.Expect(bytes.Equal(got, data)).To(BeTrue())
}

// Writes the handler has not taken yet join the last queued packet up to maxDataPayload, so a writer ahead of the
// router (a client's body read a TLS record at a time) sends fuller packets; a packet taken is never changed.
func TestTunnelWritesQueuedBehindTheHandlerJoinOnePacket(t *testing.T) {
	g := NewWithT(t)
	tn := unreadTunnel(t)
	conn, s := tunnelConn{tn}, tunnelStream{tn}
	write := func(b []byte) {
		t.Helper()
		n, err := conn.Write(b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(len(b)))
	}
	recv := func() []byte {
		t.Helper()
		pkt, err := s.Recv()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pkt.Type).To(Equal(client.PacketType_DATA))
		g.Expect(pkt.GetData().ConnectID).To(BeEquivalentTo(testConnID))
		return pkt.GetData().Data
	}

	a, b := bytes.Repeat([]byte("a"), 100), bytes.Repeat([]byte("b"), 200)
	write(a)
	write(b)
	g.Expect(recv()).To(Equal(append(append([]byte(nil), a...), b...)), "two queued writes, one packet")

	big, small := randomData(t, maxDataPayload-10), randomData(t, 20)
	write(big)
	write(small)
	g.Expect(recv()).To(Equal(big), "a write that does not fit starts a packet of its own")
	taken := recv()
	g.Expect(taken).To(Equal(small))
	write([]byte("later"))
	g.Expect(recv()).To(Equal([]byte("later")), "the last packet was taken: a new one")
	g.Expect(taken).To(Equal(small), "a taken packet is not changed")
	tn.mu.Lock()
	defer tn.mu.Unlock()
	g.Expect(tn.outBytes).To(BeZero(), "the send quota counts joined bytes once")
}

func TestTunnelWriteWaitsForTheHandlerBeyondTheSendQuota(t *testing.T) {
	g := NewWithT(t)
	tn := unreadTunnel(t)
	conn, s := tunnelConn{tn}, tunnelStream{tn}
	written := make(chan error, 1)
	go func() {
		_, err := conn.Write(make([]byte, inProcessSendQuota+maxDataPayload))
		written <- err
	}()
	g.Consistently(written, 100*time.Millisecond).ShouldNot(Receive(), "nobody takes the packets")
	for range 3 {
		_, err := s.Recv()
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Eventually(written).Should(Receive(BeNil()))
}

func TestTunnelReadTakesSeveralPacketsAtOnceAndEndsWithEOF(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	for _, s := range []string{"one ", "two ", "three"} {
		g.Expect(h.Send(dataPacket([]byte(s)))).To(Succeed())
	}
	g.Expect(h.Send(closeRSP())).To(Succeed())
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf[:n])).To(Equal("one two three"))
	_, err = conn.Read(buf)
	g.Expect(err).To(MatchError(io.EOF))
	g.Eventually(h.recv).Should(BeClosed(), "the agent's CLOSE_RSP ends the stream")
	_, err = conn.Write([]byte("x"))
	g.Expect(err).To(MatchError(errTunnelClosed))
}

// The queue's tests run on a fake clock: the agent's loop waits for a reader only as long as the clock says, so no
// real-time pause of the machine can decide what they assert.
const testQueue = 256 << 10

func TestTunnelQueueHoldsUpTheAgentWhileTheReaderReads(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	h.policy = newQueuePolicy(testQueue, time.Second, clocktesting.NewFakeClock(time.Now()))
	const packet = 32 << 10
	packets := 4 * testQueue / packet // twice as much as a reader that took nothing could fall behind
	sent := make(chan int, packets)
	var want []byte
	for i := range packets {
		want = append(want, bytes.Repeat([]byte{byte(i)}, packet)...)
	}
	go func() {
		for i := range packets {
			_ = h.Send(dataPacket(want[i*packet : (i+1)*packet]))
			sent <- i
		}
	}()
	g.Eventually(sent).Should(HaveLen(testQueue / packet))
	g.Consistently(sent, 100*time.Millisecond).Should(HaveLen(testQueue/packet), "the queue is full, and the clock has not moved")
	got := make([]byte, len(want))
	_, err := io.ReadFull(conn, got)
	g.Expect(err).NotTo(HaveOccurred(), "a reader that reads is never cut off, however far the agent is ahead")
	g.Expect(bytes.Equal(got, want)).To(BeTrue())
	g.Eventually(sent).Should(HaveLen(packets))
}

func TestTunnelReaderThatTakesNothingHoldsTheAgentOnceThenLosesItsConnection(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	clk := clocktesting.NewFakeClock(time.Now())
	h.policy = newQueuePolicy(testQueue, time.Second, clk)
	const packet = 32 << 10
	for range testQueue / packet {
		g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed())
	}
	sent := make(chan error, 1)
	go func() { sent <- h.Send(dataPacket(make([]byte, packet))) }()
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the agent's loop waits for the reader")
	g.Consistently(sent, 50*time.Millisecond).ShouldNot(Receive())
	clk.Step(time.Second)
	g.Eventually(sent).Should(Receive(BeNil()), "after the stall timeout the loop goes on without the reader")
	for range testQueue/packet - 1 {
		g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed(), "queued without waiting: the reader stalled")
	}
	g.Expect(clk.HasWaiters()).To(BeFalse())
	h.mu.Lock()
	g.Expect(h.inBytes).To(Equal(2*testQueue), "nothing was let go yet")
	h.mu.Unlock()
	g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed(), "twice the queue behind: the connection is closed")
	req := h.next(g)
	g.Expect(req.Type).To(Equal(client.PacketType_CLOSE_REQ), "the agent is told to close the connection")
	g.Expect(req.GetCloseRequest().ConnectID).To(BeEquivalentTo(testConnID))
	_, err := conn.Read(make([]byte, 8))
	g.Expect(err).To(MatchError(errReaderStalled))
	h.mu.Lock()
	g.Expect(h.in.len()).To(BeZero(), "the queued data was let go at once")
	h.mu.Unlock()
	g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed(), "later data is dropped without waiting")
	g.Expect(clk.HasWaiters()).To(BeFalse())
}

func TestTunnelReaderThatReadsAgainIsWaitedForAgain(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	clk := clocktesting.NewFakeClock(time.Now())
	h.policy = newQueuePolicy(testQueue, time.Second, clk)
	const packet = 32 << 10
	for range testQueue / packet {
		g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed())
	}
	clk.Step(2 * time.Second) // the reader took nothing for longer than the stall timeout
	g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed(), "queued without waiting")
	_, err := io.ReadFull(conn, make([]byte, 2*packet))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Send(dataPacket(make([]byte, packet)))).To(Succeed())
	sent := make(chan error, 1)
	go func() { sent <- h.Send(dataPacket(make([]byte, packet))) }()
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the reader read: the loop waits for it again")
	_, err = io.ReadFull(conn, make([]byte, packet))
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(sent).Should(Receive(BeNil()))
}

func TestTunnelCloseWaitsForTheAgentsAnswerBeforeTheStreamEnds(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	// The agent answers only when the test says so, and the stream's own bound is an hour away: a Close that waited
	// for either would not return.
	h.closeTimeout = time.Hour
	g.Expect(h.Send(dataPacket(make([]byte, 100)))).To(Succeed())
	closed := make(chan error, 1)
	go func() { closed <- conn.Close() }()
	g.Eventually(closed).WithTimeout(10*time.Second).Should(Receive(BeNil()), "Close does not wait for the agent")
	h.mu.Lock()
	g.Expect(h.in.len()).To(BeZero(), "unread data was let go at once")
	h.mu.Unlock()
	req := h.next(g)
	g.Expect(req.Type).To(Equal(client.PacketType_CLOSE_REQ))
	g.Expect(req.GetCloseRequest().ConnectID).To(BeEquivalentTo(testConnID))
	g.Consistently(h.recv, 100*time.Millisecond).ShouldNot(BeClosed(), "the stream waits for CLOSE_RSP")
	g.Expect(h.Send(dataPacket([]byte("late")))).To(Succeed(), "data after Close is dropped")
	g.Expect(h.Send(closeRSP())).To(Succeed())
	g.Eventually(h.recv).Should(BeClosed())
}

func TestTunnelCloseEndsTheStreamWhenTheAgentDoesNotAnswer(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	h.closeTimeout = 50 * time.Millisecond
	g.Expect(conn.Close()).To(Succeed())
	g.Expect(h.next(g).Type).To(Equal(client.PacketType_CLOSE_REQ))
	g.Eventually(h.recv).WithTimeout(10*time.Second).Should(BeClosed(), "ended by the close timeout")
}

func TestTunnelEndedByTheHandlerEndsTheConnection(t *testing.T) {
	g := NewWithT(t)
	h, conn := dialed(t)
	g.Expect(h.Send(dataPacket([]byte("last")))).To(Succeed())
	h.finish()
	got, err := io.ReadAll(conn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("last"))
	_, err = conn.Write([]byte("x"))
	g.Expect(err).To(MatchError(errTunnelClosed))
}

func TestTunnelDeadlines(t *testing.T) {
	g := NewWithT(t)
	_, conn := dialed(t)
	g.Expect(conn.SetReadDeadline(time.Now().Add(30 * time.Millisecond))).To(Succeed())
	_, err := conn.Read(make([]byte, 8))
	g.Expect(err).To(MatchError(os.ErrDeadlineExceeded))
	var ne net.Error
	g.Expect(errors.As(err, &ne) && ne.Timeout()).To(BeTrue())
	g.Expect(conn.SetReadDeadline(time.Time{})).To(Succeed())

	// Nobody takes the packets, so a write beyond the send quota waits until its deadline.
	conn = tunnelConn{unreadTunnel(t)}
	g.Expect(conn.SetWriteDeadline(time.Now().Add(30 * time.Millisecond))).To(Succeed())
	n, err := conn.Write(make([]byte, 2*inProcessSendQuota))
	g.Expect(err).To(MatchError(os.ErrDeadlineExceeded))
	g.Expect(n).To(BeNumerically(">=", inProcessSendQuota))
	g.Expect(n).To(BeNumerically("<", 2*inProcessSendQuota))
}

func TestFIFOReusesItsArray(t *testing.T) {
	g := NewWithT(t)
	var q fifo[int]
	for i := range 4 {
		q.push(i)
	}
	g.Expect(q.pop()).To(Equal(0))
	g.Expect(q.pop()).To(Equal(1))
	capacity := cap(q.items)
	for i := 4; i < 4+capacity-2; i++ {
		q.push(i) // fills the room freed at the front before growing
	}
	g.Expect(cap(q.items)).To(Equal(capacity))
	for want := 2; q.len() > 0; want++ {
		g.Expect(q.pop()).To(Equal(want))
	}
	g.Expect(q.items).To(BeEmpty())
	g.Expect(cap(q.items)).To(Equal(capacity), "a small array is kept for the next packets")

	for i := range 10 * fifoKeep {
		q.push(i)
	}
	for q.len() > 0 {
		q.pop()
	}
	g.Expect(q.items).To(BeNil(), "a large one is let go once the queue is empty")
}
