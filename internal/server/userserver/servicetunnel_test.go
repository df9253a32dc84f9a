package userserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

const serviceHost = "prometheus.monitoring.svc.cluster.local:9090" // as a service-proxy with that domain names it

var prometheusAllowed = allowlist.List{{Namespace: "monitoring", Name: "prometheus", Port: 9090}}

// tunnelingProxy stands in for a service-proxy with service tunnels: it answers a CONNECT with refuse's answer, or
// else with 200 and serviceHost, and then carries the connection to service. Other requests go to perRequest.
type tunnelingProxy struct {
	service    *httptest.Server
	perRequest http.Handler
	refuse     func(w http.ResponseWriter) bool
	// old makes it answer a CONNECT as a service-proxy from before service tunnels does.
	old atomic.Bool

	mu       sync.Mutex
	connects []http.Header
}

func (p *tunnelingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if answerSelfReview(w, r) {
		return
	}
	if r.Method != http.MethodConnect {
		p.perRequest.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.connects = append(p.connects, r.Header.Clone())
	p.mu.Unlock()
	if p.old.Load() {
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if p.refuse != nil && p.refuse(w) {
		return
	}
	service, err := net.Dial("tcp", p.service.Listener.Addr().String())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = service.Close()
		return
	}
	_, _ = fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\n%s: %s\r\n\r\n", proxyhttp.HeaderTunnel, serviceHost)
	_ = brw.Flush()
	go func() {
		_, _ = io.Copy(service, brw)
		_ = service.Close()
	}()
	_, _ = io.Copy(conn, service)
	_ = conn.Close()
}

func (p *tunnelingProxy) connectCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.connects)
}

func newTunnelingProxy(t *testing.T, service http.Handler) *tunnelingProxy {
	svc := httptest.NewServer(service)
	t.Cleanup(svc.Close)
	return &tunnelingProxy{service: svc, perRequest: http.NotFoundHandler()}
}

const prometheusPath = "/c1/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy-service/api/v1/query?query=up"

func TestServiceRequestsGoThroughOneServiceTunnelAsTheyAre(t *testing.T) {
	g := NewWithT(t)
	var s seen
	sp := newTunnelingProxy(t, http.HandlerFunc(s.handler))
	e := newEnv(t, sp, Options{Allowed: prometheusAllowed}, "c1")

	for range 3 {
		req := e.request(t, http.MethodGet, prometheusPath, http.Header{"Authorization": {testToken}, "Cluster-Proxy-Service": {"kubernetes"}})
		resp, err := e.frontend.Client().Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(string(body)).To(Equal("served /api/v1/query"))
	}

	got := s.last()
	g.Expect(got.URL.RawQuery).To(Equal("query=up"))
	g.Expect(got.Host).To(Equal(serviceHost), "the Host the service-proxy named")
	g.Expect(got.Header.Get("Authorization")).To(Equal(testToken), "the service decides")
	g.Expect(clusterProxyHeaders(got.Header)).To(BeEmpty(), "the service gets no routing header, spoofed or ours")
	g.Expect(sp.connectCount()).To(Equal(1), "one tunnel, asked for the service once, serves every request")
	g.Expect(sp.connects[0]).To(HaveKeyWithValue("Cluster-Proxy-Namespace", []string{"monitoring"}))
	g.Expect(sp.connects[0]).To(HaveKeyWithValue("Cluster-Proxy-Service", []string{"prometheus"}))
	g.Expect(sp.connects[0]).To(HaveKeyWithValue("Cluster-Proxy-Port", []string{"9090"}))
	g.Expect(sp.connects[0]).To(HaveKeyWithValue("Cluster-Proxy-Proto", []string{"http"}))
	g.Expect(e.dialer.dials.Load()).To(BeEquivalentTo(2), "the service tunnel, and the kept-alive connection that asked the cluster about the token once")
}

func TestTheServiceProxysRefusalOfAServiceTunnelReachesTheClient(t *testing.T) {
	g := NewWithT(t)
	sp := newTunnelingProxy(t, http.NotFoundHandler())
	sp.refuse = func(w http.ResponseWriter) bool {
		w.Header().Set(proxyhttp.HeaderTunnel, proxyhttp.TunnelRefused)
		proxyhttp.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonInternalError,
			"the service-proxy cannot reach the service: connection refused")
		return true
	}
	e := newEnv(t, sp, Options{Allowed: prometheusAllowed}, "c1")

	for range 2 {
		code, body := e.get(t, prometheusPath)
		g.Expect(code).To(Equal(http.StatusBadGateway))
		st := decodeStatus(t, body)
		g.Expect(st.Reason).To(Equal(metav1.StatusReasonInternalError))
		g.Expect(st.Message).To(Equal("the service-proxy cannot reach the service: connection refused"))
	}
	g.Expect(sp.connectCount()).To(Equal(2), "a refusal is not remembered: the service may come up")
	open, _, _ := e.dialer.stats()
	g.Expect(open).To(Equal(1), "a refused tunnel is closed; what stays open is the kept-alive connection that asked the cluster about the token")
}

// An agent older than the user-server answers a CONNECT as any service request; its services take the per-request
// form, and the agent is asked again after noTunnelsRetry, by which time it may have been upgraded.
func TestServicesOfAnAgentWithoutServiceTunnelsTakeThePerRequestForm(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	var s seen
	var connects atomic.Int32
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			connects.Add(1)
			http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
			return
		}
		s.handler(w, r)
	})
	e := newEnv(t, old, Options{Allowed: prometheusAllowed, Clock: clk}, "c1")

	for range 2 {
		code, body := e.get(t, prometheusPath)
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(Equal("served /api/v1/query"))
	}
	g.Expect(connects.Load()).To(BeEquivalentTo(1), "asked once")
	got := s.last()
	g.Expect(got.Method).To(Equal(http.MethodGet))
	g.Expect(got.Header.Values("Cluster-Proxy-Service")).To(Equal([]string{"prometheus"}))
	g.Expect(got.Host).To(Equal("c1:7443"))

	clk.Step(noTunnelsRetry)
	code, _ := e.get(t, prometheusPath)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(connects.Load()).To(BeEquivalentTo(2), "asked again after noTunnelsRetry")
}

// An agent may be replaced by an older one (a rollback) while a service's route is in use. The request whose new
// tunnel finds the old agent takes the per-request form instead of failing, and so do the requests after it; once the
// retry time has passed, the route asks for a tunnel before it sends a request, as on its first use.
func TestAServiceRouteWhoseAgentLostServiceTunnelsFailsNoRequest(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	var s seen
	sp := newTunnelingProxy(t, http.HandlerFunc(s.handler))
	sp.perRequest = http.HandlerFunc(s.handler)
	e := newEnv(t, sp, Options{Allowed: prometheusAllowed, Clock: clk}, "c1")
	get := func(wantHost string) {
		t.Helper()
		code, body := e.get(t, prometheusPath)
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(Equal("served /api/v1/query"))
		g.Expect(s.last().Host).To(Equal(wantHost))
	}

	get(serviceHost)
	g.Expect(sp.connectCount()).To(Equal(1))

	// The agent restarts older: its tunnels end, and it answers a CONNECT as any service request.
	sp.old.Store(true)
	e.server.pool.closeIdle()
	get("c1:7443")
	g.Expect(sp.connectCount()).To(Equal(2), "the route's new tunnel found the old agent")
	g.Expect(s.last().Header.Values("Cluster-Proxy-Service")).To(Equal([]string{"prometheus"}))
	get("c1:7443")
	g.Expect(sp.connectCount()).To(Equal(2), "not asked again before noTunnelsRetry")

	// Still old after noTunnelsRetry: the route asks before it sends, so a request with a body, which a failed round
	// trip would have used up, takes the per-request form too.
	clk.Step(noTunnelsRetry)
	req := e.request(t, http.MethodPost, prometheusPath, http.Header{"Authorization": {testToken}})
	req.Body, req.ContentLength = io.NopCloser(strings.NewReader("query=up")), int64(len("query=up"))
	resp, err := e.frontend.Client().Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(s.last().Host).To(Equal("c1:7443"))
	g.Expect(sp.connectCount()).To(Equal(3))

	// Upgraded again: after noTunnelsRetry the route opens a tunnel first, and uses it.
	sp.old.Store(false)
	clk.Step(noTunnelsRetry)
	get(serviceHost)
	get(serviceHost)
	g.Expect(sp.connectCount()).To(Equal(4))
}

// A request with a body whose new tunnel finds an agent rolled back to one without service tunnels takes the
// per-request form with its body whole: the failed tunnel read none of it.
func TestARequestWithABodyThatMeetsARolledBackAgentKeepsItsBody(t *testing.T) {
	g := NewWithT(t)
	var bodies []string
	var mu sync.Mutex
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Host+" "+string(body))
		mu.Unlock()
		_, _ = fmt.Fprintf(w, "served %s", r.URL.Path)
	})
	sp := newTunnelingProxy(t, record)
	sp.perRequest = record
	e := newEnv(t, sp, Options{Allowed: prometheusAllowed}, "c1")
	post := func(body string) (int, string) {
		t.Helper()
		req := e.request(t, http.MethodPost, prometheusPath, http.Header{"Authorization": {testToken}})
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		resp, err := e.frontend.Client().Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(answer)
	}

	code, answer := post("query=up")
	g.Expect(code).To(Equal(http.StatusOK), answer)
	// The agent restarts older: its tunnels end, and it answers a CONNECT as any service request.
	sp.old.Store(true)
	e.server.pool.closeIdle()
	code, answer = post("query=down")
	g.Expect(code).To(Equal(http.StatusOK), answer)
	g.Expect(sp.connectCount()).To(Equal(2), "the route's new tunnel found the old agent")
	mu.Lock()
	defer mu.Unlock()
	g.Expect(bodies).To(Equal([]string{serviceHost + " query=up", "c1:7443 query=down"}))
}

// answerSelfReview stands in for the cluster's kube-apiserver behind the service-proxy when the user-server asks it
// about a token: testToken authenticates, any other does not. It reports whether r was that question.
func answerSelfReview(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || r.URL.Path != "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" {
		return false
	}
	if r.Header.Get("Authorization") != testToken {
		proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return true
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"kind":"SelfSubjectAccessReview","status":{"allowed":true}}`)
	return true
}

func TestHTTPSServicesTakeThePerRequestForm(t *testing.T) {
	g := NewWithT(t)
	var s seen
	sp := newTunnelingProxy(t, http.NotFoundHandler())
	sp.perRequest = http.HandlerFunc(s.handler)
	e := newEnv(t, sp, Options{Allowed: prometheusAllowed}, "c1")

	code, body := e.get(t, "/c1/api/v1/namespaces/monitoring/services/https:prometheus:9090/proxy-service/api/v1/query")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("served /api/v1/query"))
	g.Expect(sp.connectCount()).To(BeZero(), "the service-proxy verifies an https service per connection of its own")
	g.Expect(s.last().Header.Values("Cluster-Proxy-Proto")).To(Equal([]string{"https"}))
}

// A cluster's tunnels are bounded together: a service tunnel waits for a slot, and the idle tunnels of the cluster's
// other transports are closed to free one.
func TestServiceTunnelsCountTowardsTheClustersBound(t *testing.T) {
	g := NewWithT(t)
	var s seen
	sp := newTunnelingProxy(t, http.HandlerFunc(s.handler))
	sp.perRequest = http.HandlerFunc(s.handler)
	e := newEnv(t, sp, Options{Allowed: prometheusAllowed, MaxConnsPerCluster: 1}, "c1")

	code, _ := e.get(t, "/c1/api")
	g.Expect(code).To(Equal(http.StatusOK))
	code, body := e.get(t, prometheusPath)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(Equal("served /api/v1/query"))
	code, _ = e.get(t, "/c1/api")
	g.Expect(code).To(Equal(http.StatusOK))

	_, maxOpen, _ := e.dialer.stats()
	g.Expect(maxOpen).To(Equal(1))
	g.Expect(e.dialer.dials.Load()).To(BeEquivalentTo(3), "each request closed the other transport's idle tunnel")
}

// The CONNECT's answer may be followed at once by what the service says first; that is kept for the reader.
func TestWhatFollowsTheServiceTunnelsAnswerIsKept(t *testing.T) {
	g := NewWithT(t)
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		defer server.Close()
		r := bufio.NewReader(server)
		if _, err := http.ReadRequest(r); err != nil {
			return
		}
		_, _ = fmt.Fprintf(server, "HTTP/1.1 200 OK\r\n%s: %s\r\n\r\nbanner\n", proxyhttp.HeaderTunnel, serviceHost)
	}()
	conn, host, err := connectService(t.Context(), client, ServiceRef{Namespace: "monitoring", Name: "prometheus", Proto: "http", Port: 9090})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(host).To(Equal(serviceHost))
	line, err := bufio.NewReader(conn).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("banner\n"))
}

// closeCounter counts the Close calls of a body.
type closeCounter struct {
	io.Reader
	closes atomic.Int32
}

func (c *closeCounter) Close() error { c.closes.Add(1); return nil }

// A held body is closed exactly once by whoever ends up with it: the round trip that read it, the release after a
// round trip that closed it unread, or the round trip that took it; never by the held body after take.
func TestAHeldBodyIsClosedOnceByWhoeverHasIt(t *testing.T) {
	g := NewWithT(t)
	newHeld := func() (*heldBody, *closeCounter) {
		c := &closeCounter{Reader: strings.NewReader("body")}
		return &heldBody{body: c}, c
	}

	h, c := newHeld()
	_, _ = io.ReadAll(h)
	g.Expect(h.Close()).To(Succeed())
	g.Expect(c.closes.Load()).To(BeEquivalentTo(1), "read, then closed: closed at once")
	g.Expect(h.take()).To(BeFalse(), "a body read from cannot go to another round trip")

	h, c = newHeld()
	g.Expect(h.Close()).To(Succeed())
	g.Expect(c.closes.Load()).To(BeZero(), "closed unread before the round trip is settled: kept")
	h.release()
	g.Expect(c.closes.Load()).To(BeEquivalentTo(1), "released: the close happens")
	g.Expect(h.Close()).To(Succeed())
	g.Expect(c.closes.Load()).To(BeEquivalentTo(1), "closed once only")

	h, c = newHeld()
	h.release()
	g.Expect(c.closes.Load()).To(BeZero(), "released before any Close: nothing to close yet")
	g.Expect(h.Close()).To(Succeed())
	g.Expect(c.closes.Load()).To(BeEquivalentTo(1), "after release a Close goes straight through")

	h, c = newHeld()
	g.Expect(h.Close()).To(Succeed())
	g.Expect(h.take()).To(BeTrue())
	g.Expect(h.Close()).To(Succeed())
	_, err := h.Read(make([]byte, 4))
	g.Expect(err).To(MatchError(errBodyTaken))
	g.Expect(c.closes.Load()).To(BeZero(), "taken: the held body neither reads nor closes it")
	got, _ := io.ReadAll(c)
	g.Expect(string(got)).To(Equal("body"), "nothing of a taken body was read")
}

// "Bearer garbage" is not a credential: for a service whose callers must bring a bearer token, a token the hub does
// not know goes on only once the cluster says it authenticates, and the cluster's answer is kept for a while. A
// service that authenticates its callers itself (token=optional) gets what the caller sent.
func TestABearerTokenServiceGetsOnlyTokensThatAuthenticate(t *testing.T) {
	g := NewWithT(t)
	var s seen
	sp := newTunnelingProxy(t, http.HandlerFunc(s.handler))
	var reviews atomic.Int32
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" {
			reviews.Add(1)
		}
		sp.ServeHTTP(w, r)
	})
	allowed := allowlist.List{
		{Namespace: "monitoring", Name: "prometheus", Port: 9090},
		{Namespace: "monitoring", Name: "grafana", Port: 3000, TokenOptional: true},
	}
	e := newEnv(t, counted, Options{Allowed: allowed}, "c1")
	call := func(path, auth string) (int, string) {
		t.Helper()
		resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, path, http.Header{"Authorization": {auth}}))
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	for range 2 {
		code, body := call(prometheusPath, "Bearer garbage")
		g.Expect(code).To(Equal(http.StatusUnauthorized), body)
		g.Expect(decodeStatus(t, body).Message).To(ContainSubstring(`authenticates neither on the hub nor on cluster "c1"`))
	}
	g.Expect(s.count()).To(BeZero(), "nothing reached the service")
	g.Expect(reviews.Load()).To(BeEquivalentTo(1), "the cluster's refusal is kept")

	code, body := call(prometheusPath, testToken)
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(s.last().Header.Get("Authorization")).To(Equal(testToken), "a token that authenticates goes on as it came")

	code, body = call("/c1/api/v1/namespaces/monitoring/services/http:grafana:3000/proxy-service/login", "Bearer the-services-own")
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(s.last().Header.Get("Authorization")).To(Equal("Bearer the-services-own"), "token=optional: the service decides")
	g.Expect(reviews.Load()).To(BeEquivalentTo(2), "the cluster was asked about the first two tokens only")
}
