//go:build bench

package dataplane

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsbatch"
)

// startLinks is the full path's links with nothing but copies between them, a floor under the full path's cost per
// byte: the client's TLS connection ends at a first relay (where the user-server is), which carries the bytes over a
// second TLS connection (the agent's link to the proxy-server) to a second relay (where the agent and service-proxy
// are), which carries them over plain TCP to the target. Each relay copies with 32 KiB buffers and writes each buffer's
// TLS records in one system call, as the full path does (package tlsbatch). It returns the first relay's address.
func startLinks(t *testing.T, p *pki, target string) string {
	t.Helper()
	servingTLS := func(name string) *tls.Config {
		pair, err := tls.LoadX509KeyPair(p.serving(t, name))
		must(t, err)
		return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	second := startRelay(t, servingTLS("links-second"), func() (net.Conn, error) { return net.Dial("tcp", target) })
	secondTLS := p.clientTLS(t, "", "")
	return startRelay(t, servingTLS("links-first"), func() (net.Conn, error) { return tls.Dial("tcp", second, secondTLS) })
}

// startRelay accepts TLS connections on 127.0.0.1 and carries each one's bytes both ways to a connection from next,
// until either end closes. The listener and every connection end with the test.
func startRelay(t *testing.T, serving *tls.Config, next func() (net.Conn, error)) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ln := tls.NewListener(tlsbatch.Listener(raw), serving)
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			track(in, true)
			wg.Go(func() {
				defer track(in, false)
				defer in.Close()
				out, err := next()
				if err != nil {
					t.Errorf("relay: %v", err)
					return
				}
				track(out, true)
				defer track(out, false)
				relay(in, out)
			})
		}
	})
	return ln.Addr().String()
}

// relay carries bytes both ways and closes both connections once either direction ends. a is a TLS connection over
// a tlsbatch.Conn, towards the client: what comes from b is gathered into writes of up to 32 KiB, each one batch, as
// the full path writes a 32 KiB DATA packet in one. (A TLS connection's read returns one record, 16 KiB at most.)
func relay(a, b net.Conn) {
	under := a.(*tls.Conn).NetConn().(*tlsbatch.Conn)
	toA := writerFunc(func(p []byte) (int, error) { return under.BatchedWrite(a, p) })
	var once sync.Once
	closeBoth := func() { once.Do(func() { _ = a.Close(); _ = b.Close() }) }
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 32<<10)
		_, _ = io.CopyBuffer(struct{ io.Writer }{b}, struct{ io.Reader }{a}, buf) // either end closing ends it
		closeBoth()
	})
	gather(toA, b, closeBoth)
	closeBoth()
	wg.Wait()
}

// gather copies src to dst until src ends. One goroutine reads into 16 KiB buffers; this one writes what has
// arrived by then, up to 32 KiB, in one write. A failed write calls stop, which must end src.
func gather(dst io.Writer, src io.Reader, stop func()) {
	const chunk = 16 << 10
	chunks, free := make(chan []byte, 4), make(chan []byte, 6)
	for range cap(free) {
		free <- make([]byte, chunk)
	}
	go func() {
		defer close(chunks)
		for {
			buf := <-free
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			} else {
				free <- buf
			}
			if err != nil {
				return
			}
		}
	}()
	out := make([]byte, 0, 2*chunk)
	failed := false
	for c := range chunks {
		out = append(out[:0], c...)
		free <- c[:chunk]
		for more := true; more && len(out) <= chunk; {
			select {
			case c, ok := <-chunks:
				if more = ok; ok {
					out = append(out, c...)
					free <- c[:chunk]
				}
			default:
				more = false
			}
		}
		if _, err := dst.Write(out); err != nil && !failed {
			failed = true
			stop()
		}
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
