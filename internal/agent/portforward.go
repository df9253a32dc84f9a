package agent

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// PortForward opens the agent's connections to a proxy-server pod through the hub kube-apiserver's pods/portforward,
// for the PortForward entrypoint: the managed cluster needs a route to the hub's kube-apiserver only (directly or
// through its forward proxy, as the hub kubeconfig's client goes), not to the proxy-servers.
type PortForward struct {
	// Config reads the hub client configuration (the add-on's hub kubeconfig) for each connection, so a renewed or
	// newly issued kubeconfig is used.
	Config func() (*rest.Config, error)
	// Namespace and Selector find the proxy-server pods; Port is their agent port.
	Namespace, Selector string
	Port                int
}

// DialContext opens a connection to the agent port of a running proxy-server pod, picked at random as a Service would:
// one not Ready yet too, since a new replica turns Ready only once the agents have reached it. The address is not
// used; the agent still verifies the server's certificate against it.
func (p *PortForward) DialContext(ctx context.Context, _ string) (net.Conn, error) {
	cfg, err := p.Config()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pod, err := p.pick(ctx, client)
	if err != nil {
		return nil, err
	}
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(pod).SubResource("portforward").URL()
	websocket, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
	if err != nil {
		return nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	dialer := portforward.NewFallbackDialerForStreaming(websocket,
		spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u),
		func(err error) bool { return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) })

	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := p.open(dialer, pod)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// pick lists the proxy-server pods and picks a running one that is not going away.
func (p *PortForward) pick(ctx context.Context, client kubernetes.Interface) (string, error) {
	pods, err := client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.Selector})
	if err != nil {
		return "", fmt.Errorf("list the proxy-server pods in %s: %w", p.Namespace, err)
	}
	var running []string
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
			running = append(running, pod.Name)
		}
	}
	if len(running) == 0 {
		return "", fmt.Errorf("no running proxy-server pod in %s matches %q", p.Namespace, p.Selector)
	}
	return running[rand.IntN(len(running))], nil //nolint:gosec // spreading load, not a secret
}

// open makes one port-forward connection with its error and data streams, and returns the data stream as a net.Conn.
func (p *PortForward) open(dialer httpstream.Dialer, pod string) (net.Conn, error) {
	conn, protocol, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("port-forward to proxy-server pod %s/%s: %w", p.Namespace, pod, err)
	}
	if protocol != portforward.PortForwardProtocolV1Name {
		_ = conn.Close()
		return nil, fmt.Errorf("port-forward to proxy-server pod %s/%s: the hub offered protocol %q", p.Namespace, pod, protocol)
	}
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(p.Port))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("port-forward to proxy-server pod %s/%s: error stream: %w", p.Namespace, pod, err)
	}
	_ = errorStream.Close() // nothing is written to it
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("port-forward to proxy-server pod %s/%s: data stream: %w", p.Namespace, pod, err)
	}
	c := &forwardedConn{data: data, conn: conn, name: p.Namespace + "/" + pod}
	go c.watchErrors(errorStream)
	return c, nil
}

// forwardedConn is the data stream of one port-forward connection. Deadlines are not supported (gRPC bounds its TLS
// handshake by closing the connection, and the tunnel's keepalive finds a dead one).
type forwardedConn struct {
	data httpstream.Stream
	conn httpstream.Connection
	name string

	mu     sync.Mutex
	remote error // what the kubelet reported on the error stream
}

func (c *forwardedConn) watchErrors(errorStream httpstream.Stream) {
	msg, err := io.ReadAll(errorStream)
	if err == nil && len(msg) == 0 {
		return
	}
	c.mu.Lock()
	if len(msg) > 0 {
		c.remote = fmt.Errorf("port-forward to proxy-server pod %s: %s", c.name, msg)
	}
	c.mu.Unlock()
	_ = c.conn.Close()
}

func (c *forwardedConn) Read(b []byte) (int, error) {
	n, err := c.data.Read(b)
	if err != nil {
		c.mu.Lock()
		if c.remote != nil {
			err = c.remote
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *forwardedConn) Write(b []byte) (int, error) { return c.data.Write(b) }

func (c *forwardedConn) Close() error {
	_ = c.data.Reset()
	return c.conn.Close()
}

func (c *forwardedConn) LocalAddr() net.Addr  { return forwardedAddr("local") }
func (c *forwardedConn) RemoteAddr() net.Addr { return forwardedAddr(c.name) }

func (c *forwardedConn) SetDeadline(time.Time) error      { return nil }
func (c *forwardedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *forwardedConn) SetWriteDeadline(time.Time) error { return nil }

type forwardedAddr string

func (a forwardedAddr) Network() string { return "port-forward" }
func (a forwardedAddr) String() string  { return string(a) }

var _ net.Conn = (*forwardedConn)(nil)
