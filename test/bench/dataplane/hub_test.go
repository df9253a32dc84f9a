//go:build bench

package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/gateway"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

const (
	gatewayGroup = "gateway.proxy.open-cluster-management.io"
	// kubeTLS is the managed kube-apiserver as the service-proxy reaches it for hub users: an HTTPS target with the
	// same paths as the others, which ignores the credential and the Impersonate-* headers it is sent.
	kubeTLS = "kube-tls.bench:443"
	// hubUserNamespace and hubUser are the hub ServiceAccount both hub modes send a token of.
	hubUserNamespace = "bench-users"
	hubUser          = "bench"
)

// hubStack is the hub of the two hub modes: a real kube-apiserver (envtest, with its front proxy) that serves our
// gateway, run in this process on the user-server's handler as the proxy-server runs it, through an APIService; and a
// hub ServiceAccount allowed clusters/proxy on c1 by the hub's RBAC, whose token both modes send. The kube-apiserver is
// a process of its own: its CPU counts under "other processes".
type hubStack struct {
	admin    *rest.Config
	reviewer *hubidentity.Reviewer
	token    string
	tls      *tls.Config // trusts the kube-apiserver
	dir      string
}

// needsHub reports whether BENCH_MODES asks for a mode that goes through the hub.
func needsHub(only map[string]bool) bool {
	return only == nil || only[keyHubUser] || only[keyAggregated]
}

func startHub(t *testing.T) *hubStack {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("the hub modes need a kube-apiserver: run 'make bench-data-plane', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)" +
			" (BENCH_MODES without hub-user and aggregated needs none)")
	}
	dir := t.TempDir()
	crds, err := repo.CRDPaths()
	must(t, err)
	env := &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true, Scheme: scheme.New()}
	must(t, testenv.FrontProxy(env, dir))
	cfg, err := env.Start()
	must(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)

	// c1 is a cluster of the hub, as the operator's ClusterProxyStatus reports it.
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster}}))
	cps := &proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "cluster-proxy"},
		Spec: proxyv1alpha1.ClusterProxyStatusSpec{ClusterName: cluster}}
	must(t, c.Create(ctx, cps))
	cps.Status = proxyv1alpha1.ClusterProxyStatusStatus{Installed: true, Available: true, ConnectedAgents: 1}
	must(t, c.Status().Update(ctx, cps))

	// The hub user: a ServiceAccount that may reach c1 (and read it) and nothing else.
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubUserNamespace}}))
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: hubUserNamespace, Name: hubUser}}
	must(t, c.Create(ctx, sa))
	must(t, c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bench-c1"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{gatewayGroup}, Resources: []string{"clusters/proxy"}, ResourceNames: []string{cluster}, Verbs: []string{"*"}},
		{APIGroups: []string{gatewayGroup}, Resources: []string{"clusters"}, ResourceNames: []string{cluster}, Verbs: []string{"get"}},
	}}))
	must(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-c1"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bench-c1"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: hubUserNamespace, Name: hubUser}}}))
	kube, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	tr, err := kube.CoreV1().ServiceAccounts(hubUserNamespace).CreateToken(ctx, hubUser, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	must(t, err)

	reviewer, err := hubidentity.NewReviewer(cfg, hubidentity.ReviewerOptions{})
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	return &hubStack{admin: cfg, reviewer: reviewer, token: tr.Status.Token, dir: dir,
		tls: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}}
}

// serveGateway runs the aggregated API on user, as every proxy-server replica does, with a serving certificate of p,
// registers it with an APIService and waits until a GET through it reaches the target.
func (h *hubStack) serveGateway(t *testing.T, p *pki, user *userserver.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	must(t, ln.Close())
	certFile, keyFile := p.leaf(t, "gateway", certs.LeafSpec{CommonName: "gateway", DNSNames: []string{"gateway.bench-hub.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	kubeconfig := filepath.Join(h.dir, "hub.kubeconfig")
	must(t, kubeclient.WriteKubeconfig(kubeconfig, "hub", h.admin, "", nil))
	gw, err := gateway.New(gateway.Options{BindAddress: "127.0.0.1", Port: port, CertFile: certFile, KeyFile: keyFile,
		HubKubeconfig: kubeconfig, Forward: user})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the gateway did not stop within a minute")
		}
	})
	c, err := client.New(h.admin, client.Options{Scheme: scheme.New()})
	must(t, err)
	must(t, testenv.RegisterAPIService(ctx, c, h.admin, "bench-hub", gatewayGroup, "v1alpha1", port, p.ca.CertPEM))

	// The gateway answers once its informer has c1.
	rt := &http.Transport{TLSClientConfig: h.tls}
	defer rt.CloseIdleConnections()
	var last string
	reached := func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.aggregatedBase()+"/small", nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			last = err.Error()
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		last = resp.Status + ": " + string(body)
		return resp.StatusCode == http.StatusOK
	}
	for deadline := time.Now().Add(time.Minute); !reached(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no GET through the aggregated API reached the target within a minute; the last answer: %s", last)
		}
	}
}

// aggregatedBase is c1's proxy on the hub's aggregated API.
func (h *hubStack) aggregatedBase() string {
	return strings.TrimSuffix(h.admin.Host, "/") + "/apis/" + gatewayGroup + "/v1alpha1/clusters/" + cluster + "/proxy"
}

// hubRoutes are the two ways a hub user reaches c1's kube-apiserver with the same hub token: to the user-server, which
// reviews it on the hub; and through the hub kube-apiserver's aggregated API. Both then go the same way: impersonation
// over the impersonator's TLS, through the tunnel, to the service-proxy.
func (w *world) hubRoutes() map[string]*route {
	if w.hub == nil {
		return nil
	}
	bearer := http.Header{"Authorization": {"Bearer " + w.hub.token}}
	return map[string]*route{
		keyHubUser: {key: keyHubUser, label: "hub user: user-server (hub token reviewed, cached) > impersonation > service-proxy > kube",
			base: "https://" + w.ours.addrs.UserServer + "/" + cluster, header: bearer, tls: w.ours.userTLS, dial: direct},
		keyAggregated: {key: keyAggregated, label: "aggregated: hub kube-apiserver > gateway > impersonation > service-proxy > kube",
			base: w.hub.aggregatedBase(), header: bearer,
			tls: w.hub.tls, dial: direct},
	}
}

// impersonator issues the certificate the proxy-server's hub users go downstream with.
func (p *pki) impersonator(t *testing.T) (certFile, keyFile string) {
	return p.leaf(t, "impersonator", certs.LeafSpec{CommonName: contract.ImpersonatorCommonName,
		URIs: []*url.URL{contract.SANURL(contract.ImpersonatorRoleURI)}, Usages: []certs.Usage{certs.UsageClientAuth}})
}

// kubeTLSTarget is the managed kube-apiserver of the hub modes, at kubeTLS; it also serves the exec phase's execs
// and the TokenReviews of their token.
func (p *pki) kubeTLSTarget(t *testing.T) *target {
	t.Helper()
	certFile, keyFile := p.leaf(t, "kube-tls", certs.LeafSpec{CommonName: "kube-tls", DNSNames: []string{hostOf(kubeTLS)}})
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	must(t, err)
	tg := startTarget(t, 0, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	serveKubeExec(tg)
	return tg
}

func hostOf(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		panic(fmt.Sprintf("%q: %v", hostport, err)) // the addresses are ours
	}
	return host
}

func direct(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// hubHop measures the hub kube-apiserver's hop alone, the floor of the aggregated path: GETs of clusters/c1, which
// the gateway answers from memory, one after the other over one kept-alive connection with the same token. It
// returns their p50, 0 without a hub.
func (b *bench) hubHop() time.Duration {
	h := b.w.hub
	if h == nil || (b.only != nil && !b.only[keyAggregated]) {
		return 0
	}
	ctx := context.Background()
	rt := &http.Transport{TLSClientConfig: h.tls, DisableCompression: true}
	defer rt.CloseIdleConnections()
	url := strings.TrimSuffix(h.aggregatedBase(), "/proxy")
	get := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return err
	}
	var samples []time.Duration
	for i := range latencyWarmup + latencyRounds*latencyPerRound {
		t0 := time.Now()
		if err := get(); err != nil {
			b.t.Errorf("the hub's hop alone: %v", err)
			return 0
		}
		if i >= latencyWarmup {
			samples = append(samples, time.Since(t0))
		}
	}
	slices.Sort(samples)
	return percentile(samples, 50)
}
