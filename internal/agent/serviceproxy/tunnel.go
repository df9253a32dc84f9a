package serviceproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

// serveServiceTunnel answers a CONNECT with a plain-http service's Cluster-Proxy-* headers. After the checks
// serveService makes, it connects to the service and carries bytes both ways until either end closes, so the
// user-server's requests reach the service as it wrote them and are not parsed here again. https services keep the
// per-request form: its transport verifies every new connection against the service CA in effect, which a connection
// carried for the tunnel's life would not.
func (p *proxy) serveServiceTunnel(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(proxyhttp.HeaderTunnel, proxyhttp.TunnelRefused)
	t, ok := p.allowedService(w, r)
	if !ok {
		return
	}
	if t.proto != "http" {
		proxyhttp.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("a service tunnel leads to plain-http services only, not %s", t.proto))
		return
	}
	host := t.url(p.domain).Host
	service, err := p.dial(r.Context(), "tcp", host)
	if err != nil {
		logger.Error(err, "Cannot open a service tunnel", "host", host)
		proxyhttp.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonInternalError,
			fmt.Sprintf("the service-proxy cannot reach the service: %v", err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = service.Close()
		logger.Error(err, "Cannot take over the connection of a service tunnel", "host", host)
		return
	}
	// The user-server waits for this answer before it writes, so nothing it sent is left in brw.Reader; whatever is
	// goes to the service first all the same.
	_, _ = fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\n%s: %s\r\n\r\n", proxyhttp.HeaderTunnel, host)
	if err := brw.Flush(); err != nil {
		_ = conn.Close()
		_ = service.Close()
		return
	}
	p.splice(conn, brw.Reader, service)
}

// splice copies from the tunnel (read through its buffered reader) to the service and back until either direction
// ends, then closes both connections: a service that closes its connection ends the tunnel, and so does a user-server
// that drops its kept-alive one.
func (p *proxy) splice(tunnel net.Conn, fromTunnel *bufio.Reader, service net.Conn) {
	var once sync.Once
	closeBoth := func() {
		_ = tunnel.Close()
		_ = service.Close()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		p.copy(service, fromTunnel)
		once.Do(closeBoth)
	})
	p.copy(tunnel, service)
	once.Do(closeBoth)
	wg.Wait()
}

// copy is io.Copy with a pooled buffer; the wrappers keep net.TCPConn's ReadFrom, which brings a buffer of its own,
// out of the way.
func (p *proxy) copy(dst io.Writer, src io.Reader) {
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	_, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) {
		logger.V(4).Info("A service tunnel ended", "err", err)
	}
}
