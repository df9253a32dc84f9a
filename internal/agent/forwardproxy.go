package agent

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// ProxyFromEnvironment chooses the forward proxy for the proxy-server from HTTPS_PROXY, HTTP_PROXY and NO_PROXY (and
// their lower-case twins). The agent's only hub connection is TLS, so HTTPS_PROXY applies; HTTP_PROXY is the fallback
// when HTTPS_PROXY is unset, because a proxy configured only for "http" is still the way out. Errors never quote the
// variables, which may hold credentials.
//
// Unlike net/http, loopback addresses are not exempt by themselves: only NO_PROXY exempts a host. A pod never
// dials the hub on loopback, but a local environment whose hub listens on 127.0.0.1 must still be able to route the
// agent through its forward proxy.
func ProxyFromEnvironment() (func(*url.URL) (*url.URL, error), error) {
	cfg := httpproxy.FromEnvironment()
	if cfg.HTTPSProxy == "" {
		cfg.HTTPSProxy = cfg.HTTPProxy
	}
	if cfg.HTTPSProxy == "" {
		return nil, nil
	}
	if err := checkProxyURL(cfg.HTTPSProxy); err != nil {
		return nil, err
	}
	proxy, err := url.Parse(cfg.HTTPSProxy)
	if err != nil {
		return nil, err
	}
	noProxy := parseNoProxy(cfg.NoProxy)
	return func(target *url.URL) (*url.URL, error) {
		if noProxy.matches(target.Hostname(), target.Port()) {
			return nil, nil
		}
		return proxy, nil
	}, nil
}

// noProxy is a parsed NO_PROXY list, with net/http's grammar: "*", IP addresses, CIDR ranges, and host names that
// match themselves and their subdomains (".example.com" matches only subdomains); any entry may name a port.
type noProxy struct {
	all   bool
	ips   []net.IP
	nets  []*net.IPNet
	hosts []noProxyHost
}

type noProxyHost struct {
	name       string // lower case, without a leading dot
	subdomains bool   // only subdomains (written with a leading dot)
	port       string
}

func parseNoProxy(v string) noProxy {
	var n noProxy
	for _, entry := range strings.Split(v, ",") {
		entry = strings.ToLower(strings.TrimSpace(entry))
		switch entry {
		case "":
			continue
		case "*":
			n.all = true
			continue
		}
		if _, ipNet, err := net.ParseCIDR(entry); err == nil {
			n.nets = append(n.nets, ipNet)
			continue
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil {
			host, port = entry, ""
		}
		if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil {
			n.ips = append(n.ips, ip)
			continue
		}
		h := noProxyHost{name: strings.TrimPrefix(host, "."), subdomains: strings.HasPrefix(host, "."), port: port}
		if strings.HasPrefix(h.name, "*.") {
			h.name, h.subdomains = h.name[2:], true
		}
		n.hosts = append(n.hosts, h)
	}
	return n
}

func (n noProxy) matches(host, port string) bool {
	if n.all {
		return true
	}
	host = strings.ToLower(host)
	if ip := net.ParseIP(host); ip != nil {
		for _, e := range n.ips {
			if e.Equal(ip) {
				return true
			}
		}
		for _, e := range n.nets {
			if e.Contains(ip) {
				return true
			}
		}
		return false
	}
	for _, h := range n.hosts {
		if h.port != "" && h.port != port {
			continue
		}
		if (!h.subdomains && host == h.name) || strings.HasSuffix(host, "."+h.name) {
			return true
		}
	}
	return false
}

func checkProxyURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("the forward proxy URL (HTTPS_PROXY or HTTP_PROXY) is not scheme://host[:port]")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("the forward proxy URL (HTTPS_PROXY or HTTP_PROXY) must start with http:// or https://")
	}
	return nil
}

// ForwardProxyDial dials as the tunnel does: through an HTTP CONNECT tunnel of the forward proxy that proxy names
// for the address (an https proxy verified with roots, the proxy's own CA bundle), or directly with dial when it names
// none. What runs inside, TLS included, is end to end. The service-proxy reaches an OIDC issuer this way.
func ForwardProxyDial(proxy func(*url.URL) (*url.URL, error), dial func(ctx context.Context, network, addr string) (net.Conn, error),
	roots func() *x509.CertPool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &serverDialer{proxy: proxy, dial: dial, roots: roots}
	return func(ctx context.Context, _, addr string) (net.Conn, error) { return d.DialContext(ctx, addr) }
}

// serverDialer opens the byte stream gRPC runs its TLS over: straight to the proxy-server, or through an HTTP CONNECT
// tunnel of a forward proxy. Either way the mTLS session is end to end; the proxy only ever sees the CONNECT line.
type serverDialer struct {
	proxy func(*url.URL) (*url.URL, error)
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	// roots verify an https forward proxy and nothing else: the proxy's caBundle; nil (or a nil pool) is the system
	// roots. The proxy-server behind it is verified by the hub's CA alone, in the TLS that runs inside the tunnel.
	roots func() *x509.CertPool
}

func (d *serverDialer) DialContext(ctx context.Context, addr string) (net.Conn, error) {
	var proxyURL *url.URL
	if d.proxy != nil {
		u, err := d.proxy(&url.URL{Scheme: "https", Host: addr})
		if err != nil {
			return nil, errors.New("the forward proxy URL (HTTPS_PROXY or HTTP_PROXY) is not valid")
		}
		proxyURL = u
	}
	if proxyURL == nil {
		return d.dial(ctx, "tcp", addr)
	}
	conn, err := d.dialConnect(ctx, proxyURL, addr)
	if err != nil {
		return nil, fmt.Errorf("through forward proxy %s: %w", contract.RedactProxyURL(proxyURL.String()), err)
	}
	return conn, nil
}

func (d *serverDialer) dialConnect(ctx context.Context, proxyURL *url.URL, addr string) (net.Conn, error) {
	proxyAddr := proxyURL.Host
	if proxyURL.Port() == "" {
		port := "80"
		if proxyURL.Scheme == "https" {
			port = "443"
		}
		proxyAddr = net.JoinHostPort(proxyURL.Hostname(), port)
	}
	conn, err := d.dial(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, err
	}
	// Bound the proxy handshake by ctx; gRPC's own TLS handshake sets its own deadline afterwards.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	conn, err = d.handshake(ctx, conn, proxyURL, addr)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

func (d *serverDialer) handshake(ctx context.Context, conn net.Conn, proxyURL *url.URL, addr string) (net.Conn, error) {
	switch proxyURL.Scheme {
	case "http":
	case "https":
		var roots *x509.CertPool
		if d.roots != nil {
			roots = d.roots()
		}
		tc := tls.Client(conn, &tls.Config{ServerName: proxyURL.Hostname(), RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			return conn, fmt.Errorf("TLS to the forward proxy: %w", err)
		}
		conn = tc
	default:
		return conn, fmt.Errorf("unsupported forward proxy scheme %q", proxyURL.Scheme)
	}

	var req strings.Builder
	fmt.Fprintf(&req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cluster-proxy-agent\r\n", addr, addr)
	if u := proxyURL.User; u != nil {
		password, _ := u.Password()
		creds := base64.StdEncoding.EncodeToString([]byte(u.Username() + ":" + password))
		fmt.Fprintf(&req, "Proxy-Authorization: Basic %s\r\n", creds)
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return conn, fmt.Errorf("send CONNECT: %w", err)
	}

	br := bufio.NewReader(conn)
	// The body is not read: after a 200 it is the tunnel, and after an error the connection is closed.
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}) //nolint:bodyclose // see above
	if err != nil {
		return conn, fmt.Errorf("read the CONNECT response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return conn, fmt.Errorf("CONNECT %s refused: %s", addr, resp.Status)
	}
	if br.Buffered() > 0 {
		// The proxy-server speaks only after our ClientHello, but a proxy may still have sent more than its response.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn reads what the CONNECT response reader had already buffered before reading the connection again.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
