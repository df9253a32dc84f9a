// Package tunneltest runs the data plane on 127.0.0.1 for tests of hub clients: a real proxy-server
// (internal/server), real proxy-agents (internal/agent) and kube-apiserver stand-ins that answer /healthz, with the
// hub objects (ManagedProxyConfiguration, proxy-client and CA bundle Secrets) a client reads and the --resolve map
// that points the in-cluster Service names at the local listeners. Only tests import it.
package tunneltest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server"
)

// Hub is a running proxy-server with the objects that describe it.
type Hub struct {
	// Namespace of the proxy-server and its Secrets.
	Namespace string
	// MPC is the ManagedProxyConfiguration cluster-proxy, default ports and Service name.
	MPC *proxyv1alpha1.ManagedProxyConfiguration
	// ClientSecret (proxy-client) and BundleSecret (proxy-server-ca) are the Secrets a hub client reads.
	ClientSecret, BundleSecret *corev1.Secret
	// Resolve maps the in-cluster frontend and HTTP-CONNECT addresses to the local listeners, host:port=addr:port.
	Resolve map[string]string
	// Server is the proxy-server.
	Server *server.Server

	ca   *certs.KeyPair
	dir  string
	n    atomic.Int64
	opts server.Options
	// stopRun ends the running server's Run; done delivers its error.
	stopRun context.CancelFunc
	done    chan error
}

// run starts a proxy-server with opts.
func (h *Hub) run(t testing.TB, opts server.Options) {
	t.Helper()
	srv, err := server.New(opts)
	must(t, err)
	must(t, srv.Listen())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, nil) }()
	h.Server, h.stopRun, h.done = srv, cancel, done
}

// stop ends the running proxy-server and waits for it.
func (h *Hub) stop(t testing.TB) {
	t.Helper()
	if h.stopRun == nil {
		return
	}
	h.stopRun()
	h.stopRun = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("proxy-server: %v", err)
		}
	case <-time.After(h.opts.ShutdownTimeout + 10*time.Second):
		t.Errorf("the proxy-server did not stop within its shutdown timeout and 10s")
	}
}

// Restart stops the proxy-server, as a restarted pod's process ends, and starts a new one on the same addresses. The
// agents reconnect on their own.
func (h *Hub) Restart(t testing.TB) {
	t.Helper()
	h.stop(t)
	h.run(t, h.opts)
}

// AgentCredentials issues a client certificate of cluster's agent and returns its files and the CA bundle that
// verifies the proxy-server.
func (h *Hub) AgentCredentials(t testing.TB, cluster string) (certFile, keyFile, caFile string) {
	t.Helper()
	n := h.n.Add(1)
	cert, key := h.issue(t, fmt.Sprintf("agent-%d", n), certs.LeafSpec{CommonName: contract.AgentCommonNamePrefix + cluster,
		Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour})
	return cert, key, filepath.Join(h.dir, "ca.crt")
}

// Objects are the hub objects a client reads: the configuration and the two Secrets.
func (h *Hub) Objects() []client.Object {
	return []client.Object{h.MPC.DeepCopy(), h.ClientSecret.DeepCopy(), h.BundleSecret.DeepCopy()}
}

// HubScheme knows the kinds a hub reader of the tunnels holds: core, discovery and the operator's.
func HubScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	_ = discoveryv1.AddToScheme(s)
	_ = proxyv1alpha1.AddToScheme(s)
	return s
}

// Reader is a fake hub API that holds Objects, as the hub's API would.
func (h *Hub) Reader() client.WithWatch {
	return fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(h.Objects()...).Build()
}

// ResolveFlags are Resolve as --resolve values.
func (h *Hub) ResolveFlags() []string {
	var out []string
	for from, to := range h.Resolve {
		out = append(out, from+"="+to)
	}
	return out
}

// Start runs a proxy-server on 127.0.0.1 until the test ends; configure changes its options.
func Start(t testing.TB, namespace string, configure ...func(*server.Options)) *Hub {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA("tunneltest-ca", 24*time.Hour, now)
	must(t, err)
	h := &Hub{Namespace: namespace, ca: ca, dir: t.TempDir()}
	h.MPC = &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			Authentication: proxyv1alpha1.ManagedProxyConfigurationAuthentication{
				Signer: proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{Type: proxyv1alpha1.SelfSigned},
			},
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{
				Image: "example.com/cluster-proxy:test", Replicas: 1, Namespace: namespace,
				Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
					Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: "proxy.example.com"}, Port: 8091,
				},
			},
			ProxyAgent: proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "example.com/cluster-proxy:test"},
		},
	}
	svc := contract.ServiceHost(h.MPC)
	serving := certs.LeafSpec{CommonName: "proxy-server", DNSNames: []string{svc, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}
	serverCert, serverKey := h.issue(t, "proxy-server", serving)
	agentServerCert, agentServerKey := h.issue(t, "agent-server", serving)
	caFile := h.write(t, "ca.crt", ca.CertPEM)
	clientLeaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "cluster-proxy-proxy-client",
		URIs: []*url.URL{contract.SANURL(contract.ProxyClientRoleURI)}, Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, now)
	must(t, err)

	opts := server.Options{
		ServerID: "tunneltest", FrontendAddr: "127.0.0.1:0", AgentAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0",
		AdminAddr: "127.0.0.1:0", HTTPConnectAddr: "127.0.0.1:0",
		ServerCert: serverCert, ServerKey: serverKey, ServerCACert: caFile,
		ClusterCert: agentServerCert, ClusterKey: agentServerKey, ClusterCACert: caFile,
		ShutdownTimeout: 3 * time.Second, Log: logr.Discard(),
	}
	for _, c := range configure {
		c(&opts)
	}
	h.run(t, opts)
	t.Cleanup(func() { h.stop(t) })
	// A restart binds the same ports again.
	addrs := h.Server.Addrs()
	opts.FrontendAddr, opts.AgentAddr, opts.HealthAddr, opts.AdminAddr, opts.HTTPConnectAddr =
		addrs.Frontend, addrs.Agent, addrs.Health, addrs.Admin, addrs.HTTPConnect
	h.opts = opts
	ports := contract.PortsOf(h.MPC)
	h.Resolve = map[string]string{
		net.JoinHostPort(svc, strconv.Itoa(int(ports.ProxyServer))):       addrs.Frontend,
		net.JoinHostPort(svc, strconv.Itoa(int(ports.HTTPConnectServer))): addrs.HTTPConnect,
	}
	labels := map[string]string{render.ManagedByLabel: render.ManagedByValue}
	h.ClientSecret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: contract.SecretNamesOf(h.MPC).ProxyClient, Namespace: namespace, Labels: labels},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": clientLeaf.CertPEM, "tls.key": clientLeaf.KeyPEM, "ca.crt": ca.CertPEM},
	}
	h.BundleSecret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.CABundleSecretName, Namespace: namespace, Labels: labels},
		Data:       map[string][]byte{"ca.crt": ca.CertPEM},
	}
	return h
}

// Agent is a running proxy-agent of one cluster.
type Agent struct {
	*agent.Agent
	stop func()
}

// Stop ends the agent and waits until it has disconnected.
func (a *Agent) Stop() { a.stop() }

// StartAgent runs a proxy-agent of cluster whose tunnel port 443 reaches kubeAPIServer (host:port), and waits until
// the proxy-server counts it as connected. It stops when the test ends, if Stop was not called before.
func (h *Hub) StartAgent(t testing.TB, cluster, kubeAPIServer string) *Agent {
	t.Helper()
	cert, key, ca := h.AgentCredentials(t, cluster)
	src, err := tlsreload.New(cert, key, ca)
	must(t, err)
	// The certificate's file is agent-<n>.crt, n unique in the Hub: the ID is <cluster>-agent-<n>.
	agentID := cluster + "-" + strings.TrimSuffix(filepath.Base(cert), ".crt")
	a, err := agent.New(agent.Options{
		ServerAddress: h.Server.Addrs().Agent, AgentID: agentID, Identifiers: "host=" + cluster, TLS: src,
		KubeAPIServer: kubeAPIServer, DrainTimeout: 100 * time.Millisecond,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond, Log: logr.Discard(),
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		waitFor(t, func() bool { return !slices.Contains(h.Server.Agents().Snapshot()[cluster], agentID) },
			"agent %s of cluster %s to disconnect", agentID, cluster)
	}
	t.Cleanup(stop)
	waitFor(t, func() bool { return slices.Contains(h.Server.Agents().Snapshot()[cluster], agentID) },
		"agent %s of cluster %s to connect", agentID, cluster)
	return &Agent{Agent: a, stop: stop}
}

// KubeAPIServer is a TLS server on 127.0.0.1 standing in for a kube-apiserver: /healthz answers "ok" while
// healthy() is true (500 otherwise) and /version answers gitVersion. It returns its address and its CA (PEM).
func KubeAPIServer(t testing.TB, gitVersion string, healthy func() bool) (addr string, caPEM []byte) {
	t.Helper()
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			if healthy != nil && !healthy() {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, "[-]etcd failed: reason withheld")
				return
			}
			_, _ = io.WriteString(w, "ok")
		case "/version":
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"major":"1","minor":"36","gitVersion":%q}`, gitVersion)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String(), certs.EncodeBundle(ts.Certificate())
}

func (h *Hub) issue(t testing.TB, name string, spec certs.LeafSpec) (certFile, keyFile string) {
	t.Helper()
	leaf, err := certs.IssueLeaf(h.ca, spec, time.Now())
	must(t, err)
	return h.write(t, name+".crt", leaf.CertPEM), h.write(t, name+".key", leaf.KeyPEM)
}

func (h *Hub) write(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(h.dir, name)
	must(t, os.WriteFile(p, data, 0o600))
	return p
}

func waitFor(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
