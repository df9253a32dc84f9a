package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// fixture is a running proxy-server with its certificates and a proxy client's TLS config.
type fixture struct {
	pki     *testPKI
	srv     *Server
	addrs   Addrs
	opts    Options
	proxyTL *tls.Config // proxy-client certificate
	agentTL func(cluster, namespace string) *tls.Config
	stop    func() error // ends Run and returns its error
}

// startFixture runs a server on 127.0.0.1; newUser, when set, builds the user-server it serves.
func startFixture(t testing.TB, useRSA bool, newUser func(*Server) UserServer, mutate func(*Options)) *fixture {
	t.Helper()
	return startFixtureWith(t, useRSA, newUser, mutate, nil)
}

// startFixtureWith is startFixture with beforeRun, when set, called with the server before it runs.
func startFixtureWith(t testing.TB, useRSA bool, newUser func(*Server) UserServer, mutate func(*Options),
	beforeRun func(*Server)) *fixture {
	t.Helper()
	return startFixtureOn(t, newTestPKI(t, useRSA), newUser, mutate, beforeRun)
}

// startFixtureOn is startFixtureWith on the certificates of pki, which a test may have issued others of before.
func startFixtureOn(t testing.TB, pki *testPKI, newUser func(*Server) UserServer, mutate func(*Options), beforeRun func(*Server)) *fixture {
	t.Helper()
	serverCert, serverKey, _ := pki.issue(t, "proxy-server", leafSpec{cn: "proxy-server", server: true})
	agentServerCert, agentServerKey, _ := pki.issue(t, "agent-server", leafSpec{cn: "agent-server", server: true})
	clientCert, clientKey, _ := pki.issue(t, "proxy-client", leafSpec{cn: "cluster-proxy-proxy-client", uris: []string{contract.ProxyClientRoleURI}})
	opts := Options{
		ServerID:        "test-server",
		FrontendAddr:    "127.0.0.1:0",
		AgentAddr:       "127.0.0.1:0",
		HealthAddr:      "127.0.0.1:0",
		AdminAddr:       "127.0.0.1:0",
		HTTPConnectAddr: "127.0.0.1:0",
		ServerCert:      serverCert, ServerKey: serverKey, ServerCACert: pki.caFile,
		ClusterCert: agentServerCert, ClusterKey: agentServerKey, ClusterCACert: pki.caFile,
		ReloadInterval:  50 * time.Millisecond,
		ShutdownTimeout: 3 * time.Second,
		Log:             testr.NewWithInterface(t, testr.Options{}),
	}
	if newUser != nil {
		opts.UserServerAddr = "127.0.0.1:0"
		opts.UserServerCert, opts.UserServerKey, _ = pki.issue(t, "user-server", leafSpec{cn: "user-server", server: true})
	}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	var user UserServer
	if newUser != nil {
		user = newUser(srv)
	}
	if beforeRun != nil {
		beforeRun(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run(ctx, user) }()
	f := &fixture{pki: pki, srv: srv, addrs: srv.Addrs(), opts: opts, proxyTL: pki.clientTLS(t, clientCert, clientKey)}
	f.stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-runErr:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("run did not return within 10s of the shutdown")
		}
	})
	t.Cleanup(func() {
		if err := f.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	n := 0
	f.agentTL = func(cluster, namespace string) *tls.Config {
		n++
		c, k := pki.agentCert(t, fmt.Sprintf("agent-%d", n), cluster, namespace)
		return pki.clientTLS(t, c, k)
	}
	return f
}

// agent starts an agent of cluster (namespace ns) claiming identifiers and waits for the server's answer; an
// accepted agent is awaited until it counts as connected, when tunnels can reach it.
func (f *fixture) agent(t testing.TB, cluster, ns, agentID, identifiers string, targets map[string]string, held ...string) (*testAgent, error) {
	t.Helper()
	a := startTestAgent(t, f.addrs.Agent, f.agentTL(cluster, ns), agentID, identifiers, targets, held...)
	if err := a.accepted(); err != nil {
		return a, err
	}
	NewWithT(t).Eventually(func() []string { return f.srv.Agents().Snapshot()[cluster] }).Should(ContainElement(agentID))
	return a, nil
}

// httpTarget is a plain HTTP server that names itself in every answer.
func httpTarget(t testing.TB, name string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		_, _ = fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// httptestTLSHealthz is a TLS server answering /healthz with body, as a kube-apiserver does.
func httptestTLSHealthz(t testing.TB, body string) string {
	t.Helper()
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if body != "ok" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// get sends one HTTP/1.1 request over an established connection and returns the body; the connection stays open.
func get(conn net.Conn, br *bufio.Reader, host, path string) (string, error) {
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("status %s", resp.Status)
	}
	return string(body), err
}

// httpConnect opens a tunnel through the HTTP-CONNECT frontend.
func httpConnect(addr string, cfg *tls.Config, target string) (net.Conn, *bufio.Reader, error) {
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	// A CONNECT answer has no body; closing it leaves the connection alone.
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	}
	return conn, br, nil
}

func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

func fetchAgents(g Gomega, f *fixture) map[string]ClusterAgents {
	v, err := FetchAgents(context.Background(), httpsClient(f.proxyTL), "https://"+f.addrs.HTTPConnect)
	g.Expect(err).NotTo(HaveOccurred())
	return v.Clusters
}

func metricsText(g Gomega, f *fixture) string {
	resp, err := http.Get("http://" + f.addrs.Health + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return string(b)
}

func hasLine(text, prefix string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
