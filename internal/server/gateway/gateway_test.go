package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

const group = "gateway.proxy.open-cluster-management.io"

// forwarded is one request the gateway handed on.
type forwarded struct {
	cluster, path, query string
	id                   hubidentity.Identity
	header               http.Header
}

// recorder stands in for the user-server: it records what it is handed and answers by path: /stream writes a line
// every 300ms, 8 times; /upgrade switches protocols and echoes; anything else answers "ok".
type recorder struct {
	mu   sync.Mutex
	seen []forwarded
}

func (f *recorder) RefuseHubIdentity(w http.ResponseWriter, _ *http.Request, _, _ string, _ hubidentity.Identity,
	code int, reason metav1.StatusReason, message string) {
	proxyhttp.WriteStatus(w, code, reason, message)
}

func (f *recorder) ServeHubIdentity(w http.ResponseWriter, r *http.Request, cluster, path string, id hubidentity.Identity) {
	f.mu.Lock()
	f.seen = append(f.seen, forwarded{cluster: cluster, path: path, query: r.URL.RawQuery, id: id, header: r.Header.Clone()})
	f.mu.Unlock()
	switch path {
	case "/stream":
		for i := range 8 {
			fmt.Fprintf(w, "line %d\n", i)
			_ = http.NewResponseController(w).Flush()
			time.Sleep(900 * time.Millisecond) // the stream must outlive both servers' request timeouts
		}
	case "/upgrade":
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw)
	default:
		_, _ = w.Write([]byte("ok"))
	}
}

func (f *recorder) all() []forwarded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]forwarded(nil), f.seen...)
}

// The aggregated API behind a real kube-apiserver: its front proxy, its RBAC, its audit log.
func TestServesClustersAndProxiesAsTheHubUserBehindTheKubeAPIServer(t *testing.T) {
	g := NewWithT(t)
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("run through 'make test', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")
	}
	dir := t.TempDir()
	now := time.Now()
	servingCA := must(certs.NewCA("gateway-ca", time.Hour, now))
	serving := must(certs.IssueLeaf(servingCA, certs.LeafSpec{CommonName: "gateway", DNSNames: []string{"gateway.test.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, now))
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, data, 0o600)).To(Succeed())
		return p
	}
	auditLog := filepath.Join(dir, "audit.log")
	policy := write("audit-policy.yaml", []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  resources: [{group: "`+group+`"}]
- level: None
`))

	crds, err := repo.CRDPaths()
	g.Expect(err).NotTo(HaveOccurred())
	env := &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	api := env.ControlPlane.GetAPIServer().Configure()
	g.Expect(testenv.FrontProxy(env, dir)).To(Succeed())
	api.Set("audit-policy-file", policy)
	api.Set("audit-log-path", auditLog)
	api.Set("request-timeout", "5s") // a proxied stream must outlive it
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	c := must(client.New(cfg, client.Options{}))
	g.Expect(proxyv1alpha1.AddToScheme(c.Scheme())).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster1"}})).To(Succeed())
	cps := &proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster1", Name: "cluster-proxy"},
		Spec: proxyv1alpha1.ClusterProxyStatusSpec{ClusterName: "cluster1"}}
	g.Expect(c.Create(ctx, cps)).To(Succeed())
	cps.Status = proxyv1alpha1.ClusterProxyStatusStatus{Installed: true, Available: true, ConnectedAgents: 2,
		Probe: &proxyv1alpha1.ProbeStatus{Health: "ok", Latency: "3ms"}}
	g.Expect(c.Status().Update(ctx, cps)).To(Succeed())

	hubKubeconfig := filepath.Join(dir, "hub.kubeconfig")
	g.Expect(kubeclient.WriteKubeconfig(hubKubeconfig, "hub", cfg, "", nil)).To(Succeed())
	port := freePort(t)
	fwd := &recorder{}
	srv, err := New(Options{BindAddress: "127.0.0.1", Port: port, CertFile: write("serving.crt", serving.CertPEM),
		KeyFile: write("serving.key", serving.KeyPEM), HubKubeconfig: hubKubeconfig, Forward: fwd, requestTimeout: 5 * time.Second,
		TLSProfileFile: write("tls-profile.json", []byte(`{"minTLSVersion":"VersionTLS13"}`))})
	g.Expect(err).NotTo(HaveOccurred())
	served := make(chan error, 1)
	go func() { served <- srv.Run(ctx) }()

	// Registered as the operator registers it, with a Service that leads to this test's port.
	g.Expect(testenv.RegisterAPIService(ctx, c, cfg, "test", group, "v1alpha1", port, servingCA.CertPEM)).To(Succeed())

	// The listener applies the proxy-server's TLS profile: TLS 1.3 only, here.
	gatewayAddr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA.CertPEM)
	_, err = tls.Dial("tcp", gatewayAddr, &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS12})
	g.Expect(err).To(MatchError(ContainSubstring("protocol version")), "TLS 1.2 is refused")
	tls13 := must(tls.Dial("tcp", gatewayAddr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}))
	g.Expect(tls13.ConnectionState().Version).To(Equal(uint16(tls.VersionTLS13)))
	_ = tls13.Close()

	// alice may reach cluster1 only, and list clusters; bob may do nothing.
	g.Expect(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{"clusters/proxy"}, ResourceNames: []string{"cluster1"}, Verbs: []string{"*"}},
		{APIGroups: []string{group}, Resources: []string{"clusters"}, Verbs: []string{"get", "list", "watch"}},
	}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "alice"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}})).To(Succeed())
	userConfig := func(name string, groups ...string) *rest.Config {
		u, err := env.AddUser(envtest.User{Name: name, Groups: groups}, rest.CopyConfig(cfg))
		g.Expect(err).NotTo(HaveOccurred())
		return u.Config()
	}
	alice, bob := userConfig("alice", "team"), userConfig("bob")
	// The hub's RBAC sees a new role a moment after it is written; the gateway's authorizer keeps a denial for 10s.
	awaitAllowed(ctx, g, alice, "list", "clusters", "", "")
	awaitAllowed(ctx, g, alice, "get", "clusters", "proxy", "cluster1")
	raw := func(cfg *rest.Config, method, path string) (int, []byte) {
		rc := must(rest.RESTClientFor(withCodecs(cfg)))
		req := rc.Verb(method)
		if p, q, ok := strings.Cut(path, "?"); ok {
			path = p
			for _, kv := range strings.Split(q, "&") {
				k, v, _ := strings.Cut(kv, "=")
				req = req.Param(k, v)
			}
		}
		res := req.AbsPath(path).Do(ctx)
		var code int
		res.StatusCode(&code)
		body, _ := res.Raw()
		return code, body
	}
	proxy := "/apis/" + group + "/v1alpha1/clusters/"

	// clusters, from the ClusterProxyStatus.
	code, body := raw(alice, http.MethodGet, "/apis/"+group+"/v1alpha1/clusters")
	g.Expect(code).To(Equal(http.StatusOK), string(body))
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				Installed, Available bool
				ConnectedAgents      int32
				ProbedHealth         string
				Latency              string
			}
		}
	}
	g.Expect(json.Unmarshal(body, &list)).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	g.Expect(list.Items[0].Metadata.Name).To(Equal("cluster1"))
	g.Expect(list.Items[0].Status.ConnectedAgents).To(Equal(int32(2)))
	g.Expect(list.Items[0].Status.Latency).To(Equal("3ms"))

	// The proxy, as alice.
	code, body = raw(alice, http.MethodGet, proxy+"cluster1/proxy/api/v1/namespaces?limit=5")
	g.Expect(code).To(Equal(http.StatusOK), string(body))
	g.Expect(string(body)).To(Equal("ok"))
	seen := fwd.all()
	g.Expect(seen).To(HaveLen(1))
	g.Expect(seen[0].cluster).To(Equal("cluster1"))
	g.Expect(seen[0].path).To(Equal("/api/v1/namespaces"))
	g.Expect(seen[0].query).To(Equal("limit=5"))
	g.Expect(seen[0].id.User).To(Equal("alice"))
	g.Expect(seen[0].id.Groups).To(ContainElements("team", "system:authenticated"))
	g.Expect(seen[0].header.Get("Authorization")).To(BeEmpty())
	for k := range seen[0].header {
		g.Expect(strings.ToLower(k)).NotTo(HavePrefix("x-remote-"), "the front proxy's headers go no further")
	}

	// Refused by the hub's RBAC: the gateway never sees these.
	code, body = raw(alice, http.MethodGet, proxy+"cluster2/proxy/api")
	g.Expect(code).To(Equal(http.StatusForbidden), string(body))
	code, body = raw(bob, http.MethodGet, proxy+"cluster1/proxy/api")
	g.Expect(code).To(Equal(http.StatusForbidden), string(body))
	g.Expect(string(body)).To(ContainSubstring(`clusters/proxy`))
	g.Expect(fwd.all()).To(HaveLen(1))

	// An unknown cluster: 404 naming it.
	code, body = raw(rest.CopyConfig(cfg), http.MethodGet, proxy+"nowhere/proxy/api")
	g.Expect(code).To(Equal(http.StatusNotFound), string(body))
	g.Expect(string(body)).To(ContainSubstring(`\"nowhere\" not found`))

	// A stream outlives both servers' request timeouts (5s each here).
	streamCfg := withCodecs(alice)
	rc := must(rest.RESTClientFor(streamCfg))
	stream, err := rc.Get().AbsPath(proxy + "cluster1/proxy/stream").Stream(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	lines := 0
	sc := bufio.NewScanner(stream)
	for sc.Scan() {
		lines++
	}
	_ = stream.Close()
	g.Expect(lines).To(Equal(8), "every line of a 7.2s stream arrived")

	// An upgrade goes through both servers both ways.
	conn := dialTLS(t, cfg.Host, alice)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET %scluster1/proxy/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", proxy)
	g.Expect(err).NotTo(HaveOccurred())
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(status).To(HavePrefix("HTTP/1.1 101"))
	for {
		line, err := br.ReadString('\n')
		g.Expect(err).NotTo(HaveOccurred())
		if line == "\r\n" {
			break
		}
	}
	_, err = conn.Write([]byte("ping\n"))
	g.Expect(err).NotTo(HaveOccurred())
	echo, err := br.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(echo).To(Equal("ping\n"))

	// A reader is not a writer: with get on clusters/proxy alone, dave reads the cluster but opens no stream into it.
	g.Expect(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{"clusters/proxy"}, ResourceNames: []string{"cluster1"}, Verbs: []string{"get"}},
	}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dave"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reader"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "dave"}}})).To(Succeed())
	dave := userConfig("dave")
	awaitAllowed(ctx, g, dave, "get", "clusters", "proxy", "cluster1")
	code, body = raw(dave, http.MethodGet, proxy+"cluster1/proxy/api")
	g.Expect(code).To(Equal(http.StatusOK), string(body))
	daveConn := dialTLS(t, cfg.Host, dave)
	defer daveConn.Close()
	_, err = fmt.Fprintf(daveConn, "GET %scluster1/proxy/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", proxy)
	g.Expect(err).NotTo(HaveOccurred())
	daveStatus, err := bufio.NewReader(daveConn).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(daveStatus).To(HavePrefix("HTTP/1.1 403"), "an upgrade with get alone")

	// The hub's audit log names the user, the cluster and the verb.
	g.Eventually(func() string { b, _ := os.ReadFile(auditLog); return string(b) }).Should(And(
		ContainSubstring(`"username":"alice"`), ContainSubstring(`"resource":"clusters","name":"cluster1"`),
		ContainSubstring(`"subresource":"proxy"`)))

	// Straight to the gateway's port, past the hub's audit log: a hub token and a hub client certificate get 401, and
	// so do front-proxy headers without the front proxy's certificate.
	direct := func(cert *tls.Certificate, header http.Header) (int, string) {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
		req := must(http.NewRequestWithContext(ctx, http.MethodGet, "https://"+gatewayAddr+proxy+"cluster1/proxy/api", nil))
		req.Header = header
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster1", Name: "carol"}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "alice"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "cluster1", Name: "carol"}}})).To(Succeed())
	hubClients := must(kubernetes.NewForConfig(cfg))
	carolToken := must(kubeclient.ServiceAccountToken(ctx, hubClients, "cluster1", "carol", time.Hour))
	carol := &rest.Config{Host: cfg.Host, BearerToken: carolToken, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}}
	awaitAllowed(ctx, g, carol, "get", "clusters", "proxy", "cluster1")
	code, body = raw(carol, http.MethodGet, proxy+"cluster1/proxy/api")
	g.Expect(code).To(Equal(http.StatusOK), "the token works through the hub: %s", body)
	before := len(fwd.all())
	code, text := direct(nil, http.Header{"Authorization": {"Bearer " + carolToken}})
	g.Expect(code).To(Equal(http.StatusUnauthorized), "a hub token sent straight to the gateway: %s", text)
	alicePair := must(tls.X509KeyPair(alice.CertData, alice.KeyData))
	code, text = direct(&alicePair, http.Header{})
	g.Expect(code).To(Equal(http.StatusUnauthorized), "a hub client certificate sent straight to the gateway: %s", text)
	code, text = direct(nil, http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}})
	g.Expect(code).To(Equal(http.StatusUnauthorized), "front-proxy headers without its certificate: %s", text)
	g.Expect(fwd.all()).To(HaveLen(before), "nothing sent straight to the gateway was handed on")

	// kubectl get clusters prints the table.
	kc := filepath.Join(dir, "alice.kubeconfig")
	g.Expect(kubeclient.WriteKubeconfig(kc, "alice", alice, "", nil)).To(Succeed())
	out, err := kubeclient.Kubectl(kc, "get", "clusters."+group)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(And(ContainSubstring("AVAILABLE"), ContainSubstring("cluster1"), ContainSubstring("3ms")))

	cancel()
	g.Eventually(served).WithTimeout(time.Minute).Should(Receive(BeNil()))
}

// awaitAllowed waits until the hub's RBAC lets the user of cfg verb the gateway's resource (and subresource) name.
func awaitAllowed(ctx context.Context, g *WithT, cfg *rest.Config, verb, resource, subresource, name string) {
	cs := must(kubernetes.NewForConfig(cfg))
	g.Eventually(func() (bool, error) {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: group, Resource: resource, Subresource: subresource, Name: name, Verb: verb}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	}).WithTimeout(30*time.Second).Should(BeTrue(), "%s %s/%s %s", verb, resource, subresource, name)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func withCodecs(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	return cfg
}

// dialTLS opens a TLS connection to the kube-apiserver at host as the user of cfg (a client certificate).
func dialTLS(t *testing.T, host string, cfg *rest.Config) *tls.Conn {
	t.Helper()
	pair := must(tls.X509KeyPair(cfg.CertData, cfg.KeyData))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	addr := strings.TrimSuffix(strings.TrimPrefix(host, "https://"), "/")
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
