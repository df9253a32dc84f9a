package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// An agent stream carries the connections of many clients, and konnectivity's protocol has no flow control per
// connection: while the proxy-server waits for one client to take its data, the agent's other connections wait too.
// A frontend connection's data therefore waits in a queue of its own. When the queue holds FrontendQueueBytes:
//   - this product's agent is told to stop reading the connection's destination (packet.Pause), and to read it again
//     once the reader has taken half (packet.Resume); the agent's loop never waits for the reader, however slowly it
//     reads, and what was on its way when the agent paused is queued;
//   - an agent that does not take Pause (ANP's) is waited for, as a gRPC stream's window would make it, but only
//     briefly for a reader that takes nothing (FrontendStallTimeout, counted from the moment it last took data); the
//     loop then goes on without it, and a reader still taking nothing when it has fallen twice the queue behind loses
//     its connection.
const (
	// DefaultFrontendQueueBytes is how many bytes of one connection wait for its reader before the agent's loop
	// waits for it (the in-process tunnel's window before queues were bounded this way).
	DefaultFrontendQueueBytes = 256 << 10
	// DefaultFrontendStallTimeout is the longest the agent's loop waits for a reader that takes nothing.
	DefaultFrontendStallTimeout = 250 * time.Millisecond
	// packetOverhead is what a packet that carries no data counts against its queue: a DIAL_RSP, a CLOSE_RSP.
	packetOverhead = 64
	// flowSlack is how far past the queue a paused connection may go before it is closed: more than the agent can
	// have on its way (its stream's flow-control window) when it pauses, so only an agent that ignores Pause reaches it.
	flowSlack = 32 << 20
)

// errReaderStalled ends a connection whose reader fell too far behind.
var errReaderStalled = errors.New("the connection's reader stopped taking data and fell too far behind; the proxy-server closed it")

// queuePolicy bounds the data that waits for one frontend connection's reader.
type queuePolicy struct {
	// bytes is how much may wait before the agent's loop waits for the reader; twice as much closes the connection
	// of a reader that takes nothing.
	bytes int
	// stall is the longest the agent's loop waits for a reader that takes nothing.
	stall time.Duration
	clock clock.Clock
}

func newQueuePolicy(bytes int, stall time.Duration, clk clock.Clock) queuePolicy {
	if bytes <= 0 {
		bytes = DefaultFrontendQueueBytes
	}
	if stall <= 0 {
		stall = DefaultFrontendStallTimeout
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return queuePolicy{bytes: bytes, stall: stall, clock: clk}
}

// verdict is what becomes of data offered to a queue.
type verdict int

const (
	queueIt verdict = iota // take it now
	waitFor                // wait for the reader, at most the duration decide returns, and ask again
	cutOff                 // close the connection
)

// decide says what to do with n more bytes offered to a queue that holds queued bytes and whose reader last took
// data (or was first given data to take) at since. Data that needs no answer from the reader (wait false: a packet
// the frontend's own loop sends) is never waited for.
//
// pausable says the connection's agent takes Pause. A full queue is then waited for until pauseWait after the reader
// last took data: long enough for a reader that keeps up, whose backpressure costs nothing, and short enough not to
// hold up the agent's other connections (readers that stop together are waited for together); then the data is queued
// past the bound and the agent is told to pause (paused), and only an agent that ignores Pause fills the queue
// flowSlack past the bound.
func (p queuePolicy) decide(queued, n int, since time.Time, wait, pausable, paused bool) (verdict, time.Duration) {
	if queued == 0 || queued+n <= p.bytes {
		return queueIt, 0
	}
	if pausable {
		switch {
		case queued+n > p.bytes+flowSlack:
			return cutOff, 0
		case wait && !paused:
			if idle := p.clock.Since(since); idle < pauseWait {
				return waitFor, pauseWait - idle
			}
		}
		return queueIt, 0
	}
	if idle := p.clock.Since(since); wait && idle < p.stall {
		return waitFor, p.stall - idle
	}
	if queued+n <= 2*p.bytes {
		return queueIt, 0 // the reader stalled: go on without it, up to the queue again
	}
	return cutOff, 0
}

// pauseWait is how long after its reader last took data the agent's loop waits for a full queue whose agent can pause
// the connection. A reader that keeps up takes a packet within microseconds, but on a busy machine it may not run
// for milliseconds; every pause costs a round trip to the agent before data flows again.
const pauseWait = 50 * time.Millisecond

// flow pauses and resumes the agent's reading of one connection's destination (packet.Pause), for a queue whose
// agent takes it.
type flow struct {
	send   func(*client.Packet) error // to the agent stream
	connID int64
	// mu orders the agent's packets: a Pause and the Resume after it reach the agent in the order their decisions
	// were made. paused is what the agent was told last; isPaused mirrors it for a look without mu.
	mu       sync.Mutex
	paused   bool
	isPaused atomic.Bool
}

// update tells the agent to pause or resume when want, asked under mu with what the agent was told last, says so.
// Every change of a queue that crosses a bound is followed by an update, and each update asks want afresh, so the
// last one leaves the agent told what the queue's latest state says.
func (f *flow) update(want func(paused bool) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := want(f.paused)
	if next == f.paused {
		return
	}
	f.paused = next
	f.isPaused.Store(next)
	pkt := packet.Resume(f.connID)
	if next {
		pkt = packet.Pause(f.connID)
		pausedConnections.Inc()
	}
	_ = f.send(pkt)
}

// shouldPause is the hysteresis of a queue of queued bytes whose agent takes Pause: pause once it runs past the
// bound, resume once the reader has taken it down to half.
func (p queuePolicy) shouldPause(paused bool, queued int) bool {
	if paused {
		return queued > p.bytes/2
	}
	return queued > p.bytes
}

// readerWait is the agent's loop waiting for a frontend connection's reader, as the policy said (decide's wait): d at
// most, less once the reader takes from the queue (space) or the queue ends (closed). One timer serves the waits of a
// packet; stop releases it.
type readerWait struct {
	clock clock.Clock
	timer clock.Timer
}

func (w *readerWait) wait(d time.Duration, space, closed <-chan struct{}) {
	stallWaits.Inc()
	if w.timer == nil {
		w.timer = w.clock.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-space:
	case <-closed:
	case <-w.timer.C():
	}
}

func (w *readerWait) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// outbox is a gRPC frontend stream's sending side: the router's loops queue packets, and the stream's handler
// goroutine sends them (run), so that no loop ever waits on the client's flow-control window longer than the policy
// lets it.
type outbox struct {
	stream packetStream
	policy queuePolicy
	flow   atomic.Pointer[flow] // set once the connection is up, when its agent takes Pause

	mu    sync.Mutex
	queue fifo[*client.Packet]
	bytes int       // counted against the policy, the packet being sent included
	since time.Time // when the stream last took a packet, or was first given one to take
	err   error     // set once: the stream failed, the reader was cut off, or the router is done with it
	// finishing: the router is done with the stream; run sends what is queued and returns.
	finishing bool
	ready     chan struct{}
	space     chan struct{}
	closed    chan struct{} // closed with err
}

// queuedSize is what pkt counts against its queue.
func queuedSize(pkt *client.Packet) int {
	return packetOverhead + len(pkt.GetData().GetData())
}

func newOutbox(stream packetStream, policy queuePolicy) *outbox {
	return &outbox{stream: stream, policy: policy, ready: make(chan struct{}, 1), space: make(chan struct{}, 1),
		closed: make(chan struct{})}
}

var _ packetStream = (*outbox)(nil)

// errOutboxDone is the outbox's error once the router finished with the stream.
var errOutboxDone = errors.New("the frontend stream is done")

func (o *outbox) Recv() (*client.Packet, error) { return o.stream.Recv() }

func (o *outbox) setFlow(f *flow) { o.flow.Store(f) }

// pauseWanted is flow.update's question for this queue.
func (o *outbox) pauseWanted(paused bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.policy.shouldPause(paused, o.bytes)
}

// Send queues pkt. For DATA it may wait for the reader as the policy says; it fails once the stream has failed or its
// reader was cut off.
func (o *outbox) Send(pkt *client.Packet) error {
	n := queuedSize(pkt)
	wait := readerWait{clock: o.policy.clock}
	defer wait.stop()
	o.mu.Lock()
	for {
		if o.err != nil {
			err := o.err
			o.mu.Unlock()
			return err
		}
		fl := o.flow.Load()
		v, d := o.policy.decide(o.bytes, n, o.since, pkt.Type == client.PacketType_DATA, fl != nil,
			fl != nil && fl.isPaused.Load())
		switch v {
		case queueIt:
			if o.bytes == 0 {
				o.since = o.policy.clock.Now()
			}
			o.queue.push(pkt)
			o.bytes += n
			full := o.bytes > o.policy.bytes
			o.mu.Unlock()
			wake(o.ready)
			if fl != nil && full && !fl.isPaused.Load() {
				fl.update(o.pauseWanted)
			}
			return nil
		case cutOff:
			readersCut.Inc()
			o.failLocked(errReaderStalled)
			o.mu.Unlock()
			return errReaderStalled
		}
		o.mu.Unlock()
		wait.wait(d, o.space, o.closed)
		o.mu.Lock()
	}
}

func (o *outbox) failLocked(err error) {
	if o.err != nil {
		return
	}
	o.err = err
	close(o.closed)
}

// finish tells run that the router is done with the stream: run sends what is queued and returns.
func (o *outbox) finish() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil && o.queue.len() == 0 {
		o.failLocked(errOutboxDone)
		return
	}
	o.finishing = true
	wake(o.ready)
}

// run sends the queued packets until finish and the queue is empty (nil), the stream fails, ctx ends, or the reader is
// cut off; the handler returns its error, which ends the stream at the client.
func (o *outbox) run(ctx context.Context) error {
	for {
		o.mu.Lock()
		for o.queue.len() == 0 && o.err == nil && !o.finishing {
			o.mu.Unlock()
			select {
			case <-o.ready:
			case <-ctx.Done():
				o.mu.Lock()
				o.failLocked(ctx.Err())
				o.mu.Unlock()
				return ctx.Err()
			}
			o.mu.Lock()
		}
		switch {
		case errors.Is(o.err, errReaderStalled):
			o.mu.Unlock()
			return status.Error(codes.ResourceExhausted, errReaderStalled.Error())
		case o.err != nil:
			err := o.err
			o.mu.Unlock()
			if errors.Is(err, errOutboxDone) {
				return nil
			}
			return err
		case o.queue.len() == 0: // finishing, and everything went out
			o.failLocked(errOutboxDone)
			o.mu.Unlock()
			return nil
		}
		pkt := o.queue.pop()
		o.mu.Unlock()
		err := o.stream.Send(pkt)
		o.mu.Lock()
		o.bytes -= queuedSize(pkt)
		o.since = o.policy.clock.Now()
		if err != nil {
			o.failLocked(err)
		}
		o.mu.Unlock()
		wake(o.space)
		if err != nil {
			return err
		}
		if fl := o.flow.Load(); fl != nil && fl.isPaused.Load() {
			fl.update(o.pauseWanted)
		}
	}
}
