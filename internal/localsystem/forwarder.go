package localsystem

import (
	"io"
	"net"
	"sync"
)

// forwarder relays every TCP connection it accepts to one address: the plain route of a cluster that reaches the hub
// directly, standing in for a router (the machine itself forwards nothing).
type forwarder struct {
	listener net.Listener
	to       string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func startForwarder(listen, to string) (*forwarder, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &forwarder{listener: l, to: to, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.listener.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			out, err := net.Dial("tcp", f.to)
			if err != nil {
				in.Close()
				return
			}
			if !f.track(in, out) {
				return
			}
			done := make(chan struct{}, 2)
			relay := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tcp, ok := dst.(*net.TCPConn); ok {
					_ = tcp.CloseWrite()
				}
				done <- struct{}{}
			}
			go relay(out, in)
			go relay(in, out)
			<-done
			<-done
			f.untrack(in, out)
		}()
	}
}

// track registers a relay's connections; false (and both closed) once the forwarder is closing.
func (f *forwarder) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) untrack(conns ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(f.conns, c)
	}
}

// Close stops accepting, ends every relayed connection and waits for the relays.
func (f *forwarder) Close() {
	f.listener.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}
