package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// grants stands for the hub's RBAC: the clusters each user may get clusters/proxy of. It records what it was asked.
type grants struct {
	mu      sync.Mutex
	allowed map[string][]string
	asked   []hubidentity.Identity
	down    bool
}

func (g *grants) Authorize(_ context.Context, id hubidentity.Identity, cluster, verb string) (hubidentity.Decision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, id)
	if g.down {
		return hubidentity.Decision{}, errors.New("the hub is down")
	}
	for _, c := range g.allowed[id.User] {
		if c == cluster && verb == "get" {
			return hubidentity.Decision{Allowed: true}, nil
		}
	}
	return hubidentity.Decision{}, nil
}

// Who holds a client certificate of the signer decides nothing on the frontends: the proxy-client reaches every
// cluster, a ProxyCertificate's certificate the clusters the hub's RBAC grants its identity, and a certificate
// without either URI SAN the issuer writes (whatever its name) none.
func TestFrontendsLetAProxyCertificateReachOnlyTheClustersTheHubGrantsIt(t *testing.T) {
	g := NewWithT(t)
	toolUser, toolGroups := contract.CertificateIdentity("team-a", "tool")
	hub := &grants{allowed: map[string][]string{toolUser: {"c1"}}}
	f := startFixture(t, false, nil, func(o *Options) { o.Hub = hub })
	for _, c := range []string{"c1", "c2"} {
		_, err := f.agent(t, c, "ns", "agent-"+c, "host="+c+"&host="+c+".ns", map[string]string{c + ":443": httpTarget(t, c+"-apiserver")})
		g.Expect(err).NotTo(HaveOccurred())
	}
	issue := func(name string, spec leafSpec) *tlsConfigOf {
		cert, key, _ := f.pki.issue(t, name, spec)
		return &tlsConfigOf{name: name, cfg: f.pki.clientTLS(t, cert, key)}
	}
	tool := issue("tool", leafSpec{cn: "anything", orgs: []string{"system:masters"}, uris: []string{contract.CertificateURI("team-a", "tool")}})
	// A tenant may name its certificate like the proxy-client; without the role URI it is no more than a stranger.
	lookalike := issue("lookalike", leafSpec{cn: "cluster-proxy-proxy-client"})

	reach := func(c *tlsConfigOf, cluster string) (grpcErr, connectErr error) {
		conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: c.cfg}).DialCluster(context.Background(), cluster, 443)
		if err == nil {
			_, err = get(conn, bufio.NewReader(conn), cluster, "/")
			_ = conn.Close()
		}
		grpcErr = err
		cc, br, err := httpConnect(f.addrs.HTTPConnect, c.cfg, cluster+":443")
		if err == nil {
			_, err = get(cc, br, cluster, "/")
			_ = cc.Close()
		}
		return grpcErr, err
	}

	for _, cluster := range []string{"c1", "c2"} {
		grpcErr, connectErr := reach(&tlsConfigOf{name: "proxy-client", cfg: f.proxyTL}, cluster)
		g.Expect(grpcErr).NotTo(HaveOccurred(), "the proxy-client reaches %s through gRPC", cluster)
		g.Expect(connectErr).NotTo(HaveOccurred(), "the proxy-client reaches %s through CONNECT", cluster)
	}

	grpcErr, connectErr := reach(tool, "c1")
	g.Expect(grpcErr).NotTo(HaveOccurred(), "the granted cluster through gRPC")
	g.Expect(connectErr).NotTo(HaveOccurred(), "the granted cluster through CONNECT")
	grpcErr, connectErr = reach(tool, "c2")
	g.Expect(grpcErr).To(MatchError(And(ContainSubstring(`"`+toolUser+`" cannot get resource "clusters/proxy"`),
		ContainSubstring(`for cluster "c2"`), ContainSubstring("(ProxyCertificate team-a/tool)"))))
	g.Expect(connectErr).To(MatchError(ContainSubstring("403 Forbidden")))
	hub.mu.Lock()
	g.Expect(hub.asked).NotTo(BeEmpty())
	for _, id := range hub.asked {
		g.Expect(id.User).To(Equal(toolUser), "the hub is asked about the certificate's ProxyCertificate, never its subject")
		g.Expect(id.Groups).To(Equal(toolGroups))
	}
	hub.mu.Unlock()

	for _, cluster := range []string{"c1", "c2"} {
		grpcErr, connectErr = reach(lookalike, cluster)
		g.Expect(grpcErr).To(MatchError(ContainSubstring("neither the proxy-client nor a ProxyCertificate's")), cluster)
		g.Expect(connectErr).To(MatchError(ContainSubstring("403 Forbidden")), cluster)
	}

	// The fleet's agents and tunnel probes are the operator's view: the proxy-client's only.
	for _, path := range []string{"/agents", "/tunnels"} {
		resp, err := httpsClient(tool.cfg).Get("https://" + f.addrs.HTTPConnect + path)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden), path)
	}

	// A hub that cannot answer opens nothing.
	hub.mu.Lock()
	hub.down = true
	hub.mu.Unlock()
	grpcErr, connectErr = reach(tool, "c2")
	g.Expect(grpcErr).To(MatchError(ContainSubstring("cannot authorize ProxyCertificate team-a/tool with the hub")))
	g.Expect(connectErr).To(HaveOccurred())
}

func TestWithoutAHubAProxyCertificateReachesNoClusterOnTheFrontends(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	_, err := f.agent(t, "c1", "ns", "agent-c1", "host=c1&host=c1.ns", map[string]string{"c1:443": httpTarget(t, "c1-apiserver")})
	g.Expect(err).NotTo(HaveOccurred())
	cert, key, _ := f.pki.issue(t, "tool", leafSpec{cn: "tool", uris: []string{contract.CertificateURI("team-a", "tool")}})
	_, err = (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.pki.clientTLS(t, cert, key)}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).To(MatchError(ContainSubstring("cannot ask the hub's RBAC")))
	conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred(), "the proxy-client needs no hub")
	_ = conn.Close()
}

type tlsConfigOf struct {
	name string
	cfg  *tls.Config
}

// A hub program that read the existing add-on's proxy-client Secret before the switch holds a certificate of the same
// CA without the role URI. The one the manager recorded by fingerprint when it took the add-on's CA over reaches
// every cluster; another certificate of that CA without the URI (an add-on agent's, a tenant's lookalike) still
// reaches none, whatever it is named.
func TestFrontendsLetTheAdoptedProxyClientOfTheAddOnReachEveryCluster(t *testing.T) {
	g := NewWithT(t)
	pki := newTestPKI(t, false)
	addonCert, addonKey, addonLeaf := pki.issue(t, "addon-proxy-client", leafSpec{cn: "cluster-proxy-proxy-client"})
	otherCert, otherKey, _ := pki.issue(t, "addon-agent", leafSpec{cn: "open-cluster-management:cluster-proxy:proxy-agent",
		orgs: []string{"open-cluster-management:cluster-proxy"}})
	f := startFixtureOn(t, pki, nil, func(o *Options) {
		o.AdoptedProxyClients = [][sha256.Size]byte{sha256.Sum256(addonLeaf.Raw)}
	}, nil)
	for _, c := range []string{"c1", "c2"} {
		_, err := f.agent(t, c, "ns", "agent-"+c, "host="+c+"&host="+c+".ns", map[string]string{c + ":443": httpTarget(t, c+"-apiserver")})
		g.Expect(err).NotTo(HaveOccurred())
	}
	adopted, other := pki.clientTLS(t, addonCert, addonKey), pki.clientTLS(t, otherCert, otherKey)
	for _, cluster := range []string{"c1", "c2"} {
		conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: adopted}).DialCluster(context.Background(), cluster, 443)
		g.Expect(err).NotTo(HaveOccurred(), "the adopted proxy-client reaches %s through gRPC", cluster)
		body, err := get(conn, bufio.NewReader(conn), cluster, "/")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(body).To(ContainSubstring(cluster + "-apiserver"))
		_ = conn.Close()
		cc, br, err := httpConnect(f.addrs.HTTPConnect, adopted, cluster+":443")
		g.Expect(err).NotTo(HaveOccurred(), "the adopted proxy-client reaches %s through CONNECT", cluster)
		_, err = get(cc, br, cluster, "/")
		g.Expect(err).NotTo(HaveOccurred())
		_ = cc.Close()

		_, err = (&TunnelDialer{Address: f.addrs.Frontend, TLS: other}).DialCluster(context.Background(), cluster, 443)
		g.Expect(err).To(MatchError(ContainSubstring("neither the proxy-client nor a ProxyCertificate's")), cluster)
	}
	// Reaching clusters is all it keeps: the operator's own view of the fleet stays the operator's proxy-client's.
	resp, err := httpsClient(adopted).Get("https://" + f.addrs.HTTPConnect + "/agents")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
}

func TestFrontendDialsAreAuditedWithTheCertificatesIdentityAndTheDecision(t *testing.T) {
	g := NewWithT(t)
	toolUser, toolGroups := contract.CertificateIdentity("team-a", "tool")
	hub := &grants{allowed: map[string][]string{toolUser: {"c1"}}}
	opts := audit.NewOptions()
	opts.LogPath = filepath.Join(t.TempDir(), "audit.log")
	auditor, err := audit.New(opts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(auditor.Shutdown)
	f := startFixture(t, false, nil, func(o *Options) { o.Hub, o.Audit = hub, auditor })
	for _, c := range []string{"c1", "c2"} {
		_, err := f.agent(t, c, "ns", "agent-"+c, "host="+c+"&host="+c+".ns", map[string]string{c + ":443": httpTarget(t, c+"-apiserver")})
		g.Expect(err).NotTo(HaveOccurred())
	}
	cert, key, _ := f.pki.issue(t, "tool", leafSpec{cn: "anything", uris: []string{contract.CertificateURI("team-a", "tool")}})
	tool := f.pki.clientTLS(t, cert, key)
	conn, err := (&TunnelDialer{Address: f.addrs.Frontend, TLS: tool}).DialCluster(context.Background(), "c1", 443)
	g.Expect(err).NotTo(HaveOccurred())
	_ = conn.Close()
	_, _, err = httpConnect(f.addrs.HTTPConnect, tool, "c2:443")
	g.Expect(err).To(MatchError(ContainSubstring("403 Forbidden")))
	cc, _, err := httpConnect(f.addrs.HTTPConnect, f.proxyTL, "c2:443")
	g.Expect(err).NotTo(HaveOccurred())
	_ = cc.Close()

	raw, err := os.ReadFile(opts.LogPath)
	g.Expect(err).NotTo(HaveOccurred())
	var events []auditv1.Event
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev auditv1.Event
		g.Expect(json.Unmarshal([]byte(line), &ev)).To(Succeed())
		events = append(events, ev)
	}
	g.Expect(events).To(HaveLen(3), "one event a dial")
	g.Expect(events[0].Annotations).To(And(HaveKeyWithValue(audit.AnnotationVia, "grpc"), HaveKeyWithValue(audit.AnnotationCluster, "c1")))
	g.Expect(events[0].User.Username).To(Equal(toolUser), "the ProxyCertificate's identity, never the subject it chose")
	g.Expect(events[0].User.Groups).To(Equal(toolGroups))
	g.Expect(events[0].Verb).To(Equal("connect"))
	g.Expect(events[0].ResponseStatus.Code).To(BeEquivalentTo(http.StatusOK))
	g.Expect(events[1].Annotations).To(And(HaveKeyWithValue(audit.AnnotationVia, "http-connect"), HaveKeyWithValue(audit.AnnotationCluster, "c2")))
	g.Expect(events[1].ResponseStatus.Code).To(BeEquivalentTo(http.StatusForbidden), "the refusal is on the record")
	g.Expect(events[2].User.Username).To(Equal("cluster-proxy-proxy-client"))
	g.Expect(events[2].ResponseStatus.Code).To(BeEquivalentTo(http.StatusOK))
}
