package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/deadline"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// The in-process frontend. A connection the user-server dials is itself a frontend stream that the router serves:
// packets pass between the router and the connection as Go values, with no protobuf encoding, HTTP/2 framing,
// in-memory socket or client-side goroutine, and the packet protocol is konnectivity-client's (DIAL_REQ, DIAL_RSP or
// DIAL_CLS, DATA both ways, CLOSE_REQ and CLOSE_RSP).
const (
	// inProcessSendQuota bounds the bytes written to a connection that the proxy-server has not taken yet (a gRPC
	// stream's write quota is 64 KiB too).
	inProcessSendQuota = 64 << 10
	// maxDataPayload is the most one DATA packet from a connection carries: the proxy-server encodes it for the agent,
	// and gRPC's buffer pools jump from 32 KiB to 1 MiB buffers (see internal/agent).
	maxDataPayload = 32<<10 - 64
	// inProcessCloseTimeout is how long a closed connection's stream waits for the agent's CLOSE_RSP before it ends
	// anyway (konnectivity-client's CloseTimeout).
	inProcessCloseTimeout = 10 * time.Second
	// inProcessDialTimeout bounds a dial whose context has no deadline (konnectivity-client's backstop).
	inProcessDialTimeout = 30 * time.Second
	// inProcessRedials is how many times a dial is made again because the agent stream it was sent to ended before
	// the agent answered (errAgentStreamEnded).
	inProcessRedials = 2
)

var (
	errTunnelClosed   = errors.New("tunnel closed")
	errDialClosed     = errors.New("dial closed by the agent")
	errDialTimeout    = errors.New("no dial response in time")
	errServerStopping = errors.New("the proxy-server is shutting down")
)

// DialCluster opens a tunnel to <cluster>:<port> through the agent, in process. ctx bounds the dial only; the
// connection lives until either end closes it or the server shuts down.
func (s *Server) DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	conn, err := s.dial(ctx, net.JoinHostPort(cluster, strconv.Itoa(port)), &s.inProcess, s.tunnelCtx, false, nil)
	if err != nil {
		return nil, fmt.Errorf("dial cluster %s port %d: %w", cluster, port, err)
	}
	return conn, nil
}

// dial opens an in-process tunnel to address (<host>:<port>, the host an agent identifier), and dials again when the
// agent stream the dial went to ended before the agent answered. group counts the tunnel's stream while it runs (none
// when nil), the tunnel ends when until does (never when nil), and retire has a shutdown close it once it is idle
// (router.retireIdle). allow, when set, admits the cluster of the agent stream the dial goes to (frontendAccess).
func (s *Server) dial(ctx context.Context, address string, group *inProcessTunnels, until context.Context, retire bool,
	allow func(cluster string) error) (net.Conn, error) {
	for redials := 0; ; redials++ {
		conn, err := s.dialOnce(ctx, address, group, until, retire, allow)
		if errors.Is(err, errAgentStreamEnded) && redials < inProcessRedials {
			s.log.V(1).Info("The agent stream a dial was sent to ended before the agent answered; dialing again", "address", address)
			continue
		}
		return conn, err
	}
}

// dialOnce is one in-process tunnel's dial.
func (s *Server) dialOnce(ctx context.Context, address string, group *inProcessTunnels, until context.Context, retire bool,
	allow func(cluster string) error) (net.Conn, error) {
	if !group.add() {
		return nil, errServerStopping
	}
	t := newTunnel(address, s.log)
	t.policy = s.router.queue
	// The dial waits for a reconnecting agent while its caller does and the tunnel may run.
	pickCtx, endPick := context.WithCancel(ctx)
	stop := func() bool { return false }
	if until != nil {
		stop = context.AfterFunc(until, func() {
			endPick()
			t.abort()
		})
	}
	go func() {
		defer group.done()
		pick := s.router.awaiting(pickCtx)
		if allow != nil {
			pick = authorized(pick, allow)
		}
		err := s.router.serveFrontend(tunnelStream{t}, retire, pick)
		stop()
		endPick()
		t.handlerDone(err)
	}()
	return t.dial(ctx)
}

// inProcessTunnels counts the router's loops of in-process tunnels so that shutdown can wait for them. A nil group
// counts nothing and refuses nothing.
type inProcessTunnels struct {
	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup
	n       atomic.Int64
}

func (p *inProcessTunnels) add() bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.running.Add(1)
	p.n.Add(1)
	return true
}

func (p *inProcessTunnels) done() {
	if p == nil {
		return
	}
	p.n.Add(-1)
	p.running.Done()
}

// count is how many handlers are running.
func (p *inProcessTunnels) count() int64 { return p.n.Load() }

// stop refuses new tunnels and waits until the handlers of the others have returned or ctx ends.
func (p *inProcessTunnels) stop(ctx context.Context) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	finished := make(chan struct{})
	go func() {
		p.running.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
	}
}

// tunnel is the state of one in-process tunnel, shared by its two ends: tunnelStream, which the router serves, and
// tunnelConn, the net.Conn DialCluster returns.
type tunnel struct {
	addr   tunnelAddr
	random int64
	log    logr.Logger
	dialed chan *client.Packet // the one DIAL_RSP or DIAL_CLS
	ended  chan struct{}       // closed when the router's loop has returned

	// The inProcess*Timeout constants; tests shorten them.
	dialTimeout, closeTimeout time.Duration
	// policy bounds the data from the agent that waits to be read (see queuePolicy), and flow, set once the
	// connection is up when its agent takes packet.Pause, keeps it within the bound.
	policy queuePolicy
	flow   atomic.Pointer[flow]

	readMu, writeMu sync.Mutex // one Read and one Write at a time
	readDL, writeDL deadline.Deadline

	mu        sync.Mutex
	dialDone  bool  // the dial answer arrived, or the dial gave up
	connected bool  // the answer was a successful DIAL_RSP
	connID    int64 // from that DIAL_RSP
	// To the handler: the packets its Recv returns, and the DATA bytes among them.
	out      fifo[*client.Packet]
	outBytes int
	outEnd   bool // Recv returns io.EOF once out is empty: the stream is half-closed
	// From the handler: DATA not read yet, starting at in's first slice at inOff.
	in      fifo[[]byte]
	inOff   int
	inBytes int
	inSince time.Time // when the reader last took data, or was first given data to take
	eof     bool      // the agent closed the connection or the stream ended: Read returns io.EOF after in
	err     error     // the connection was closed here (net.ErrClosed) or broken; Read and Write return it
	// closeWait ends the stream if the agent's CLOSE_RSP does not come.
	closeWait *time.Timer

	outReady, outSpace, inReady, inSpace chan struct{} // wake-ups, one pending at most
	closed                               chan struct{} // closed with err: wakes every waiter
}

func newTunnel(address string, log logr.Logger) *tunnel {
	return &tunnel{
		addr:         tunnelAddr(address),
		random:       rand.Int64(), //nolint:gosec // a dial ID, not a secret
		log:          log,
		dialed:       make(chan *client.Packet, 1),
		ended:        make(chan struct{}),
		dialTimeout:  inProcessDialTimeout,
		closeTimeout: inProcessCloseTimeout,
		policy:       newQueuePolicy(0, 0, nil),
		outReady:     make(chan struct{}, 1),
		outSpace:     make(chan struct{}, 1),
		inReady:      make(chan struct{}, 1),
		inSpace:      make(chan struct{}, 1),
		closed:       make(chan struct{}),
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// dial sends the DIAL_REQ and waits for the answer. When it gives up it sends DIAL_CLS and ends the stream, as
// konnectivity-client does.
func (t *tunnel) dial(ctx context.Context) (net.Conn, error) {
	t.send(packet.DialRequest(string(t.addr), t.random))
	backstop := time.NewTimer(t.dialTimeout)
	defer backstop.Stop()
	var failure error
	select {
	case pkt := <-t.dialed:
		return t.answer(pkt)
	case <-ctx.Done():
		failure = ctx.Err()
	case <-backstop.C:
		failure = errDialTimeout
	case <-t.ended:
		failure = errTunnelClosed
	}
	t.mu.Lock()
	answered := t.dialDone
	t.dialDone = true
	t.mu.Unlock()
	if answered { // the answer came meanwhile
		conn, err := t.answer(<-t.dialed)
		if errors.Is(failure, errTunnelClosed) {
			// The stream did not end under the dial but after its answer: the router ends the stream of a dial it
			// refuses right after the refusal, which is the error to return.
			return conn, err
		}
		if err == nil {
			_ = conn.Close()
		}
		return nil, failure
	}
	t.send(packet.CloseDial(t.random))
	t.endStream()
	return nil, failure
}

// answer turns the dial's answer into the connection or an error.
func (t *tunnel) answer(pkt *client.Packet) (net.Conn, error) {
	if rsp := pkt.GetDialResponse(); rsp != nil && rsp.Error == "" {
		return tunnelConn{t}, nil
	}
	t.endStream()
	if rsp := pkt.GetDialResponse(); rsp != nil {
		for _, known := range []error{errAgentStreamEnded, errNoAgent, errAgentBusy} { // the router's own answers
			if rsp.Error == known.Error() {
				return nil, known
			}
		}
		if refused := refusalOf(rsp.Error); refused != nil {
			return nil, refused
		}
		return nil, errors.New(rsp.Error)
	}
	return nil, errDialClosed
}

// send queues a packet for the handler regardless of the send quota; only DATA counts against it.
func (t *tunnel) send(pkt *client.Packet) {
	t.mu.Lock()
	if t.outEnd {
		t.mu.Unlock()
		return
	}
	t.out.push(pkt)
	t.mu.Unlock()
	wake(t.outReady)
}

// endStream half-closes the stream: the handler reads what is queued, then io.EOF, and returns.
func (t *tunnel) endStream() {
	t.mu.Lock()
	t.outEnd = true
	if t.closeWait != nil {
		t.closeWait.Stop()
	}
	t.mu.Unlock()
	wake(t.outReady)
}

// shut closes the connection here with err: unread data is dropped at once, waiters wake, and the agent is sent
// CLOSE_REQ; the stream ends when its CLOSE_RSP arrives, or after inProcessCloseTimeout. Only the first call counts.
func (t *tunnel) shut(err error) {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	t.err = err
	for t.in.len() > 0 {
		packet.ReleasePayload(t.in.pop())
	}
	t.in.reset()
	t.inOff, t.inBytes = 0, 0
	close(t.closed)
	if t.eof || t.outEnd {
		t.mu.Unlock()
		return
	}
	t.out.push(packet.CloseRequest(t.connID))
	t.closeWait = time.AfterFunc(t.closeTimeout, t.endStream)
	t.mu.Unlock()
	wake(t.outReady)
}

// abort ends the tunnel when the server shuts down: the dial fails, or the connection closes, and the stream ends
// without waiting for the agent.
func (t *tunnel) abort() {
	t.mu.Lock()
	connected := t.connected
	t.mu.Unlock()
	if connected {
		t.shut(net.ErrClosed)
	}
	t.endStream()
}

// handlerDone runs when the router's loop has returned: the stream is over, and so is the connection.
func (t *tunnel) handlerDone(err error) {
	if err != nil {
		t.log.V(2).Info("In-process tunnel stream ended", "address", string(t.addr), "err", err)
	}
	t.mu.Lock()
	t.eof, t.outEnd = true, true
	t.out.reset()
	t.outBytes = 0
	if t.closeWait != nil {
		t.closeWait.Stop()
	}
	t.mu.Unlock()
	close(t.ended)
	wake(t.inReady)
	wake(t.outSpace)
}

// tunnelStream is the tunnel as the router sees it: a frontend stream.
type tunnelStream struct{ *tunnel }

func (t *tunnel) setFlow(f *flow) { t.flow.Store(f) }

// pauseWanted is flow.update's question for this tunnel's queue.
func (t *tunnel) pauseWanted(paused bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.policy.shouldPause(paused, t.inBytes)
}

var _ packetStream = tunnelStream{}

// Recv returns the next packet from the connection; io.EOF once the stream is half-closed and drained.
func (s tunnelStream) Recv() (*client.Packet, error) {
	for {
		s.mu.Lock()
		if s.out.len() > 0 {
			pkt := s.out.pop()
			if d := pkt.GetData(); d != nil {
				s.outBytes -= len(d.Data)
			}
			s.mu.Unlock()
			wake(s.outSpace)
			return pkt, nil
		}
		end := s.outEnd
		s.mu.Unlock()
		if end {
			return nil, io.EOF
		}
		<-s.outReady
	}
}

// Send takes a packet for the connection. It returns an error only for a dial answer nobody waits for any more, so
// that the router closes that connection at the agent.
func (s tunnelStream) Send(pkt *client.Packet) error {
	switch pkt.Type {
	case client.PacketType_DIAL_RSP, client.PacketType_DIAL_CLS:
		return s.dialAnswer(pkt)
	case client.PacketType_DATA:
		s.deliver(pkt.GetData().GetData())
	case client.PacketType_CLOSE_RSP:
		s.mu.Lock()
		s.eof = true
		s.mu.Unlock()
		wake(s.inReady)
		wake(s.outSpace)
		s.endStream()
	default:
	}
	return nil
}

func (s tunnelStream) dialAnswer(pkt *client.Packet) error {
	if rsp := pkt.GetDialResponse(); rsp != nil && rsp.Random != s.random {
		return nil // not ours; the router matches answers to streams by the dial ID, so this does not happen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dialDone {
		return errTunnelClosed
	}
	s.dialDone = true
	if rsp := pkt.GetDialResponse(); rsp != nil && rsp.Error == "" {
		s.connected, s.connID = true, rsp.ConnectID
	}
	s.dialed <- pkt // never blocks: there is one answer
	return nil
}

// deliver queues DATA for the reader, waiting for it as the queue policy says: the agent's loop waits briefly for a
// reader that takes nothing, then goes on without it, and a reader that falls twice the queue behind loses its
// connection.
func (s tunnelStream) deliver(data []byte) {
	if len(data) == 0 {
		return // a Read must not return nothing without an error
	}
	wait := readerWait{clock: s.policy.clock}
	defer wait.stop()
	s.mu.Lock()
	for s.err == nil && !s.eof {
		fl := s.flow.Load()
		v, d := s.policy.decide(s.inBytes, len(data), s.inSince, true, fl != nil, fl != nil && fl.isPaused.Load())
		switch v {
		case queueIt:
			if s.inBytes == 0 {
				s.inSince = s.policy.clock.Now()
			}
			s.in.push(data)
			s.inBytes += len(data)
			full := s.inBytes > s.policy.bytes
			s.mu.Unlock()
			wake(s.inReady)
			if fl != nil && full && !fl.isPaused.Load() {
				fl.update(s.pauseWanted)
			}
			return
		case cutOff:
			s.mu.Unlock()
			readersCut.Inc()
			s.log.Info("Closing an in-process tunnel whose reader fell too far behind", "address", string(s.addr))
			s.shut(errReaderStalled)
			return
		}
		s.mu.Unlock()
		wait.wait(d, s.inSpace, s.closed)
		s.mu.Lock()
	}
	s.mu.Unlock() // nobody reads it any more
}
