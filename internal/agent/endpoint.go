package agent

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// smallRead is the first read size of every connection. Idle and chatty connections keep only this much; a read that
// fills it moves the connection to a pooled ReadBufferSize buffer until reads get small again, so a thousand idle
// connections do not hold a thousand large buffers.
const smallRead = 4 << 10

// endpoint is one connection from the agent to a destination, identified to the hub by its connection ID.
type endpoint struct {
	t    *tunnel
	id   int64
	conn net.Conn

	// Data from the hub waits in queue for the writer, so the tunnel's packet reader never waits on a destination
	// unless queued bytes reach QueueSize.
	mu     sync.Mutex
	queue  [][]byte
	spare  [][]byte
	queued int
	wake   chan struct{} // the writer has data
	room   chan struct{} // the writer took data

	done      chan struct{}
	closeOnce sync.Once

	// paused: the hub's reader of the connection fell behind, and the reader reads nothing more from the
	// destination until resumed is signalled (packet.Pause, packet.Resume).
	paused  atomic.Bool
	resumed chan struct{}

	// packets counts the DATA packets either way, and toHub says whether the last one went to the hub: a connection
	// quiet since an answer went to its client is between requests (tunnel.closePaused). seen is packets at the
	// previous closePaused pass, which alone uses it.
	packets atomic.Uint64
	toHub   atomic.Bool
	seen    uint64
}

func (t *tunnel) newEndpoint(conn net.Conn) *endpoint {
	return &endpoint{
		t:       t,
		id:      t.a.nextConnID.Add(1),
		conn:    conn,
		wake:    make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		resumed: make(chan struct{}, 1),
	}
}

func (e *endpoint) setPaused(paused bool) {
	e.paused.Store(paused)
	if !paused {
		wake(e.resumed)
	}
}

// awaitResumed returns once the connection is not paused, false when it closed or the tunnel ended meanwhile.
func (e *endpoint) awaitResumed() bool {
	for {
		if !e.paused.Load() {
			return true
		}
		select {
		case <-e.resumed:
		case <-e.done:
			return false
		case <-e.t.ctx.Done():
			return false
		}
	}
}

// close closes the destination connection; the reader then sees it end and answers CLOSE_RSP.
func (e *endpoint) close() {
	e.closeOnce.Do(func() {
		close(e.done)
		_ = e.conn.Close()
	})
}

// enqueue hands data to the writer. When QueueSize bytes already wait it holds the tunnel's reader, which is how
// the hub learns to slow down (there is no per-connection flow control in the protocol), but only while the
// destination keeps taking data: one that takes none for StallTimeout is closed.
func (e *endpoint) enqueue(data []byte) {
	e.carried(false)
	var stall *time.Timer
	defer func() {
		if stall != nil {
			stall.Stop()
		}
	}()
	e.mu.Lock()
	for e.queued >= e.t.a.opts.QueueSize {
		e.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(e.t.a.opts.StallTimeout)
		}
		select {
		case <-e.room:
			stall.Reset(e.t.a.opts.StallTimeout)
		case <-e.done:
			return
		case <-e.t.ctx.Done():
			return
		case <-stall.C:
			e.t.a.opts.Log.Info("Closing a connection whose destination takes no data", "connectionID", e.id,
				"queuedBytes", e.queuedBytes(), "stallTimeout", e.t.a.opts.StallTimeout.String())
			e.close()
			return
		}
		e.mu.Lock()
	}
	select {
	case <-e.done:
		e.mu.Unlock()
		return
	default:
	}
	e.queue = append(e.queue, data)
	e.queued += len(data)
	e.mu.Unlock()
	wake(e.wake)
}

// carried records a DATA packet of the connection, to the hub or from it.
func (e *endpoint) carried(toHub bool) {
	e.packets.Add(1)
	e.toHub.Store(toHub)
}

func (e *endpoint) queuedBytes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queued
}

// writeLoop writes queued data to the destination, everything queued at once (one writev on TCP).
func (e *endpoint) writeLoop() {
	defer e.t.wg.Done()
	var written [][]byte
	for {
		e.mu.Lock()
		for len(e.queue) == 0 {
			e.mu.Unlock()
			select {
			case <-e.wake:
			case <-e.done:
				return
			}
			e.mu.Lock()
		}
		batch := e.queue
		e.queue, e.spare = e.spare, nil
		e.mu.Unlock()

		// WriteTo empties the slices it is given; written keeps the payloads to hand back to the codec's pool.
		written = append(written[:0], batch...)
		bufs := net.Buffers(batch)
		n, err := bufs.WriteTo(e.conn)
		if err != nil {
			e.close()
			return
		}
		for _, b := range written {
			packet.ReleasePayload(b)
		}
		clear(written)
		clear(batch)
		e.mu.Lock()
		e.queued -= int(n)
		e.spare = batch[:0]
		e.mu.Unlock()
		wake(e.room)
	}
}

// readLoop sends what the destination writes as DATA packets until it ends or is closed, then answers CLOSE_RSP.
func (e *endpoint) readLoop() {
	defer e.finish()
	a := e.t.a
	size := a.opts.ReadBufferSize
	small := make([]byte, min(smallRead, size))
	var big *[]byte
	defer func() {
		if big != nil {
			a.bufs.Put(big)
		}
	}()
	// The packet is reused: Send has encoded it when it returns (the stream has no stats handler that keeps it).
	data := &client.Data{ConnectID: e.id}
	pkt := &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: data}}
	for {
		if !e.awaitResumed() {
			return
		}
		buf := small
		if big != nil {
			buf = *big
		}
		n, err := e.conn.Read(buf)
		for sent := 0; sent < n; {
			k := min(n-sent, a.packetSize)
			data.Data = buf[sent : sent+k]
			if e.t.send(pkt) != nil {
				return
			}
			sent += k
		}
		if n > 0 {
			a.metrics.bytesToHub.Add(float64(n))
			e.carried(true)
		}
		if err != nil {
			return
		}
		switch {
		case big == nil && n == len(small) && size > len(small):
			big = a.bufs.Get().(*[]byte)
		case big != nil && n < len(small):
			a.bufs.Put(big)
			big = nil
		}
	}
}

func (e *endpoint) finish() {
	e.close()
	e.t.remove(e)
	if e.t.ctx.Err() == nil {
		_ = e.t.send(packet.CloseResponse(e.id, ""))
	}
}
