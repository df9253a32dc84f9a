package userserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

const testToken = "Bearer test-token"

// fakeDialer stands in for the proxy-server's tunnels: it dials a real service-proxy stand-in on 127.0.0.1 and
// counts the tunnels it opens and how many are open.
type fakeDialer struct {
	addr string
	err  error // when set, every dial fails with it
	// noAgent is how many of the next dials fail as a proxy-server without the cluster's agent answers them.
	noAgent atomic.Int32

	dials   atomic.Int32
	closes  chan struct{} // one value per closed tunnel
	mu      sync.Mutex
	open    int
	maxOpen int
	dialed  []string // "cluster:port"
}

func (d *fakeDialer) DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, net.JoinHostPort(cluster, strconv.Itoa(port)))
	d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	if d.noAgent.Add(-1) >= 0 {
		return nil, fmt.Errorf("dial %s: %w", cluster, packet.ErrNoAgent)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	d.dials.Add(1)
	d.mu.Lock()
	d.open++
	d.maxOpen = max(d.maxOpen, d.open)
	d.mu.Unlock()
	return &fakeTunnel{Conn: c, d: d}, nil
}

func (d *fakeDialer) stats() (open, maxOpen int, dialed []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open, d.maxOpen, append([]string(nil), d.dialed...)
}

type fakeTunnel struct {
	net.Conn
	d    *fakeDialer
	once sync.Once
}

func (c *fakeTunnel) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		c.d.open--
		c.d.mu.Unlock()
		c.d.closes <- struct{}{}
	})
	return c.Conn.Close()
}

type fakeClusters struct {
	mu        sync.Mutex
	known     map[string]bool
	connected map[string]bool
	// away is how many of the next Connected calls of a connected cluster answer false, as while its agent reconnects.
	away int
}

func newFakeClusters(connected ...string) *fakeClusters {
	c := &fakeClusters{known: map[string]bool{}, connected: map[string]bool{}}
	for _, n := range connected {
		c.known[n], c.connected[n] = true, true
	}
	return c
}

func (c *fakeClusters) set(cluster string, known, connected bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known[cluster], c.connected[cluster] = known, connected
}

func (c *fakeClusters) Known(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known[cluster]
}

func (c *fakeClusters) Connected(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connected[cluster] && c.away > 0 {
		c.away--
		return false
	}
	return c.connected[cluster]
}

func (c *fakeClusters) Reconnecting(string) bool { return false }

// env is a user-server in front of a service-proxy stand-in.
type env struct {
	server   *Server
	dialer   *fakeDialer
	clusters *fakeClusters
	frontend *httptest.Server
}

// newEnv starts the service-proxy stand-in with backend and a user-server (plain HTTP frontend; TLS is the
// listener's business) that reaches it for every cluster in connected.
func newEnv(t *testing.T, backend http.Handler, opts Options, connected ...string) *env {
	t.Helper()
	sp := httptest.NewServer(backend)
	t.Cleanup(sp.Close)
	return newEnvAt(t, sp.Listener.Addr().String(), opts, connected...)
}

// newEnvAt is newEnv with the service-proxy stand-in at addr.
func newEnvAt(t *testing.T, addr string, opts Options, connected ...string) *env {
	t.Helper()
	e := &env{
		dialer:   &fakeDialer{addr: addr, closes: make(chan struct{}, 1024)},
		clusters: newFakeClusters(connected...),
	}
	opts.Dialer, opts.Clusters = e.dialer, e.clusters
	e.server = New(opts)
	e.frontend = httptest.NewServer(e.server)
	t.Cleanup(func() {
		e.frontend.Close()
		e.server.pool.closeIdle()
	})
	return e
}

func (e *env) request(t *testing.T, method, path string, header http.Header) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.frontend.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return req
}

// get sends a request with a bearer token and returns the status and body.
func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, path, http.Header{"Authorization": {testToken}}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// try is get for other goroutines than the test's: it reports instead of failing.
func (e *env) try(t *testing.T, path string) (int, error) {
	resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, path, http.Header{"Authorization": {testToken}}))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

func decodeStatus(t *testing.T, body string) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body %q is not a Status: %v", body, err)
	}
	return st
}

func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	switch {
	case out.Counter != nil:
		return out.Counter.GetValue()
	case out.Gauge != nil:
		return out.Gauge.GetValue()
	}
	t.Fatal("not a counter or gauge")
	return 0
}

var errDialRefused = errors.New("dial 10.0.0.7:8091: tunnel to agent-7f9c: connection refused")
