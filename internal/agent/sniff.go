package agent

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// tlsRecordHandshake is the first byte of every TLS connection (a handshake record holding the ClientHello); no
// HTTP request line starts with it.
const tlsRecordHandshake = 0x16

// sniffTimeout bounds the wait for a connection's first byte, as the service-proxy's ReadHeaderTimeout bounds the
// rest of the request line.
const sniffTimeout = time.Minute

// sniffListener serves one port in plain HTTP and in TLS: a connection that opens with a TLS handshake is handed out
// as a *tls.Conn (http.Server then runs the handshake and fills Request.TLS), any other as it came. The service-proxy
// needs both: the hub's impersonator proves itself with a client certificate, other callers speak plain HTTP inside
// the tunnel, which is already mTLS between the proxy-server and this agent.
type sniffListener struct {
	inner  net.Listener
	config *tls.Config
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once

	mu  sync.Mutex
	err error // why inner stopped accepting
}

func newSniffListener(inner net.Listener, config *tls.Config) *sniffListener {
	l := &sniffListener{inner: inner, config: config, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *sniffListener) acceptLoop() {
	for {
		c, err := l.inner.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			_ = l.Close()
			return
		}
		// Each connection is read on its own: a caller that sends nothing must not hold up the others.
		go l.classify(c)
	}
}

func (l *sniffListener) classify(c net.Conn) {
	first := make([]byte, 1)
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	n, err := c.Read(first)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || n == 0 {
		_ = c.Close()
		return
	}
	var out net.Conn = &prefixedConn{Conn: c, prefix: first}
	if first[0] == tlsRecordHandshake {
		out = tls.Server(out, l.config)
	}
	select {
	case l.conns <- out:
	case <-l.done:
		_ = out.Close()
	}
}

func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *sniffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.inner.Close()
}

func (l *sniffListener) Addr() net.Addr { return l.inner.Addr() }

// prefixedConn gives back the bytes read to classify the connection before the rest.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite keeps half-close working for the upgraded connections the service-proxy hijacks.
func (c *prefixedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
