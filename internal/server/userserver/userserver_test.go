package userserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
)

// seen is what the service-proxy stand-in received.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) handler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r.Clone(r.Context()))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = fmt.Fprintf(w, "served %s", r.URL.Path)
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func (s *seen) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return nil
	}
	return s.reqs[len(s.reqs)-1]
}

func clusterProxyHeaders(h http.Header) []string {
	var keys []string
	for k := range h {
		if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "cluster-proxy-") {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestForwardsKubeRequestToTheServiceProxy(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{}, "1st")

	req := e.request(t, http.MethodGet, "/1st/api/v1/namespaces/default/pods?labelSelector=app%3Dweb&watch=true",
		http.Header{
			"Authorization":    {testToken},
			"Impersonate-User": {"alice"},
			// Spoofed routing headers in several spellings must not reach the service-proxy.
			"Cluster-Proxy-Service":   {"kubernetes"},
			"cluster-proxy-namespace": {"kube-system"},
			"Cluster_Proxy_Port":      {"1"},
		})
	resp, err := e.frontend.Client().Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()

	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(string(body)).To(Equal("served /api/v1/namespaces/default/pods"))
	got := s.last()
	g.Expect(got).NotTo(BeNil())
	g.Expect(got.URL.Path).To(Equal("/api/v1/namespaces/default/pods"))
	g.Expect(got.URL.RawQuery).To(Equal("labelSelector=app%3Dweb&watch=true"))
	g.Expect(got.Host).To(Equal("1st:7443"))
	g.Expect(got.Header.Get("Authorization")).To(Equal(testToken))
	g.Expect(got.Header.Get("Impersonate-User")).To(Equal("alice"))
	g.Expect(clusterProxyHeaders(got.Header)).To(BeEmpty())
	_, _, dialed := e.dialer.stats()
	g.Expect(dialed).To(ConsistOf("1st:7443"))
}

func TestForwardsOnlyAllowListedServices(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{
		Allowed: allowlist.List{{Namespace: "monitoring", Name: "prometheus", Port: 9090}},
	}, "c1")

	req := e.request(t, http.MethodGet,
		"/c1/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy-service/api/v1/query?query=up",
		http.Header{"Authorization": {testToken}, "Cluster-Proxy-Service": {"kubernetes"}, "Cluster-Proxy-Extra": {"x"}})
	resp, err := e.frontend.Client().Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	got := s.last()
	g.Expect(got.URL.Path).To(Equal("/api/v1/query"))
	g.Expect(got.URL.RawQuery).To(Equal("query=up"))
	g.Expect(got.Header.Values("Cluster-Proxy-Service")).To(Equal([]string{"prometheus"}))
	g.Expect(got.Header.Values("Cluster-Proxy-Namespace")).To(Equal([]string{"monitoring"}))
	g.Expect(got.Header.Values("Cluster-Proxy-Port")).To(Equal([]string{"9090"}))
	g.Expect(got.Header.Values("Cluster-Proxy-Proto")).To(Equal([]string{"http"}))
	g.Expect(clusterProxyHeaders(got.Header)).To(ConsistOf(
		"Cluster-Proxy-Service", "Cluster-Proxy-Namespace", "Cluster-Proxy-Port", "Cluster-Proxy-Proto"))

	for _, path := range []string{
		"/c1/api/v1/namespaces/monitoring/services/prometheus/proxy-service/", // https:443 is not the listed port
		"/c1/api/v1/namespaces/monitoring/services/grafana:9090/proxy-service/",
		"/c1/api/v1/namespaces/default/services/prometheus:9090/proxy-service/",
	} {
		before := e.dialer.dials.Load()
		code, body := e.get(t, path)
		g.Expect(code).To(Equal(http.StatusForbidden), path)
		st := decodeStatus(t, body)
		g.Expect(st.Reason).To(Equal(metav1.StatusReasonForbidden))
		g.Expect(st.Message).To(ContainSubstring("allow-list"))
		g.Expect(e.dialer.dials.Load()).To(Equal(before), "nothing is dialed for a refused service")
	}
}

func TestAnswersRefusalsWithKubernetesStatus(t *testing.T) {
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{}, "c1")
	e.clusters.set("asleep", true, false)

	for _, tc := range []struct {
		name, path, auth string
		code             int
		reason           metav1.StatusReason
		message          string
		retryAfter       string
	}{
		{name: "no token", path: "/c1/api", code: 401, reason: metav1.StatusReasonUnauthorized, message: "bearer token"},
		{name: "no token for an unknown cluster", path: "/nowhere/api", code: 401, reason: metav1.StatusReasonUnauthorized},
		{name: "basic auth", path: "/c1/api", auth: "Basic YTpi", code: 401, reason: metav1.StatusReasonUnauthorized},
		{name: "empty bearer", path: "/c1/api", auth: "Bearer  ", code: 401, reason: metav1.StatusReasonUnauthorized},
		// The kube-apiserver reads the token between the first and the second space: here it reads none, and the
		// service-proxy refuses it, so the user-server refuses it before opening a tunnel.
		{name: "bearer and two spaces", path: "/c1/api", auth: "Bearer  abc", code: 401, reason: metav1.StatusReasonUnauthorized},
		{name: "unknown cluster", path: "/nowhere/api", auth: testToken, code: 404, reason: metav1.StatusReasonNotFound,
			message: `cluster "nowhere" not found`},
		{name: "disconnected cluster", path: "/asleep/api", auth: testToken, code: 503,
			reason: metav1.StatusReasonServiceUnavailable, message: `cluster "asleep" is not connected`, retryAfter: "1"},
		{name: "escaping path", path: "/c1/api/%2e%2e/%2e%2e/c2/api", auth: testToken, code: 400,
			reason: metav1.StatusReasonBadRequest, message: `".."`},
		{name: "invalid cluster", path: "/Not_A_Cluster/api", auth: testToken, code: 400,
			reason: metav1.StatusReasonBadRequest, message: "invalid cluster name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			header := http.Header{}
			if tc.auth != "" {
				header.Set("Authorization", tc.auth)
			}
			counted := requestsTotal.WithLabelValues(fmt.Sprint(tc.code))
			before := metricValue(t, counted)
			resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, tc.path, header))
			g.Expect(err).NotTo(HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()

			g.Expect(resp.StatusCode).To(Equal(tc.code))
			g.Expect(resp.Header.Get("Content-Type")).To(Equal("application/json"))
			st := decodeStatus(t, string(body))
			g.Expect(st.APIVersion).To(Equal("v1"))
			g.Expect(st.Kind).To(Equal("Status"))
			g.Expect(st.Status).To(Equal(metav1.StatusFailure))
			g.Expect(st.Code).To(BeEquivalentTo(tc.code))
			g.Expect(st.Reason).To(Equal(tc.reason))
			g.Expect(st.Message).To(ContainSubstring(tc.message))
			g.Expect(resp.Header.Get("Retry-After")).To(Equal(tc.retryAfter), "a 503 that may be sent again says when")
			g.Expect(metricValue(t, counted)).To(Equal(before + 1))
		})
	}
	_, _, dialed := e.dialer.stats()
	NewWithT(t).Expect(dialed).To(BeEmpty(), "no refusal opens a tunnel")
}

func TestTunnelFailureIs502WithoutInternals(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, http.NotFoundHandler(), Options{}, "c1")
	e.dialer.err = errDialRefused
	failures := tunnelDialFailures.WithLabelValues("c1")
	before := metricValue(t, failures) // the metric is process-wide

	code, body := e.get(t, "/c1/api")
	g.Expect(code).To(Equal(http.StatusBadGateway))
	st := decodeStatus(t, body)
	g.Expect(st.Code).To(BeEquivalentTo(http.StatusBadGateway))
	g.Expect(st.Message).To(Equal(`the agent of cluster "c1" could not be reached`))
	g.Expect(body).NotTo(ContainSubstring("10.0.0.7"))
	g.Expect(body).NotTo(ContainSubstring("agent-7f9c"))
	g.Expect(metricValue(t, failures)).To(BeNumerically(">=", 1))
	g.Expect(metricValue(t, failures)).To(BeNumerically(">", before), "this request's failed dial is counted")
}

// While a cluster's agent reconnects (its forward proxy restarted, its pod replaced), the user-server finds it not
// connected, or its dial finds no agent. Both answers tell the client to come back, so client-go waits the moment out
// instead of failing the request.
func TestClientGoWaitsOutAnAgentThatIsReconnecting(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{}, "c1")
	e.clusters.mu.Lock()
	e.clusters.away = 1
	e.clusters.mu.Unlock()
	e.dialer.noAgent.Store(1)
	unavailable := requestsTotal.WithLabelValues("503")
	before := metricValue(t, unavailable) // the metric is process-wide

	cfg := &rest.Config{Host: e.frontend.URL + "/c1", BearerToken: strings.TrimPrefix(testToken, "Bearer ")}
	body, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/ns/configmaps/cm").
		DoRaw(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(body)).To(Equal("served /api/v1/namespaces/ns/configmaps/cm"))
	g.Expect(metricValue(t, unavailable)-before).To(Equal(2.0), "not connected, then no agent for the dial")
}

func TestReusesTunnelsAcrossRequests(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{}, "reuse")
	before := metricValue(t, tunnelsOpened.WithLabelValues("reuse")) // the metric is process-wide

	for i := range 100 {
		code, body := e.get(t, fmt.Sprintf("/reuse/api/v1/namespaces/ns/configmaps/cm-%d", i))
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(Equal(fmt.Sprintf("served /api/v1/namespaces/ns/configmaps/cm-%d", i)))
	}
	opened := metricValue(t, tunnelsOpened.WithLabelValues("reuse")) - before
	t.Logf("100 sequential requests opened %v tunnel(s)", opened)
	// One tunnel is the norm; a second can open when a request starts before the previous tunnel is back idle.
	g.Expect(opened).To(BeNumerically("<=", 3))
	g.Expect(opened).To(BeEquivalentTo(e.dialer.dials.Load()))
}

func TestBoundsTunnelsPerCluster(t *testing.T) {
	g := NewWithT(t)
	const limit, clients, perClient = 4, 64, 5
	// The stand-in holds requests until `limit` are in flight together, so the pool is driven to its bound.
	var inFlight, peak atomic.Int32
	reached := make(chan struct{})
	var once sync.Once
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n >= limit {
			once.Do(func() { close(reached) })
		}
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, "ok")
	})
	e := newEnv(t, backend, Options{MaxConnsPerCluster: limit, MaxIdleConnsPerCluster: limit}, "bounded")

	var wg sync.WaitGroup
	codes := make(chan int, clients*perClient)
	for range clients {
		wg.Go(func() {
			for range perClient {
				code, err := e.try(t, "/bounded/api")
				if err != nil {
					t.Error(err)
				}
				codes <- code
			}
		})
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		g.Expect(code).To(Equal(http.StatusOK))
	}
	g.Expect(reached).To(BeClosed(), "the pool used %d tunnels at once", limit)
	_, maxOpen, _ := e.dialer.stats()
	g.Expect(maxOpen).To(Equal(limit))
	g.Expect(peak.Load()).To(BeEquivalentTo(limit))
	g.Expect(e.dialer.dials.Load()).To(BeEquivalentTo(limit), "idle tunnels are kept and reused")
}

func TestHoldsMoreLongLivedRequestsToOneClusterThanTheOldBoundByDefault(t *testing.T) {
	g := NewWithT(t)
	const watches = 300 // the bound was 256: the 257th watch waited for one of the others to end
	var arrived atomic.Int32
	all := make(chan struct{})
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == watches {
			close(all)
		}
		select { // every watch stays open until all of them have reached the cluster
		case <-all:
			_, _ = io.WriteString(w, "ok")
		case <-time.After(10 * time.Second):
			http.Error(w, "not every watch got through", http.StatusServiceUnavailable)
		}
	})
	e := newEnv(t, backend, Options{}, "busy")
	g.Expect(e.server.opts.MaxConnsPerCluster).To(Equal(defaultMaxConns))

	codes := make(chan int, watches)
	var wg sync.WaitGroup
	for range watches {
		wg.Go(func() {
			code, err := e.try(t, "/busy/api/v1/pods?watch=true")
			if err != nil {
				t.Error(err)
			}
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		g.Expect(code).To(Equal(http.StatusOK))
	}
	_, maxOpen, _ := e.dialer.stats()
	g.Expect(maxOpen).To(Equal(watches), "one tunnel per watch")
}

func TestIdleTunnelsExpire(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{IdleConnTimeout: 100 * time.Millisecond}, "idle")

	code, _ := e.get(t, "/idle/api")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Eventually(e.dialer.closes).WithTimeout(5 * time.Second).Should(Receive())
	open, _, _ := e.dialer.stats()
	g.Expect(open).To(BeZero())
	g.Expect(metricValue(t, tunnelsOpen.WithLabelValues("idle"))).To(BeZero())

	code, _ = e.get(t, "/idle/api")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(e.dialer.dials.Load()).To(BeEquivalentTo(2), "an expired tunnel is replaced by a new one")
}

func TestDropsTunnelsOfClustersThatDisappear(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{}, "gone", "stays")
	for _, c := range []string{"gone", "stays"} {
		code, _ := e.get(t, "/"+c+"/api")
		g.Expect(code).To(Equal(http.StatusOK))
	}

	e.clusters.set("gone", false, false)
	e.server.pool.sweep(e.clusters)
	g.Eventually(e.dialer.closes).WithTimeout(5 * time.Second).Should(Receive())
	g.Expect(e.server.pool.clusters).NotTo(HaveKey("gone"))
	g.Expect(e.server.pool.clusters).To(HaveKey("stays"))
	open, _, _ := e.dialer.stats()
	g.Expect(open).To(Equal(1), "the other cluster's tunnel stays pooled")
	code, _ := e.get(t, "/gone/api")
	g.Expect(code).To(Equal(http.StatusNotFound))
}

func TestStreamsWatchEventsAsTheyArrive(t *testing.T) {
	g := NewWithT(t)
	next := make(chan struct{})
	var finished atomic.Bool
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer finished.Store(true)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"ADDED"}`+"\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			return
		}
		select { // without flushing all the way, the client sees nothing until this gives up
		case <-next:
		case <-time.After(10 * time.Second):
			return
		}
		_, _ = io.WriteString(w, `{"type":"MODIFIED"}`+"\n")
	})
	e := newEnv(t, backend, Options{}, "watch")

	resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, "/watch/api/v1/pods?watch=true",
		http.Header{"Authorization": {testToken}}))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(Equal(`{"type":"ADDED"}` + "\n"))
	g.Expect(finished.Load()).To(BeFalse(), "the first event arrived while the watch was still open")
	close(next)
	second, err := lines.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second).To(Equal(`{"type":"MODIFIED"}` + "\n"))
}

// upgradeBackend answers an upgrade with 101, greets, then echoes each line back prefixed.
func upgradeBackend(w http.ResponseWriter, r *http.Request) {
	proto := r.Header.Get("Upgrade")
	if proto == "" || !strings.EqualFold(r.Header.Get("Connection"), "Upgrade") {
		http.Error(w, "upgrade expected", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nhello from %s\n",
		proto, r.URL.Path)
	_ = brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	}
}

// dialUpgrade opens a raw connection to addr and upgrades it; it returns the connection and its reader.
func dialUpgrade(t *testing.T, addr, path, proto string) (net.Conn, *bufio.Reader) {
	t.Helper()
	g := NewWithT(t)
	conn, err := net.Dial("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: user-server\r\nAuthorization: %s\r\nConnection: Upgrade\r\n"+
		"Upgrade: %s\r\n\r\n", path, testToken, proto)
	g.Expect(err).NotTo(HaveOccurred())
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close() // no body: a 101's stream is the connection itself
	g.Expect(resp.StatusCode).To(Equal(http.StatusSwitchingProtocols))
	g.Expect(resp.Header.Get("Upgrade")).To(Equal(proto))
	return conn, r
}

func TestSendsTheHeadersOfAWatchBeforeItsFirstEvent(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		select { // no event yet: kubectl still has to see the answer start
		case <-release:
		case <-r.Context().Done():
		}
	})
	e := newEnv(t, backend, Options{}, "quiet")
	defer close(release)

	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, "/quiet/api/v1/pods?watch=true", //nolint:bodyclose // the test closes it
			http.Header{"Authorization": {testToken}}))
		if err != nil {
			t.Error(err)
			close(answered)
			return
		}
		answered <- resp
	}()
	var resp *http.Response
	g.Eventually(answered, 5*time.Second).Should(Receive(&resp))
	g.Expect(resp).NotTo(BeNil())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(Equal("application/json"))
}

func TestUpgradedConnectionsCarryBytesBothWays(t *testing.T) {
	e := newEnv(t, http.HandlerFunc(upgradeBackend), Options{}, "exec")
	for _, proto := range []string{"SPDY/3.1", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			conn, r := dialUpgrade(t, e.frontend.Listener.Addr().String(),
				"/exec/api/v1/namespaces/ns/pods/p/exec?command=sh", proto)
			greeting, err := r.ReadString('\n')
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(greeting).To(Equal("hello from /api/v1/namespaces/ns/pods/p/exec\n"))
			for _, msg := range []string{"ls\n", "exit\n"} {
				_, err = io.WriteString(conn, msg)
				g.Expect(err).NotTo(HaveOccurred())
				got, err := r.ReadString('\n')
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal("echo " + msg))
			}
		})
	}
}

// A new replica is Ready before the agents reach it: until AgentWarmup has passed, a cluster it has not seen is
// answered with a retryable 503 on a connection it closes, so that client-go retries elsewhere; then 404.
func TestAnUnseenClusterIsRetryableDuringTheAgentWarmup(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	e := newEnv(t, http.HandlerFunc((&seen{}).handler), Options{AgentWarmup: time.Minute, Clock: clk}, "c1")

	resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, "/c2/api", http.Header{"Authorization": {testToken}}))
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
	g.Expect(resp.Header.Get("Retry-After")).To(Equal("1"))
	g.Expect(resp.Close).To(BeTrue(), "the connection closes, so the retry may reach another replica")
	g.Expect(string(body)).To(ContainSubstring(`no agent of cluster \"c2\" has reached this proxy-server yet`))

	code, _ := e.get(t, "/c1/api")
	g.Expect(code).To(Equal(http.StatusOK), "a cluster it has is served during the warm-up")

	clk.Step(time.Minute)
	code, body2 := e.get(t, "/c2/api")
	g.Expect(code).To(Equal(http.StatusNotFound))
	g.Expect(body2).To(ContainSubstring(`cluster \"c2\" not found`))
}

// A service whose entry says it authenticates its callers gets requests without a bearer token, as the existing
// add-on serves every allowed service; any other service is answered 401 before anything leaves the hub.
func TestServesTokenlessRequestsOnlyToServicesThatAuthenticateTheirCallers(t *testing.T) {
	g := NewWithT(t)
	var s seen
	allowed, err := allowlist.ParseAll([]string{"monitoring/prometheus:9090,token=optional", "monitoring/grafana:3000"})
	g.Expect(err).NotTo(HaveOccurred())
	e := newEnv(t, http.HandlerFunc(s.handler), Options{Allowed: allowed}, "c1")
	noToken := func(path string) int {
		resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, path, nil))
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	g.Expect(noToken("/c1/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy-service/metrics")).To(Equal(http.StatusOK))
	got := s.last()
	g.Expect(got.URL.Path).To(Equal("/metrics"))
	g.Expect(got.Header.Get("Authorization")).To(BeEmpty())

	before := e.dialer.dials.Load()
	for _, path := range []string{
		"/c1/api/v1/namespaces/monitoring/services/http:grafana:3000/proxy-service/",    // listed, a token required
		"/c1/api/v1/namespaces/monitoring/services/http:prometheus:9091/proxy-service/", // another port
		"/c1/api/v1/namespaces", // the kube-apiserver
	} {
		g.Expect(noToken(path)).To(Equal(http.StatusUnauthorized), path)
	}
	g.Expect(e.dialer.dials.Load()).To(Equal(before), "nothing was dialed for the refused requests")

	code, _ := e.get(t, "/c1/api/v1/namespaces/monitoring/services/http:grafana:3000/proxy-service/")
	g.Expect(code).To(Equal(http.StatusOK), "with a token, the other service is reached as before")
}

// Whatever a caller sends as the cluster and the method, with or without credentials, adds no metric series: a
// cluster no agent has reached this proxy-server is not counted per cluster, and a method Kubernetes does not serve
// is the verb "other".
func TestMadeUpClustersAndMethodsAddNoMetricSeries(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, http.HandlerFunc((&seen{}).handler), Options{}, "c1")
	send := func(i int) {
		t.Helper()
		method := fmt.Sprintf("M%d", i)
		for _, path := range []string{fmt.Sprintf("/made-up-%d/api", i), "/c1/api"} {
			for _, auth := range []string{"", testToken} {
				h := http.Header{}
				if auth != "" {
					h.Set("Authorization", auth)
				}
				resp, err := e.frontend.Client().Do(e.request(t, method, path, h))
				g.Expect(err).NotTo(HaveOccurred())
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}
	}
	send(0) // the bounded series these requests may add, once
	series := func() int {
		return testutil.CollectAndCount(clusterRequests) + testutil.CollectAndCount(clusterRequestSeconds) + testutil.CollectAndCount(requestsTotal)
	}
	before := series()
	for i := 1; i <= 200; i++ {
		send(i)
	}
	g.Expect(series()).To(Equal(before), "200 made-up clusters and methods added series")
}
