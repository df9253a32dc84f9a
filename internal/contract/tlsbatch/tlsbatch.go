// Package tlsbatch sends the records of one large TLS write in one system call.
//
// crypto/tls writes every record (at most 16 KiB of payload) to its connection on its own. A 32 KiB write, the size
// gRPC flushes and the reverse proxies copy, costs two system calls and two TCP segments. A Conn sits between
// crypto/tls and the TCP connection: while a batch runs it keeps the records and writes them together when the batch
// ends. Writes outside a batch, and records from other goroutines (alerts, key updates), pass as before; everything
// leaves in the order crypto/tls wrote it.
package tlsbatch

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
)

// bufferSize holds the records of a 64 KiB write with their headers and AEAD tags; a batch that writes more sends
// its records in several system calls.
const bufferSize = 64<<10 + 1<<10

// RecordPayload is the most a TLS record carries: a write up to this size is one record, with nothing to batch.
const RecordPayload = 16 << 10

var buffers = sync.Pool{New: func() any { b := make([]byte, 0, bufferSize); return &b }}

// Conn is the connection beneath a crypto/tls connection. Its batch buffer is taken from a pool when a batch starts
// and given back when it ends, so an idle connection holds none.
type Conn struct {
	net.Conn

	mu      sync.Mutex // orders the writes to Conn and guards what follows
	batches int        // running batches; records are kept while it is above zero
	buf     *[]byte
}

// New returns c as the connection to give crypto/tls.
func New(c net.Conn) *Conn { return &Conn{Conn: c} }

// Write keeps p while a batch runs and writes it through otherwise.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches == 0 { // nothing is kept outside a batch
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = buffers.Get().(*[]byte)
	}
	if len(*c.buf)+len(p) > cap(*c.buf) {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > cap(*c.buf) {
			return c.Conn.Write(p)
		}
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// Batch runs write, which writes through the crypto/tls connection above c, and sends what it wrote before it
// returns. A nil Conn runs write alone.
func (c *Conn) Batch(write func() (int, error)) (int, error) {
	if c == nil {
		return write()
	}
	c.mu.Lock()
	c.batches++
	c.mu.Unlock()
	n, err := write()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches--
	if ferr := c.flushLocked(); err == nil {
		err = ferr
	}
	return n, err
}

// flushLocked writes the kept records and, once no batch runs, gives the buffer back.
func (c *Conn) flushLocked() error {
	if c.buf == nil {
		return nil
	}
	var err error
	if len(*c.buf) > 0 {
		_, err = c.Conn.Write(*c.buf)
		*c.buf = (*c.buf)[:0]
	}
	if c.batches == 0 {
		buffers.Put(c.buf)
		c.buf = nil
	}
	return err
}

// BatchedWrite writes p to w, which writes through the crypto/tls connection above c, in one batch when p spans more
// than one record. A nil Conn writes p to w alone.
func (c *Conn) BatchedWrite(w io.Writer, p []byte) (int, error) {
	if c == nil || len(p) <= RecordPayload {
		return w.Write(p)
	}
	return c.Batch(func() (int, error) { return w.Write(p) })
}

// listener accepts Conns.
type listener struct{ net.Listener }

// Listener returns l with every accepted connection a Conn; put crypto/tls's listener over it.
func Listener(l net.Listener) net.Listener { return listener{l} }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return New(c), nil
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext that keeps the Conn beneath each TLS connection for ForRequest.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if t, ok := c.(*tls.Conn); ok {
		if b, ok := t.NetConn().(*Conn); ok {
			return context.WithValue(ctx, connKey{}, b)
		}
	}
	return ctx
}

// ForRequest returns the Conn beneath the connection of an HTTP/1 request, whose handler writes the connection
// itself, or nil. HTTP/2 writes the connection from a goroutine of its own, which a batch in the handler must not
// hold up.
func ForRequest(r *http.Request) *Conn {
	if r.ProtoMajor != 1 {
		return nil
	}
	b, _ := r.Context().Value(connKey{}).(*Conn)
	return b
}
