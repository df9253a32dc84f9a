package agent

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/deadline"
)

// memListener hands in-process connections to an http.Server, so the service-proxy and the tunnel health port are
// reachable through the tunnel without a network port anybody else could connect to.
type memListener struct {
	name      memAddr // what it serves, its address
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newMemListener(name string) *memListener {
	return &memListener{name: memAddr(name), conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return l.name }

// DialContext returns the client end of a new connection whose server end the listener's Accept returns.
func (l *memListener) DialContext(ctx context.Context) (net.Conn, error) {
	client, server := newMemPipe()
	server.local = l.name
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, net.ErrClosed
	}
}

type memAddr string

func (a memAddr) Network() string { return "memory" }
func (a memAddr) String() string  { return string(a) }

// memPipeSize bounds the bytes buffered in each direction. Unlike net.Pipe, whose writes wait for the reader, a
// buffered pipe lets the service-proxy keep copying from its upstream while the tunnel sends the previous chunk, and
// lets the tunnel read up to a whole read buffer at once.
const memPipeSize = 256 << 10

// memChunk is the size of the pooled buffers a pipe direction holds its data in: up to memPipeSize/memChunk of them,
// and one more while the first is partly read.
const memChunk = 64 << 10

var memChunks = sync.Pool{New: func() any { b := make([]byte, 0, memChunk); return &b }}

// memConn is one end of an in-memory, buffered, full-duplex connection with deadlines, which http.Server needs.
type memConn struct {
	local     memAddr // the listener's name on the end it accepted, else "memory"
	in, out   *memBuffer
	readDL    deadline.Deadline
	writeDL   deadline.Deadline
	closeOnce sync.Once
}

func newMemPipe() (a, b *memConn) {
	x, y := newMemBuffer(), newMemBuffer()
	return &memConn{in: x, out: y, local: "memory"}, &memConn{in: y, out: x, local: "memory"}
}

func (c *memConn) Read(p []byte) (int, error)  { return c.in.read(p, &c.readDL) }
func (c *memConn) Write(p []byte) (int, error) { return c.out.write(p, &c.writeDL) }

func (c *memConn) Close() error {
	c.closeOnce.Do(func() {
		c.in.close()
		c.out.close()
	})
	return nil
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return memAddr("tunnel") }

func (c *memConn) SetDeadline(t time.Time) error {
	c.readDL.Set(t)
	c.writeDL.Set(t)
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error  { c.readDL.Set(t); return nil }
func (c *memConn) SetWriteDeadline(t time.Time) error { c.writeDL.Set(t); return nil }

// memBuffer is one direction of a pipe. Either end closing it ends the direction: the reader still gets the bytes
// already written, then EOF; writers get io.ErrClosedPipe.
type memBuffer struct {
	mu sync.Mutex
	// chunks hold the unread bytes, from (*chunks[0])[r:] on; each is a pooled memChunk buffer, handed back once read,
	// so an idle connection holds none.
	chunks   []*[]byte
	r        int
	unread   int
	closed   bool
	readable chan struct{} // one wake-up for the reader
	writable chan struct{} // one wake-up for the writer
	done     chan struct{} // closed with the direction, to wake everybody
}

func newMemBuffer() *memBuffer {
	return &memBuffer{readable: make(chan struct{}, 1), writable: make(chan struct{}, 1), done: make(chan struct{})}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (b *memBuffer) read(p []byte, dl *deadline.Deadline) (int, error) {
	for {
		if dl.Expired() {
			return 0, os.ErrDeadlineExceeded
		}
		b.mu.Lock()
		if b.unread > 0 {
			n := 0
			for n < len(p) && b.unread > 0 {
				head := b.chunks[0]
				k := copy(p[n:], (*head)[b.r:])
				n, b.r, b.unread = n+k, b.r+k, b.unread-k
				if b.r == len(*head) {
					b.release()
				}
			}
			b.mu.Unlock()
			wake(b.writable)
			return n, nil
		}
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		select {
		case <-b.readable:
		case <-b.done:
		case <-dl.Wait():
		}
	}
}

func (b *memBuffer) write(p []byte, dl *deadline.Deadline) (int, error) {
	n := 0
	for len(p) > 0 {
		if dl.Expired() {
			return n, os.ErrDeadlineExceeded
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return n, io.ErrClosedPipe
		}
		if free := memPipeSize - b.unread; free > 0 {
			if len(b.chunks) == 0 || len(*b.chunks[len(b.chunks)-1]) == memChunk {
				b.chunks = append(b.chunks, memChunks.Get().(*[]byte))
			}
			tail := b.chunks[len(b.chunks)-1]
			k := min(free, len(p), memChunk-len(*tail))
			*tail = append(*tail, p[:k]...)
			b.unread += k
			b.mu.Unlock()
			p, n = p[k:], n+k
			wake(b.readable)
			continue
		}
		b.mu.Unlock()
		select {
		case <-b.writable:
		case <-b.done:
		case <-dl.Wait():
		}
	}
	return n, nil
}

// release returns the first chunk, read to its end, to the pool; called with mu held.
func (b *memBuffer) release() {
	head := b.chunks[0]
	*head = (*head)[:0]
	memChunks.Put(head)
	k := copy(b.chunks, b.chunks[1:])
	b.chunks[k] = nil
	b.chunks, b.r = b.chunks[:k], 0
}

func (b *memBuffer) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
}
