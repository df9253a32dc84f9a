package clusterproxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// client-go's upgrade round trippers (SPDY and websocket: exec, attach, port-forward) dial with rest.Config.Proxy and
// never with rest.Config.Dial. RESTConfig's Proxy answers each upgrade request with an HTTP CONNECT proxy of its own:
// a listener on 127.0.0.1 that serves one connection, asks for a random credential made for that request, and
// carries the connection through the cluster's tunnel. Other requests get no proxy and go through Dial.

const (
	// upgradeProxyAccept bounds the wait for the round tripper to connect to its proxy; it connects at once.
	upgradeProxyAccept = 30 * time.Second
	// upgradeProxyHeader bounds the reading of the CONNECT request.
	upgradeProxyHeader = 10 * time.Second
	// upgradeProxyUser is the user name of the proxy's credential; the password is what guards it.
	upgradeProxyUser = "tunnel"
)

// upgradeProxy is rest.Config.Proxy: a one-connection proxy into the tunnel for an upgrade request, none otherwise.
func (d *Dialer) upgradeProxy(req *http.Request) (*url.URL, error) {
	if req.Header.Get("Upgrade") == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cluster %s: a local proxy for the upgrade request: %w", d.cluster, err)
	}
	password := rand.Text()
	go d.serveOneConnect(req.Context(), ln, password)
	return &url.URL{Scheme: "http", User: url.UserPassword(upgradeProxyUser, password), Host: ln.Addr().String()}, nil
}

// serveOneConnect accepts one connection on ln, then closes ln, and serves that connection's CONNECT request through
// the tunnel. ln is closed unused when ctx ends or after upgradeProxyAccept.
func (d *Dialer) serveOneConnect(ctx context.Context, ln net.Listener, password string) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	timer := time.AfterFunc(upgradeProxyAccept, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	timer.Stop()
	ln.Close()
	if err != nil {
		return
	}
	tunnel, err := d.connect(ctx, conn, password)
	if err != nil {
		conn.Close()
		return
	}
	splice(conn, tunnel)
}

// connect reads the CONNECT request on conn, checks its credential, dials the tunnel and answers 200; on failure it
// answers the status that says why, naming the cluster.
func (d *Dialer) connect(ctx context.Context, conn net.Conn, password string) (net.Conn, error) {
	if err := conn.SetReadDeadline(time.Now().Add(upgradeProxyHeader)); err != nil {
		return nil, err
	}
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return nil, err
	}
	if req.Method != http.MethodConnect {
		return nil, answer(conn, http.StatusMethodNotAllowed, "only CONNECT")
	}
	if !proxyCredentialIs(req, password) {
		return nil, answer(conn, http.StatusProxyAuthRequired, "the credential of this upgrade request's proxy is missing or wrong")
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	tunnel, err := d.DialPort(ctx, KubeAPIServerPort)
	if err != nil {
		return nil, answer(conn, http.StatusBadGateway, err.Error())
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		tunnel.Close()
		return nil, err
	}
	return tunnel, nil
}

// proxyCredentialIs reports whether req's Proxy-Authorization is the basic credential of upgradeProxyUser and password.
func proxyCredentialIs(req *http.Request, password string) bool {
	// http.Request.BasicAuth reads Authorization; the proxy's credential comes as Proxy-Authorization.
	probe := &http.Request{Header: http.Header{"Authorization": req.Header.Values("Proxy-Authorization")}}
	user, pass, ok := probe.BasicAuth()
	return ok && user == upgradeProxyUser && subtle.ConstantTimeCompare([]byte(pass), []byte(password)) == 1
}

// answer writes a response of status whose reason is why: client-go's round trippers report the status line.
func answer(conn net.Conn, status int, why string) error {
	why = strings.Join(strings.Fields(why), " ")
	_, _ = fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status, why)
	return fmt.Errorf("%d %s", status, why)
}

// splice copies both ways between a and b until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}
