package clusterproxy_test

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/tunneltest"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

func TestRESTConfigReachesEachClusterByNameThroughItsTunnel(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	api1, ca1 := tunneltest.KubeAPIServer(t, "v1.36.3-cluster1", nil)
	api2, ca2 := tunneltest.KubeAPIServer(t, "v1.36.3-2nd", nil)
	hub.StartAgent(t, "cluster1", api1)
	hub.StartAgent(t, "2nd", api2)

	ctx := context.Background()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: hub.Resolve})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(proxies.FrontendAddress()).To(Equal("proxy-entrypoint.proxy-ns.svc:8090"))

	for cluster, ca := range map[string][]byte{"cluster1": ca1, "2nd": ca2} {
		// Nothing listens on 127.0.0.1:6443: only the tunnel can answer. The stand-in's certificate names 127.0.0.1.
		cfg, err := proxies.RESTConfig(cluster, &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
		g.Expect(err).NotTo(HaveOccurred())
		cs, err := kubernetes.NewForConfig(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		v, err := cs.Discovery().ServerVersion()
		g.Expect(err).NotTo(HaveOccurred(), cluster)
		g.Expect(v.GitVersion).To(Equal("v1.36.3-"+cluster), "the tunnel is routed by cluster name")
	}

	_, err = proxies.RESTConfig("cluster1", nil)
	g.Expect(err).To(MatchError(ContainSubstring("base config")))
}

// An agent that reconnects (its forward proxy restarted, its pod replaced) leaves its cluster without a tunnel for a
// moment. A request through RESTConfig that starts then waits for the agent instead of failing.
func TestRESTConfigWaitsForAnAgentThatIsReconnecting(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	api, ca := tunneltest.KubeAPIServer(t, "v1.36.3-late", nil)
	ctx := context.Background()
	// Every connection to the frontend goes through a relay that counts them: one per attempt to dial the cluster.
	resolve := maps.Clone(hub.Resolve)
	var frontend *relay
	for in, to := range resolve {
		if strings.HasSuffix(in, ":8090") {
			frontend = startRelay(t, to)
			resolve[in] = frontend.addr
		}
	}
	attempts := &frontend.accepted
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: resolve})
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := proxies.RESTConfig("late", &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())

	versions, errs := make(chan string, 1), make(chan error, 1)
	go func() {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			errs <- err
			return
		}
		versions <- v.GitVersion
	}()
	// Past the attempts that follow one another at once, the request is waiting for an agent.
	g.Eventually(attempts.Load).WithTimeout(5*time.Second).Should(BeNumerically(">", 3), "the request keeps trying")
	g.Consistently(errs).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())
	hub.StartAgent(t, "late", api)
	var version string
	g.Eventually(versions).WithTimeout(10 * time.Second).Should(Receive(&version))
	g.Expect(version).To(Equal("v1.36.3-late"))

	// A client told not to wait fails after the attempts that follow at once.
	impatient, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: resolve, NoAgentWait: -1})
	g.Expect(err).NotTo(HaveOccurred())
	before := attempts.Load()
	_, err = impatient.Dialer("nowhere").DialPort(ctx, clusterproxy.KubeAPIServerPort)
	g.Expect(err).To(MatchError(And(ContainSubstring("nowhere"), ContainSubstring("No agent available"))))
	g.Expect(attempts.Load() - before).To(BeEquivalentTo(3))
}

// The proxy-server or agent carrying a tunnel can die between an answer's headers and its end. client-go does not
// send a request again once its answer began, so RESTConfig's transport does, for a GET; a watch is not held back.
func TestRESTConfigSendsAGetAgainWhoseAnswerWasCut(t *testing.T) {
	g := NewWithT(t)
	var calls atomic.Int32
	began := make(chan struct{}, 1)
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm"}}}`+"\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		body := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns"}}`
		if calls.Add(1) == 1 {
			// Half the answer, then the path dies.
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = io.WriteString(w, body[:len(body)/2])
			w.(http.Flusher).Flush()
			began <- struct{}{}
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	api.EnableHTTP2 = true
	api.StartTLS()
	t.Cleanup(api.Close)
	path := startRelay(t, api.Listener.Addr().String())
	go func() {
		for range began {
			path.cut()
		}
	}()
	defer close(began)

	hub := tunneltest.Start(t, "proxy-ns")
	hub.StartAgent(t, "c1", path.addr)
	ctx := context.Background()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: hub.Resolve})
	g.Expect(err).NotTo(HaveOccurred())
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	cfg, err := proxies.RESTConfig("c1", &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())

	cm, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the GET whose answer was cut is sent again")
	g.Expect(cm.Name).To(Equal("cm"))
	g.Expect(calls.Load()).To(BeEquivalentTo(2))

	watchCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps("ns").Watch(watchCtx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	g.Eventually(w.ResultChan()).Should(Receive(), "a watch's events come as they are sent, not once it ends")
}

// relay listens on 127.0.0.1 and relays each connection to an address, counting them; cut closes the open ones.
type relay struct {
	addr     string
	accepted atomic.Int32
	mu       sync.Mutex
	open     []net.Conn
}

func startRelay(t *testing.T, to string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	r := &relay{addr: ln.Addr().String()}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			out, err := net.Dial("tcp", to)
			if err != nil {
				_ = in.Close()
				continue
			}
			r.mu.Lock()
			r.open = append(r.open, in, out)
			r.mu.Unlock()
			go func() {
				_, _ = io.Copy(out, in)
				_ = out.Close()
			}()
			go func() {
				_, _ = io.Copy(in, out)
				_ = in.Close()
			}()
		}
	}()
	return r
}

// cut closes every connection the relay carries, as a process on the path that dies does.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.open {
		_ = c.Close()
	}
	r.open = nil
}

func TestProbeReportsHealthLatencyAndMissingAgents(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	var healthy atomic.Bool
	healthy.Store(true)
	api, _ := tunneltest.KubeAPIServer(t, "v1", healthy.Load)
	hub.StartAgent(t, "c1", api)
	ctx := context.Background()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: hub.Resolve})
	g.Expect(err).NotTo(HaveOccurred())

	agents, err := proxies.ConnectedAgents(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agents).To(Equal(map[string][]string{"c1": {"c1-agent-1"}}))

	result, err := proxies.Probe(ctx, "c1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(result.Healthy).To(BeTrue())
	g.Expect(result.Latency).To(BeNumerically(">", 0))

	healthy.Store(false)
	result, err = proxies.Probe(ctx, "c1")
	g.Expect(err).NotTo(HaveOccurred(), "an answer other than ok is a result, not an error")
	g.Expect(result.Healthy).To(BeFalse())
	g.Expect(result.Message).To(ContainSubstring("500"))

	probeCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = proxies.Probe(probeCtx, "no-agent")
	g.Expect(err).To(MatchError(ContainSubstring("no-agent")))
}

func TestCredentialsAreReadAgainSoARenewedClientCertificateIsUsed(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	hub.StartAgent(t, "c1", api)
	ctx := context.Background()
	reader := hub.Reader()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: reader, Resolve: hub.Resolve})
	g.Expect(err).NotTo(HaveOccurred())

	// A certificate from a CA the proxy-server does not trust replaces proxy-client: the next connection uses it and
	// is refused.
	stranger, err := certs.NewCA("stranger", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := certs.IssueLeaf(stranger, certs.LeafSpec{CommonName: "cluster-proxy-proxy-client", Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{}
	g.Expect(reader.Get(ctx, client.ObjectKeyFromObject(hub.ClientSecret), secret)).To(Succeed())
	secret.Data["tls.crt"], secret.Data["tls.key"] = leaf.CertPEM, leaf.KeyPEM
	g.Expect(reader.Update(ctx, secret)).To(Succeed())
	_, err = proxies.ConnectedAgents(ctx)
	g.Expect(err).To(HaveOccurred())

	// The proper certificate is back: connections succeed again without a new Client.
	secret.Data = hub.ClientSecret.Data
	g.Expect(reader.Update(ctx, secret)).To(Succeed())
	result, err := proxies.Probe(ctx, "c1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(result.Healthy).To(BeTrue())
}

func TestNewNamesWhatIsMissingOnTheHub(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	ctx := context.Background()

	empty := fake.NewClientBuilder().WithScheme(tunneltest.HubScheme()).Build()
	_, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: empty})
	g.Expect(errors.Is(err, clusterproxy.ErrNoConfiguration)).To(BeTrue(), "%v", err)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring(`"cluster-proxy"`)))

	noSecret := fake.NewClientBuilder().WithScheme(tunneltest.HubScheme()).WithObjects(hub.MPC.DeepCopy(), hub.BundleSecret.DeepCopy()).Build()
	_, err = clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: noSecret})
	g.Expect(err).To(MatchError(ContainSubstring("secret proxy-ns/proxy-client")))

	_, err = clusterproxy.New(ctx, nil, clusterproxy.Options{})
	g.Expect(err).To(MatchError(ContainSubstring("rest.Config or a Reader")))
}

func TestDialerTakesThePortFromTheAddressAndRefusesOtherNetworks(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	hub.StartAgent(t, "c1", api)
	ctx := context.Background()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: hub.Resolve})
	g.Expect(err).NotTo(HaveOccurred())
	d := proxies.Dialer("c1")

	conn, err := d.DialContext(ctx, "tcp", "anything.example:443")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.Close()).To(Succeed())

	_, err = d.DialContext(ctx, "tcp", "c1:8443")
	g.Expect(err).To(MatchError(ContainSubstring("port 8443")), "the agent serves 443 and the service-proxy port only")
	_, err = d.DialContext(ctx, "udp", "c1:443")
	g.Expect(err).To(MatchError(ContainSubstring(`network "udp"`)))
}

func TestParseResolve(t *testing.T) {
	g := NewWithT(t)
	r, err := clusterproxy.ParseResolve([]string{"Proxy-Entrypoint.ns.svc:8090=127.0.0.1:18090"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Address("proxy-entrypoint.ns.svc:8090")).To(Equal("127.0.0.1:18090"))
	g.Expect(r.Address("other:1")).To(Equal("other:1"))
	for _, bad := range []string{"host:1", "host=127.0.0.1:1", "host:1=127.0.0.1", ":1=127.0.0.1:1"} {
		_, err := clusterproxy.ParseResolve([]string{bad})
		g.Expect(err).To(HaveOccurred(), bad)
	}
}

func TestReplicaAgentsAsksEveryReadyEndpointOfTheProxyServersService(t *testing.T) {
	g := NewWithT(t)
	hub := tunneltest.Start(t, "proxy-ns")
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	hub.StartAgent(t, "c1", api)
	ctx := context.Background()
	_, port, err := net.SplitHostPort(hub.Server.Addrs().HTTPConnect)
	g.Expect(err).NotTo(HaveOccurred())
	portNumber, err := strconv.Atoi(port)
	g.Expect(err).NotTo(HaveOccurred())
	closed := freeClosedPort(t)

	// Four endpoints of Service proxy-entrypoint: two replicas that answer (the same local proxy-server, dialed at
	// its address, not by the Service's name), one not ready, and, in a second slice, one that does not answer.
	slice := func(name string, port int32, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "proxy-ns", Labels: map[string]string{discoveryv1.LabelServiceName: "proxy-entrypoint"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http-connect"), Port: ptr.To(port)}},
			Endpoints:   endpoints,
		}
	}
	endpoint := func(pod, ip string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod}}
	}
	objs := append(hub.Objects(),
		slice("a", int32(portNumber), endpoint("proxy-a", "127.0.0.1", true), endpoint("proxy-b", "127.0.0.1", true), endpoint("proxy-c", "127.0.0.3", false)),
		slice("b", int32(closed), endpoint("proxy-gone", "127.0.0.1", true)))
	reader := fake.NewClientBuilder().WithScheme(tunneltest.HubScheme()).WithObjects(objs...).Build()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: reader})
	g.Expect(err).NotTo(HaveOccurred())

	replicas, err := proxies.ReplicaAgents(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "one replica that does not answer is left out")
	want := map[string][]string{"c1": {"c1-agent-1"}}
	g.Expect(replicas).To(Equal(map[string]map[string][]string{"proxy-a": want, "proxy-b": want}))

	// With Resolve, the Service is asked once, standing for one replica.
	resolved, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: reader, Resolve: hub.Resolve})
	g.Expect(err).NotTo(HaveOccurred())
	replicas, err = resolved.ReplicaAgents(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(replicas).To(HaveLen(1))
	for _, agents := range replicas {
		g.Expect(agents).To(Equal(want))
	}

	// No replica answers: the error names them.
	none := fake.NewClientBuilder().WithScheme(tunneltest.HubScheme()).WithObjects(append(hub.Objects(),
		slice("b", int32(closed), endpoint("proxy-gone", "127.0.0.1", true)))...).Build()
	down, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: none})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = down.ReplicaAgents(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("proxy-gone")))
}

// freeClosedPort is a loopback port nothing listens on.
func freeClosedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
