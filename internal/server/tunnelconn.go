package server

import (
	"io"
	"net"
	"os"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// tunnelConn is the connection end of an in-process tunnel. Unlike konnectivity-client's connection it has
// addresses and deadlines, Close does not wait for the agent, and a Read takes as many queued packets as fit.
type tunnelConn struct{ *tunnel }

var _ net.Conn = tunnelConn{}

// Read returns queued data; io.EOF once the agent closed the connection and everything was read.
func (c tunnelConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	for {
		if c.readDL.Expired() {
			return 0, os.ErrDeadlineExceeded
		}
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if c.in.len() > 0 {
			n := 0
			for n < len(p) && c.in.len() > 0 {
				head := c.in.peek()
				k := copy(p[n:], head[c.inOff:])
				n, c.inOff = n+k, c.inOff+k
				if c.inOff == len(head) {
					packet.ReleasePayload(c.in.pop())
					c.inOff = 0
				}
			}
			c.inBytes -= n
			c.inSince = c.policy.clock.Now()
			c.mu.Unlock()
			wake(c.inSpace)
			if fl := c.flow.Load(); fl != nil && fl.isPaused.Load() {
				fl.update(c.pauseWanted)
			}
			return n, nil
		}
		eof := c.eof
		c.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		select {
		case <-c.inReady:
		case <-c.closed:
		case <-c.readDL.Wait():
		}
	}
}

// Write sends p as DATA packets of at most maxDataPayload bytes. It waits while the proxy-server has
// inProcessSendQuota bytes of this connection still to take.
func (c tunnelConn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	n := 0
	for len(p) > 0 {
		if c.writeDL.Expired() {
			return n, os.ErrDeadlineExceeded
		}
		c.mu.Lock()
		switch {
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return n, err
		case c.eof || c.outEnd:
			c.mu.Unlock()
			return n, errTunnelClosed
		case c.outBytes >= inProcessSendQuota:
			c.mu.Unlock()
			select {
			case <-c.outSpace:
			case <-c.closed:
			case <-c.writeDL.Wait():
			}
			continue
		}
		k := min(len(p), maxDataPayload)
		if d := c.out.last().GetData(); d != nil && len(d.Data)+k <= maxDataPayload {
			// The router has not taken the last write's packet yet: this one joins it, so the agent's link carries
			// fewer, fuller packets while the writer is ahead.
			if cap(d.Data)-len(d.Data) < k {
				d.Data = append(make([]byte, 0, maxDataPayload), d.Data...)
			}
			d.Data = append(d.Data, p[:k]...)
		} else {
			// The caller may reuse p once Write returns; the packet keeps its own copy.
			c.out.push(&client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{
				Data: &client.Data{ConnectID: c.connID, Data: append([]byte(nil), p[:k]...)},
			}})
		}
		c.outBytes += k
		c.mu.Unlock()
		wake(c.outReady)
		p, n = p[k:], n+k
	}
	return n, nil
}

// Close drops unread data, sends CLOSE_REQ and returns without waiting for the agent's answer.
func (c tunnelConn) Close() error {
	c.shut(net.ErrClosed)
	return nil
}

func (c tunnelConn) LocalAddr() net.Addr  { return tunnelAddr("in-process") }
func (c tunnelConn) RemoteAddr() net.Addr { return c.addr }

func (c tunnelConn) SetDeadline(t time.Time) error {
	c.readDL.Set(t)
	c.writeDL.Set(t)
	return nil
}

func (c tunnelConn) SetReadDeadline(t time.Time) error  { c.readDL.Set(t); return nil }
func (c tunnelConn) SetWriteDeadline(t time.Time) error { c.writeDL.Set(t); return nil }

// tunnelAddr is the address a tunnel was dialed to, <cluster>:<port>.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "konnectivity" }
func (a tunnelAddr) String() string  { return string(a) }

// fifo is a queue that reuses its array.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && len(q.items) == cap(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, v)
}

func (q *fifo[T]) peek() T { return q.items[q.head] }

// last is the item pushed last and not popped yet; the zero T when there is none.
func (q *fifo[T]) last() T {
	var zero T
	if q.len() == 0 {
		return zero
	}
	return q.items[len(q.items)-1]
}

func (q *fifo[T]) pop() T {
	v := q.items[q.head]
	var zero T
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		if cap(q.items) > fifoKeep {
			q.items = nil // a burst of small packets does not pin a large array for the connection's life
		}
	}
	return v
}

// fifoKeep is the largest array an empty queue keeps.
const fifoKeep = 64

// reset empties the queue and lets go of its array.
func (q *fifo[T]) reset() { q.items, q.head = nil, 0 }
