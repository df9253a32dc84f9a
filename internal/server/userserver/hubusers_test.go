package userserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

const hubToken = "Bearer hub-alice"

// fakeHub knows one hub token, alice's, and lets alice reach the clusters in allowed.
type fakeHub struct {
	allowed map[string]bool
	err     error // when set, every review fails with it

	mu              sync.Mutex
	authentications int
	authorizations  []string // "<cluster> <verb>"
	vouched         []string
}

func (h *fakeHub) Vouch(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vouched = append(h.vouched, token)
}

func (h *fakeHub) vouchedFor() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.vouched...)
}

var alice = hubidentity.Identity{User: "system:serviceaccount:team:alice", UID: "a-1",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"},
	Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=7"}}}

func (h *fakeHub) Authenticate(_ context.Context, token string) (hubidentity.Identity, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.authentications++
	if h.err != nil {
		return hubidentity.Identity{}, false, h.err
	}
	return alice, "Bearer "+token == hubToken, nil
}

func (h *fakeHub) Authorize(_ context.Context, id hubidentity.Identity, cluster, verb string) (hubidentity.Decision, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.authorizations = append(h.authorizations, cluster+" "+verb)
	return hubidentity.Decision{Allowed: id.User == alice.User && h.allowed[cluster], Reason: "no RBAC rule"}, nil
}

func (h *fakeHub) asked() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.authentications, append([]string(nil), h.authorizations...)
}

// pki is a signer CA with the impersonator's certificate and agent certificates.
type pki struct {
	ca           *certs.KeyPair
	impersonator tls.Certificate
	foreign      tls.Certificate // the impersonator's name from another CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	g := NewWithT(t)
	now := time.Now()
	ca, err := certs.NewCA("signer", time.Hour, now)
	g.Expect(err).NotTo(HaveOccurred())
	p := &pki{ca: ca, impersonator: pair(t, ca, contract.ImpersonatorCommonName)}
	other, err := certs.NewCA("other", time.Hour, now)
	g.Expect(err).NotTo(HaveOccurred())
	p.foreign = pair(t, other, contract.ImpersonatorCommonName)
	return p
}

func pair(t *testing.T, ca *certs.KeyPair, cn string) tls.Certificate {
	t.Helper()
	kp, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: cn, Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (p *pki) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	return pool
}

// hubEnv is a user-server whose service-proxy stand-in serves TLS as the agent of agentCluster does: its agent
// certificate, and client certificates of the signer verified when sent. seen records what reached it and the client
// certificate's common name.
type hubEnv struct {
	*env
	seen      *seen
	clientCNs chan string
}

func newHubEnv(t *testing.T, p *pki, hub *fakeHub, agentCluster string, opts Options, impersonator tls.Certificate) *hubEnv {
	t.Helper()
	return newHubEnvServing(t, p, hub, agentCluster, opts, impersonator, nil)
}

// newHubEnvServing is newHubEnv whose service-proxy stand-in answers with backend after recording the request (nil:
// seen's answer).
func newHubEnvServing(t *testing.T, p *pki, hub *fakeHub, agentCluster string, opts Options, impersonator tls.Certificate,
	backend http.HandlerFunc) *hubEnv {
	t.Helper()
	h := &hubEnv{seen: &seen{}, clientCNs: make(chan string, 64)}
	sp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			cn = r.TLS.VerifiedChains[0][0].Subject.CommonName
		}
		h.clientCNs <- cn
		if backend == nil {
			h.seen.handler(w, r)
			return
		}
		h.seen.mu.Lock()
		h.seen.reqs = append(h.seen.reqs, r.Clone(r.Context()))
		h.seen.mu.Unlock()
		backend(w, r)
	}))
	sp.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair(t, p.ca, contract.AgentCommonNamePrefix+agentCluster)},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: p.pool()}
	sp.StartTLS()
	t.Cleanup(sp.Close)
	opts.Hub = hub
	opts.ImpersonatorTLS = func(cluster string) *tls.Config {
		return hubidentity.ImpersonatorTLSConfig(cluster, func() *tls.Certificate { return &impersonator }, p.pool)
	}
	h.env = newEnvAt(t, sp.Listener.Addr().String(), opts, "cluster1", "cluster2")
	return h
}

func (h *hubEnv) send(t *testing.T, method, path, token string, header http.Header) (int, metav1.Status) {
	t.Helper()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Authorization", token)
	resp, err := h.frontend.Client().Do(h.request(t, method, path, header))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	if resp.StatusCode != http.StatusOK {
		st = decodeStatus(t, string(body))
	}
	return resp.StatusCode, st
}

func TestHubUserGoesOnAsImpersonationOverTheImpersonatorCertificateWithoutTheirToken(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{allowed: map[string]bool{"cluster1": true}}
	h := newHubEnv(t, p, hub, "cluster1", Options{}, p.impersonator)

	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusOK), st.Message)
	got := h.seen.last()
	g.Expect(got.Header.Get("Authorization")).To(BeEmpty(), "the hub token stays on the hub")
	g.Expect(got.Header.Get("Impersonate-User")).To(Equal("cluster:hub:system:serviceaccount:team:alice"))
	g.Expect(got.Header.Values("Impersonate-Group")).To(Equal([]string{"cluster:hub:system:serviceaccounts", "cluster:hub:system:serviceaccounts:team"}))
	g.Expect(got.Header.Get("Impersonate-Uid")).To(Equal("a-1"))
	g.Expect(got.Header.Get("Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id")).To(Equal("JTI=7"))
	g.Expect(<-h.clientCNs).To(Equal(contract.ImpersonatorCommonName))
	_, authz := hub.asked()
	g.Expect(authz).To(Equal([]string{"cluster1 get"}))

	// A POST is authorized as create.
	code, _ = h.send(t, http.MethodPost, "/cluster1/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusOK))
	_, authz = hub.asked()
	g.Expect(authz).To(Equal([]string{"cluster1 get", "cluster1 create"}))
}

func TestHubUserWithoutTheHubsPermissionIs403AndNothingReachesTheCluster(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{allowed: map[string]bool{"cluster1": true}}
	h := newHubEnv(t, p, hub, "cluster2", Options{}, p.impersonator)

	code, st := h.send(t, http.MethodGet, "/cluster2/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(st.Reason).To(Equal(metav1.StatusReasonForbidden))
	g.Expect(st.Message).To(ContainSubstring(`cannot get resource "clusters/proxy" in API group "gateway.proxy.open-cluster-management.io" for cluster "cluster2"`))
	g.Expect(st.Message).To(ContainSubstring("system:serviceaccount:team:alice"))
	_, _, dialed := h.dialer.stats()
	g.Expect(dialed).To(BeEmpty(), "no tunnel for a refused request")
	g.Expect(h.seen.last()).To(BeNil())
}

func TestSkippingHubAuthorizationLeavesTheDecisionToTheCluster(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{} // allows nothing
	h := newHubEnv(t, p, hub, "cluster2", Options{SkipHubAuthorization: true}, p.impersonator)

	code, st := h.send(t, http.MethodGet, "/cluster2/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusOK), st.Message)
	_, authz := hub.asked()
	g.Expect(authz).To(BeEmpty())
	g.Expect(h.seen.last().Header.Get("Impersonate-User")).To(Equal("cluster:hub:system:serviceaccount:team:alice"))
}

func TestAPrefixNamesEveryHubUserAndGroup(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{allowed: map[string]bool{"cluster1": true}}
	h := newHubEnv(t, p, hub, "cluster1", Options{Mapping: hubidentity.Mapping{Prefix: "hub:"}}, p.impersonator)
	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusOK), st.Message)
	got := h.seen.last()
	g.Expect(got.Header.Get("Impersonate-User")).To(Equal("hub:system:serviceaccount:team:alice"))
	g.Expect(got.Header.Values("Impersonate-Group")).To(Equal([]string{"hub:system:serviceaccounts", "hub:system:serviceaccounts:team"}))
}

func TestATokenTheHubDoesNotKnowGoesToTheServiceProxyAsItCame(t *testing.T) {
	g := NewWithT(t)
	var s seen
	hub := &fakeHub{}
	e := newEnv(t, http.HandlerFunc(s.handler), Options{Hub: hub}, "cluster1")
	code, _ := e.get(t, "/cluster1/api/v1/namespaces")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(s.last().Header.Get("Authorization")).To(Equal(testToken))
	g.Expect(s.last().Header.Get("Impersonate-User")).To(BeEmpty())
	authn, authz := hub.asked()
	g.Expect(authn).To(Equal(1), "reviewed on the hub first")
	g.Expect(authz).To(BeEmpty())
}

func TestAHubThatCannotBeAskedIs503AndTheTokenGoesNowhere(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{Hub: &fakeHub{err: errors.New("connection refused")}}, "cluster1")
	code, body := e.get(t, "/cluster1/api/v1/namespaces")
	g.Expect(code).To(Equal(http.StatusServiceUnavailable))
	g.Expect(decodeStatus(t, body).Message).To(ContainSubstring("cannot authenticate the request with the hub"))
	g.Expect(s.last()).To(BeNil())
	_, _, dialed := e.dialer.stats()
	g.Expect(dialed).To(BeEmpty())
}

func TestAHubFloodedWithTokenReviewsIs429AndTheTokenGoesNowhere(t *testing.T) {
	g := NewWithT(t)
	var s seen
	e := newEnv(t, http.HandlerFunc(s.handler), Options{Hub: &fakeHub{err: fmt.Errorf("hub TokenReview: %w", review.ErrBusy)}}, "cluster1")
	resp, err := e.frontend.Client().Do(e.request(t, http.MethodGet, "/cluster1/api/v1/namespaces", http.Header{"Authorization": {testToken}}))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("Retry-After")).To(Equal("1"), "client-go waits and sends it again")
	g.Expect(s.last()).To(BeNil())
}

// The hub reviewer the proxy-server runs is the one the user-server vouches to: the user-server finds it by a type
// assertion, which a renamed method would make fail in silence.
var _ voucher = (*hubidentity.Reviewer)(nil)

func TestATokenTheClusterAcceptedIsVouchedForOnTheHub(t *testing.T) {
	g := NewWithT(t)
	code := http.StatusOK
	var mu sync.Mutex
	hub := &fakeHub{}
	e := newEnv(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(code)
	}), Options{Hub: hub}, "cluster1")
	token := strings.TrimPrefix(testToken, "Bearer ")

	got, _ := e.get(t, "/cluster1/api/v1/namespaces")
	g.Expect(got).To(Equal(http.StatusOK))
	g.Expect(hub.vouchedFor()).To(Equal([]string{token}))

	mu.Lock()
	code = http.StatusUnauthorized
	mu.Unlock()
	got, _ = e.get(t, "/cluster1/api/v1/namespaces")
	g.Expect(got).To(Equal(http.StatusUnauthorized))
	got, _ = e.get(t, "/cluster-nobody-serves/api/v1/namespaces")
	g.Expect(got).To(Equal(http.StatusNotFound))
	g.Expect(hub.vouchedFor()).To(HaveLen(1), "neither the cluster's 401 nor the user-server's own 404 vouches for a token")
}

// TestAHubUsersImpersonateHeadersGoOnAsAQuestionForTheCluster: a hub user's Impersonate-* never reach the agent as
// the impersonator's word; they go as Requested-Impersonate-*, and the hub user as the impersonation, so that the
// cluster's service-proxy asks the cluster's RBAC whether that user may impersonate them.
func TestAHubUsersImpersonateHeadersGoOnAsAQuestionForTheCluster(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{allowed: map[string]bool{"cluster1": true}}
	h := newHubEnv(t, p, hub, "cluster1", Options{}, p.impersonator)
	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, http.Header{
		"impersonate-user":            {"system:admin"},
		"Impersonate-Group":           {"system:masters"},
		"Requested-Impersonate-User":  {"smuggled"}, // the client's own: dropped
		"Impersonate-Extra-Scopes":    {"view"},
		"Requested-Impersonate-Group": {"smuggled-group"},
	})
	g.Expect(code).To(Equal(http.StatusOK), st.Message)
	got := h.seen.last()
	g.Expect(got.Header.Get("Impersonate-User")).To(Equal("cluster:hub:system:serviceaccount:team:alice"), "the hub user, as always")
	g.Expect(got.Header.Values("Impersonate-Group")).NotTo(ContainElement("system:masters"))
	g.Expect(got.Header.Get("Requested-Impersonate-User")).To(Equal("system:admin"))
	g.Expect(got.Header.Values("Requested-Impersonate-Group")).To(Equal([]string{"system:masters"}))
	g.Expect(got.Header.Values("Requested-Impersonate-Extra-Scopes")).To(Equal([]string{"view"}))
	_, authz := hub.asked()
	g.Expect(authz).To(Equal([]string{"cluster1 get"}), "the hub's RBAC still decides the cluster")

	code, st = h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy-service/metrics",
		hubToken, http.Header{"Impersonate-User": {"system:admin"}})
	g.Expect(code).To(Equal(http.StatusForbidden), "a service is not the kube-apiserver: %s", st.Message)
	g.Expect(st.Message).To(ContainSubstring("Impersonate-*"))
}

func TestHubUsersGoOnlyToTheAgentOfTheClusterTheyAskedFor(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	// The tunnel to cluster1 reaches an agent with cluster2's certificate.
	h := newHubEnv(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster2", Options{}, p.impersonator)
	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusBadGateway), st.Message)
	g.Expect(h.seen.last()).To(BeNil(), "no request reached the wrong agent")
}

func TestAnImpersonatorOfAnotherCAIsNotServedAsOne(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	h := newHubEnv(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1", Options{}, p.foreign)
	code, _ := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusBadGateway), "the service-proxy ends the handshake")
	g.Expect(h.seen.last()).To(BeNil())
}

func TestCountsRequestsPerClusterVerbAndCode(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	h := newHubEnv(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1", Options{}, p.impersonator)
	ok := clusterRequests.WithLabelValues("cluster1", viaUserServer, "get", "200")
	denied := clusterRequests.WithLabelValues("cluster2", viaUserServer, "delete", "403")
	before, beforeDenied := metricValue(t, ok), metricValue(t, denied)
	for range 3 {
		code, _ := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
		g.Expect(code).To(Equal(http.StatusOK))
	}
	code, _ := h.send(t, http.MethodDelete, "/cluster2/api/v1/namespaces/x", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(metricValue(t, ok) - before).To(Equal(3.0))
	g.Expect(metricValue(t, denied) - beforeDenied).To(Equal(1.0))
}

func TestCountsRequestsWithoutTheClusterWhenAskedTo(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	h := newHubEnv(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1", Options{MetricsWithoutCluster: true}, p.impersonator)
	fleet := clusterRequests.WithLabelValues("", viaUserServer, "get", "200")
	perCluster := clusterRequests.WithLabelValues("cluster1", viaUserServer, "get", "200")
	before, beforePerCluster := metricValue(t, fleet), metricValue(t, perCluster)
	for range 2 {
		code, _ := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
		g.Expect(code).To(Equal(http.StatusOK))
	}
	g.Expect(metricValue(t, fleet) - before).To(Equal(2.0))
	g.Expect(metricValue(t, perCluster)).To(Equal(beforePerCluster), "no series names the cluster")
}

// An agent older than the proxy-server serves its tunnel port in plain HTTP only: hub users get an answer that says
// so, and the cluster's own tokens keep working.
func TestAnAgentWithoutTLSOnItsTunnelPortIsNamedOlderToHubUsers(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	old := &seen{}
	sp := httptest.NewServer(http.HandlerFunc(old.handler))
	t.Cleanup(sp.Close)
	impersonator := p.impersonator
	e := newEnvAt(t, sp.Listener.Addr().String(), Options{Hub: &fakeHub{allowed: map[string]bool{"cluster1": true}},
		ImpersonatorTLS: func(cluster string) *tls.Config {
			return hubidentity.ImpersonatorTLSConfig(cluster, func() *tls.Certificate { return &impersonator }, p.pool)
		}}, "cluster1")
	h := &hubEnv{env: e, seen: old}

	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", hubToken, nil)
	g.Expect(code).To(Equal(http.StatusBadGateway))
	g.Expect(st.Message).To(And(ContainSubstring(`cluster "cluster1"`), ContainSubstring("older")), st.Message)
	g.Expect(old.last()).To(BeNil(), "nothing of the hub user's request was served")

	code, st = h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", "Bearer cluster1-own-token", nil)
	g.Expect(code).To(Equal(http.StatusOK), st.Message)
	g.Expect(old.last().Header.Get("Authorization")).To(Equal("Bearer cluster1-own-token"))
}

// A websocket exec is a GET that opens a stream into the cluster: the hub is asked for create, as for SPDY's POST,
// so that get on clusters/proxy reads a cluster without opening streams into it.
func TestAnUpgradeIsAuthorizedOnTheHubAsCreate(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{}
	h := newHubEnv(t, p, hub, "cluster1", Options{}, p.impersonator)
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}
	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces/default/pods/p/exec?command=sh", hubToken, upgrade)
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(st.Message).To(ContainSubstring(`cannot create resource "clusters/proxy"`))
	_, asked := hub.asked()
	g.Expect(asked).To(ConsistOf("cluster1 create"))
}

// A hub token in a websocket subprotocol is a hub token: reviewed on the hub, and left there.
func TestAHubTokenInAWebsocketSubprotocolStaysOnTheHub(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	hub := &fakeHub{allowed: map[string]bool{"cluster1": true}}
	h := newHubEnv(t, p, hub, "cluster1", Options{}, p.impersonator)
	protocol := "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(strings.TrimPrefix(hubToken, "Bearer ")))
	code, st := h.send(t, http.MethodGet, "/cluster1/api/v1/namespaces", "", http.Header{"Sec-Websocket-Protocol": {protocol + ", v5.channel.k8s.io"}})
	g.Expect(code).To(Equal(http.StatusOK), st.Message)
	got := h.seen.last()
	g.Expect(got.Header.Get("Impersonate-User")).To(Equal("cluster:hub:system:serviceaccount:team:alice"), "reviewed on the hub as the user")
	g.Expect(got.Header.Get("Authorization")).To(BeEmpty())
	g.Expect(got.Header.Values("Sec-Websocket-Protocol")).To(Equal([]string{"v5.channel.k8s.io"}), "the token went no further")
}
