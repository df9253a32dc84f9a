package serviceproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// Two real control planes: the managed cluster, whose apiserver the proxy forwards to, and the hub, whose tokens the
// proxy must never accept (its users arrive as the impersonator's headers) and whose ServiceAccount issuer is the
// OIDC issuer of the OIDC specs. They have their own ServiceAccount issuers and keys, so a hub token is unknown to the
// managed cluster, as in production.
var (
	managedEnv, hubEnv     *envtest.Environment
	managedAdmin, hubAdmin kubernetes.Interface

	// agentTokenFile holds the token of the managed cluster's ServiceAccount cluster-proxy/agent, which may create
	// TokenReviews and impersonate.
	agentTokenFile string

	// The signer's CA and what it issued: the agent's serving pair, the hub's impersonator and another proxy client.
	// foreignImpersonator has the impersonator's name from a CA the proxy does not trust; namedImpersonator has the
	// name from the signer's CA but not the role URI (what anyone who may create a ProxyCertificate could ask for).
	signerCA, agentPair, impersonatorPair, proxyClientPair, foreignImpersonator, namedImpersonator *certs.KeyPair
)

const (
	agentNamespace = "cluster-proxy"
	teamNamespace  = "team"     // the managed cluster's users and services
	hubNamespace   = "hub-team" // the hub's users
)

func TestServiceProxy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Service-proxy Suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(),
		"run through 'make test', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")

	managedEnv, hubEnv = &envtest.Environment{}, &envtest.Environment{}
	// The hub's ServiceAccount issuer is the OIDC issuer of the OIDC specs: its discovery document must name keys at
	// an address of this machine.
	hubEnv.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, env := range []*envtest.Environment{managedEnv, hubEnv} {
		wg.Go(func() { _, errs[i] = env.Start() })
	}
	wg.Wait()
	DeferCleanup(func() {
		Expect(managedEnv.Stop()).To(Succeed())
		Expect(hubEnv.Stop()).To(Succeed())
	})
	Expect(errs).To(HaveEach(Not(HaveOccurred())))
	managedAdmin = kubernetes.NewForConfigOrDie(managedEnv.Config)
	hubAdmin = kubernetes.NewForConfigOrDie(hubEnv.Config)

	// Managed cluster: the agent, and users with and without rights.
	for _, ns := range []string{agentNamespace, teamNamespace} {
		createNamespace(ctx, managedAdmin, ns)
	}
	createServiceAccount(ctx, managedAdmin, agentNamespace, "agent")
	grantClusterRole(ctx, managedAdmin, "service-proxy-agent", []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		// userextras/<key> and uids: RBAC has no wildcard for the part after the slash.
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}, serviceAccountSubject(agentNamespace, "agent"))
	agentTokenFile = filepath.Join(GinkgoT().TempDir(), "token")
	Expect(os.WriteFile(agentTokenFile, []byte(tokenFor(ctx, managedAdmin, agentNamespace, "agent")+"\n"), 0o600)).To(Succeed())

	for _, sa := range []string{"reader", "nobody", "impersonator"} {
		createServiceAccount(ctx, managedAdmin, teamNamespace, sa)
	}
	grantClusterRole(ctx, managedAdmin, "namespace-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
	}, serviceAccountSubject(teamNamespace, "reader"),
		rbacv1.Subject{Kind: rbacv1.UserKind, Name: "cluster:hub:system:serviceaccount:" + hubNamespace + ":alice"})
	grantClusterRole(ctx, managedAdmin, "configmap-watcher", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
	}, serviceAccountSubject(teamNamespace, "reader"))
	grantClusterRole(ctx, managedAdmin, "impersonate-someone", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"someone"}},
	}, serviceAccountSubject(teamNamespace, "impersonator"))

	// Hub: two users; the managed cluster grants rights to alice's mapped name only.
	createNamespace(ctx, hubAdmin, hubNamespace)
	for _, sa := range []string{"alice", "bob"} {
		createServiceAccount(ctx, hubAdmin, hubNamespace, sa)
	}

	now := time.Now()
	var err error
	signerCA, err = certs.NewCA("cluster-proxy-signer", time.Hour, now)
	Expect(err).NotTo(HaveOccurred())
	issue := func(ca *certs.KeyPair, cn string, usage certs.Usage, uris ...*url.URL) *certs.KeyPair {
		kp, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: cn, URIs: uris, Usages: []certs.Usage{usage}, Duration: time.Hour}, now)
		Expect(err).NotTo(HaveOccurred())
		return kp
	}
	agentPair = issue(signerCA, contract.AgentCommonNamePrefix+"cluster1", certs.UsageClientAuth)
	impersonatorPair = issue(signerCA, contract.ImpersonatorCommonName, certs.UsageClientAuth, contract.SANURL(contract.ImpersonatorRoleURI))
	namedImpersonator = issue(signerCA, contract.ImpersonatorCommonName, certs.UsageClientAuth)
	proxyClientPair = issue(signerCA, "cluster-proxy-proxy-client", certs.UsageClientAuth)
	otherCA, err := certs.NewCA("another-signer", time.Hour, now)
	Expect(err).NotTo(HaveOccurred())
	foreignImpersonator = issue(otherCA, contract.ImpersonatorCommonName, certs.UsageClientAuth, contract.SANURL(contract.ImpersonatorRoleURI))
})

func createNamespace(ctx context.Context, cs kubernetes.Interface, name string) {
	GinkgoHelper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

func createServiceAccount(ctx context.Context, cs kubernetes.Interface, ns, name string) {
	GinkgoHelper()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// tokenFor is a fresh TokenRequest token of ServiceAccount ns/name; every call gives a different token, so caches
// never carry a result from one spec to the next.
func tokenFor(ctx context.Context, cs kubernetes.Interface, ns, name string) string {
	GinkgoHelper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

func serviceAccountSubject(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

func grantClusterRole(ctx context.Context, cs kubernetes.Interface, name string, rules []rbacv1.PolicyRule, subjects ...rbacv1.Subject) {
	GinkgoHelper()
	_, err := cs.RbacV1().ClusterRoles().Create(ctx,
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// proxyUnderTest is a service-proxy served on 127.0.0.1, in plain HTTP at url and in TLS at tlsURL (as the agent
// serves its tunnel port: ServerTLSConfig with the agent's pair and the signer's CA), with counters of what it asked.
type proxyUnderTest struct {
	url, tlsURL    string
	handler        http.Handler // what New returned
	managedReviews atomic.Int64 // TokenReviews sent to the managed cluster
	accessReviews  atomic.Int64 // SubjectAccessReviews sent to it
	dialer         *recordingDialer
}

// startProxy serves New(opts) where opts reach both test clusters with the agent's identities; change adjusts them.
func startProxy(change func(*Options)) *proxyUnderTest {
	GinkgoHelper()
	p := &proxyUnderTest{dialer: &recordingDialer{routes: map[string]string{}}}
	opts := Options{
		Kube: &rest.Config{
			Host:            managedEnv.Config.Host,
			TLSClientConfig: rest.TLSClientConfig{CAData: managedEnv.Config.CAData},
			BearerTokenFile: agentTokenFile,
			WrapTransport:   countReviews(&p.managedReviews, &p.accessReviews),
		},
		DialContext: p.dialer.DialContext,
	}
	if change != nil {
		change(&opts)
	}
	h, err := New(opts)
	Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(h)
	DeferCleanup(srv.Close)
	tlsSrv := httptest.NewUnstartedServer(h)
	pair, err := tls.X509KeyPair(agentPair.CertPEM, agentPair.KeyPEM)
	Expect(err).NotTo(HaveOccurred())
	roots := x509.NewCertPool()
	roots.AddCert(signerCA.Cert)
	tlsSrv.TLS = ServerTLSConfig(func() *tls.Certificate { return &pair }, func() *x509.CertPool { return roots })
	tlsSrv.StartTLS()
	DeferCleanup(tlsSrv.Close)
	p.url, p.tlsURL, p.handler = srv.URL, tlsSrv.URL, h
	return p
}

// tlsClient is a clientset that talks to the managed cluster through the proxy's TLS port, presenting pair (nil: no
// client certificate) and asking for imp.
func (p *proxyUnderTest) tlsClient(pair *certs.KeyPair, imp rest.ImpersonationConfig) kubernetes.Interface {
	GinkgoHelper()
	cfg := &rest.Config{Host: p.tlsURL, Impersonate: imp,
		// The agent's certificate is a client certificate; the hub side checks it by hand (not part of these specs).
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	if pair != nil {
		cfg.CertData, cfg.KeyData = pair.CertPEM, pair.KeyPEM
	}
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// client is a clientset that talks to the managed cluster through the proxy with token.
func (p *proxyUnderTest) client(token string, imp rest.ImpersonationConfig) kubernetes.Interface {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: p.url, BearerToken: token, Impersonate: imp})
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// countReviews counts the TokenReviews and the SubjectAccessReviews a client sends.
func countReviews(tokens, access *atomic.Int64) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.Method != http.MethodPost:
			case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
				tokens.Add(1)
			case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
				access.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// recordingDialer records every address the proxy dials and sends service addresses (<svc>.<ns>.svc:<port>) to
// the test servers registered for them; other addresses are dialed as they are.
type recordingDialer struct {
	mu     sync.Mutex
	routes map[string]string
	dialed []string
}

func (d *recordingDialer) route(serviceAddr, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.routes[serviceAddr] = to
}

func (d *recordingDialer) dialedAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	to, ok := d.routes[addr]
	d.mu.Unlock()
	if ok {
		addr = to
	} else if host, _, _ := net.SplitHostPort(addr); strings.HasSuffix(host, ".svc") {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}
