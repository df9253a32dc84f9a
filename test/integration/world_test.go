//go:build integration

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
)

// clusterName starts with a digit, which the existing addon cannot serve.
const clusterName = "1st-cluster"

// harness is everything one run starts.
type harness struct {
	hub, managed           *envtest.Environment
	hubConfig, managedConf *rest.Config
	managedClient          client.Client

	ca         *certs.KeyPair
	bundlePath string // CA bundle as the server and agent read it

	ports struct{ frontend, agent, health, admin, connect, user, agentHealth int }

	server, agent *process
	serverArgs    []string
	agentArgs     []string

	web *httptest.Server // an in-cluster HTTP service of the managed cluster, allow-listed as default/web

	// In-cluster https services, allow-listed as default/secure and default/untrusted on port 443. secure serves
	// secureCert, signed by a private CA that the service CA file (--service-ca-file) holds; untrusted is signed by a
	// private CA that is in no file.
	secure, untrusted *httptest.Server
	secureCert        atomic.Pointer[tls.Certificate]
	serviceCAPath     string

	// Files a hub client uses: the proxy-client pair and the CA bundle.
	clientCert, clientKey string
	// pki orders the test's own reads of a pair after a rotation's two writes: a certificate and its key are two files,
	// and a read between the writes would pair the new certificate with the old key. The processes under test reload
	// on their own and keep their last good pair.
	pki sync.RWMutex
	// Tokens: a managed-cluster user allowed to list namespaces, and a hub ServiceAccount.
	managedToken, hubToken string
	hubNobodyToken         string // a hub user the hub's RBAC lets reach no cluster
}

var world *harness

func (w *harness) serverMetrics() string {
	return fmt.Sprintf("http://%s/metrics", addr(w.ports.health))
}
func (w *harness) agentMetrics() string {
	return fmt.Sprintf("http://%s/metrics", addr(w.ports.agentHealth))
}

func startWorld() *harness {
	w := &harness{}
	w.hub, w.hubConfig = startAPIServer()
	w.managed, w.managedConf = startAPIServer()
	w.managedClient = must(client.New(w.managedConf, client.Options{}))
	w.ports.frontend, w.ports.agent, w.ports.health, w.ports.admin = freePort(), freePort(), freePort(), freePort()
	w.ports.connect, w.ports.user, w.ports.agentHealth = freePort(), freePort(), freePort()

	w.web = httptest.NewServer(echoService("web"))
	w.startHTTPSServices()

	mpc := w.configuration()
	w.issueCertificates()
	manifests := w.agentManifests(mpc)
	w.prepareManagedCluster(manifests)
	w.hubToken = w.hubServiceAccountToken()

	w.serverArgs = w.serverCommandLine(mpc)
	w.server = newProcess("proxy-server", build("cmd/proxy-server"), w.serverArgs...)
	w.server.start()
	w.agentArgs = w.agentCommandLine(manifests)
	w.agent = newProcess("proxy-agent", build("cmd/proxy-agent"), w.agentArgs...)
	w.agent.start()
	w.waitConnected()
	return w
}

func (w *harness) stop() {
	for _, p := range []*process{w.agent, w.server} {
		if p != nil {
			p.stop(false)
		}
	}
	for _, s := range []*httptest.Server{w.web, w.secure, w.untrusted} {
		if s != nil {
			s.Close()
		}
	}
	for _, e := range []*envtest.Environment{w.managed, w.hub} {
		if e != nil {
			_ = e.Stop()
		}
	}
}

func startAPIServer() (*envtest.Environment, *rest.Config) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	return env, cfg
}

// configuration is the ManagedProxyConfiguration whose rendered command lines the processes run: the ports are
// this run's free ports, the entrypoint is the loopback agent port.
func (w *harness) configuration() *proxyv1alpha1.ManagedProxyConfiguration {
	return &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{
				Image: "proxy:test", Replicas: 1, Namespace: "open-cluster-management-addon",
				Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
					Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: "127.0.0.1"},
					Port: int32(w.ports.agent),
				},
			},
			// The ConfigMap does not exist here: the agent reads this run's service CA file at the rendered mount.
			ProxyAgent: proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "proxy:test", Replicas: 1,
				AdditionalServiceCAConfigMap: "service-ca"},
			Deploy: &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{
				ProxyServer: int32(w.ports.frontend), AgentServer: int32(w.ports.agent), HealthServer: int32(w.ports.health),
				AdminServer: int32(w.ports.admin), HTTPConnectServer: int32(w.ports.connect),
			}},
			UserServer: &proxyv1alpha1.ManagedProxyConfigurationUserServer{
				AllowedServices: []proxyv1alpha1.AllowedService{
					{Namespace: "default", Name: "web", Port: 80, CallerAuthentication: proxyv1alpha1.CallerAuthenticationService},
					{Namespace: "default", Name: "secure", Port: 443},
					{Namespace: "default", Name: "untrusted", Port: 443},
				},
			},
		},
	}
}

// issueCertificates writes the hub certificates the operator would issue, and the agent certificate signed from a
// CSR with the subject the operator advertises, as the klusterlet would obtain it.
func (w *harness) issueCertificates() {
	now := time.Now()
	w.ca = must(certs.NewCA("cluster-proxy-test-ca", 24*time.Hour, now))
	w.bundlePath = writeFile("pki/ca.crt", w.ca.CertPEM)
	loopback := certs.LeafSpec{DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Duration: 12 * time.Hour}
	for _, name := range []string{"proxy-server", "agent-server", "user-server"} {
		spec := loopback
		spec.CommonName = name
		spec.Usages = []certs.Usage{certs.UsageServerAuth}
		w.writePair(name, must(certs.IssueLeaf(w.ca, spec, now)))
	}
	client := must(certs.IssueLeaf(w.ca, certs.LeafSpec{CommonName: "proxy-client", URIs: proxyClientRole, Usages: []certs.Usage{certs.UsageClientAuth}, Duration: 12 * time.Hour}, now))
	w.clientCert, w.clientKey = w.writePair("proxy-client", client)
	w.writePair("impersonator", must(certs.IssueLeaf(w.ca, certs.LeafSpec{CommonName: contract.ImpersonatorCommonName, URIs: impersonatorRole,
		Usages: []certs.Usage{certs.UsageClientAuth}, Duration: 12 * time.Hour}, now)))
	w.writeAgentCertificate("agent", clusterName, render.DefaultAgentNamespace, w.ca)
}

// The role URIs the operator writes into its proxy-client and impersonator certificates.
var (
	proxyClientRole  = []*url.URL{contract.SANURL(contract.ProxyClientRoleURI)}
	impersonatorRole = []*url.URL{contract.SANURL(contract.ImpersonatorRoleURI)}
)

func (w *harness) writePair(name string, kp *certs.KeyPair) (certPath, keyPath string) {
	w.pki.Lock()
	defer w.pki.Unlock()
	return writeFile("pki/"+name+"/tls.crt", kp.CertPEM), writeFile("pki/"+name+"/tls.key", kp.KeyPEM)
}

// writeAgentCertificate signs a CSR for cluster's agent (installed in namespace) and writes pki/<name>/tls.*.
func (w *harness) writeAgentCertificate(name, cluster, namespace string, ca *certs.KeyPair) {
	subject := contract.AgentCertificateSubject(cluster, namespace, certs.Fingerprint(ca.Cert))
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	csrDER := must(x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{
		CommonName: subject.CommonName, Organization: subject.Organizations, OrganizationalUnit: subject.OrganizationalUnits,
	}}, key))
	signed := must(certs.SignCSR(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}), 12*time.Hour, nil, time.Now()))
	keyDER := must(x509.MarshalECPrivateKey(key))
	w.pki.Lock()
	defer w.pki.Unlock()
	writeFile("pki/"+name+"/tls.crt", signed)
	writeFile("pki/"+name+"/tls.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// agentManifests are the objects of the agent's ManifestWork as the operator renders it for this run.
func (w *harness) agentManifests(mpc *proxyv1alpha1.ManagedProxyConfiguration) []*unstructured.Unstructured {
	work, _, err := render.AgentWork(render.AgentInput{Cluster: clusterName, MPC: withEntrypoint(mpc), CABundle: w.ca.CertPEM, EntrypointHost: "127.0.0.1"})
	Expect(err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	for _, m := range work.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		Expect(json.Unmarshal(m.Raw, &u.Object)).To(Succeed())
		out = append(out, u)
	}
	return out
}

// prepareManagedCluster applies the agent's namespace, ServiceAccount and RBAC exactly as the operator renders them
// into the ManifestWork, and a user of the managed cluster that may list and watch namespaces.
func (w *harness) prepareManagedCluster(manifests []*unstructured.Unstructured) {
	ctx := context.Background()
	for _, u := range manifests {
		if u.GetKind() == "Deployment" {
			continue // pods do not run here; the agent process below runs its command line
		}
		Expect(w.managedClient.Create(ctx, u.DeepCopy())).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
	}

	cs := must(kubernetes.NewForConfig(w.managedConf))
	mustCreate(w.managedClient, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "viewer"}})
	mustCreate(w.managedClient, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "namespace-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}})
	mustCreate(w.managedClient, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "namespace-viewer"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "namespace-viewer"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "viewer"},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "cluster:hub:system:serviceaccount:team:hub-user"},
		}})
	w.managedToken = serviceAccountToken(cs, "default", "viewer")
}

// withEntrypoint fills the status the operator would have published.
func withEntrypoint(mpc *proxyv1alpha1.ManagedProxyConfiguration) *proxyv1alpha1.ManagedProxyConfiguration {
	out := mpc.DeepCopy()
	out.Status.Entrypoint = net.JoinHostPort("127.0.0.1", fmt.Sprint(mpc.Spec.ProxyServer.Entrypoint.Port))
	return out
}

// hubServiceAccountToken is a hub user's token: ServiceAccount team/hub-user, whom the hub's RBAC lets reach this
// run's cluster (clusters/proxy with its name, every verb). team/nobody gets no such right.
func (w *harness) hubServiceAccountToken() string {
	hubClient := must(client.New(w.hubConfig, client.Options{}))
	mustCreate(hubClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	for _, name := range []string{"hub-user", "nobody"} {
		mustCreate(hubClient, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}})
	}
	mustCreate(hubClient, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reach-" + clusterName},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"gateway.proxy.open-cluster-management.io"}, Resources: []string{"clusters/proxy"},
			ResourceNames: []string{clusterName}, Verbs: []string{"*"}}}})
	mustCreate(hubClient, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reach-" + clusterName},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reach-" + clusterName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team", Name: "hub-user"}}})
	cs := must(kubernetes.NewForConfig(w.hubConfig))
	w.hubNobodyToken = serviceAccountToken(cs, "team", "nobody")
	return serviceAccountToken(cs, "team", "hub-user")
}

// agentHubKubeconfig is the add-on's hub identity. It holds no right on the hub: no hub token ever reaches an agent.
func (w *harness) agentHubKubeconfig() string {
	user := must(w.hub.AddUser(envtest.User{Name: "system:open-cluster-management:cluster:" + clusterName + ":addon:cluster-proxy:agent:proxy-agent",
		Groups: []string{csrreview.AllAgentsGroup}}, rest.CopyConfig(w.hubConfig)))
	return writeFile("agent/hub-kubeconfig", must(user.KubeConfig()))
}

// serverHubKubeconfig is the proxy-server's hub identity, with the rights the operator binds to the proxy-servers'
// ServiceAccount (render.ServerHubRBAC); here a user, as the process runs outside a pod.
func (w *harness) serverHubKubeconfig(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	hubClient := must(client.New(w.hubConfig, client.Options{}))
	const name = "proxy-server"
	user := must(w.hub.AddUser(envtest.User{Name: name}, rest.CopyConfig(w.hubConfig)))
	for _, o := range render.ServerHubRBAC(mpc) {
		o.SetOwnerReferences(nil)
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			b.Subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}
		case *rbacv1.RoleBinding:
			b.Subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}
		}
		mustCreate(hubClient, o.(client.Object))
	}
	return writeFile("kubeconfigs/proxy-server-hub", must(user.KubeConfig()))
}

// agentManagedKubeconfig stands in for the pod's in-cluster config: the agent ServiceAccount's token and the
// managed apiserver's CA.
func (w *harness) agentManagedKubeconfig() string {
	cs := must(kubernetes.NewForConfig(w.managedConf))
	token := serviceAccountToken(cs, render.DefaultAgentNamespace, render.AgentServiceAccountName)
	return writeFile("agent/kubeconfig", kubeconfig(w.managedConf.Host, w.managedConf.CAData, token))
}

func kubeconfig(server string, ca []byte, token string) []byte {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	return must(clientcmd.Write(*cfg))
}

func serviceAccountToken(cs kubernetes.Interface, ns, name string) string {
	return must(kubeclient.ServiceAccountToken(context.Background(), cs, ns, name, time.Hour))
}

func mustCreate(c client.Client, o client.Object) {
	ExpectWithOffset(1, c.Create(context.Background(), o)).To(Succeed())
}

// serverCommandLine is render.ServerArgs with the secret mounts replaced by this run's files, bound to loopback.
func (w *harness) serverCommandLine(mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	files := map[string]string{
		"--server-ca-cert": w.bundlePath, "--cluster-ca-cert": w.bundlePath,
		"--server-cert": "pki/proxy-server/tls.crt", "--server-key": "pki/proxy-server/tls.key",
		"--cluster-cert": "pki/agent-server/tls.crt", "--cluster-key": "pki/agent-server/tls.key",
		"--user-server-cert": "pki/user-server/tls.crt", "--user-server-key": "pki/user-server/tls.key",
		"--impersonator-cert": "pki/impersonator/tls.crt", "--impersonator-key": "pki/impersonator/tls.key",
		"--gateway-cert": "pki/user-server/tls.crt", "--gateway-key": "pki/user-server/tls.key",
		// The profile ConfigMap the operator renders, as the pod mounts it.
		"--tls-profile-file": writeFile("tls-profile/"+contract.TLSProfileKey,
			[]byte(must(render.TLSProfileConfigMap(mpc, contract.TLSProfile{})).Data[contract.TLSProfileKey])),
	}
	args := replaceFiles(render.ServerArgs(mpc), files)
	args = replaceFlag(args, "--user-server-port", fmt.Sprint(w.ports.user))
	// The kubelet's expansion of $(POD_IP): this process's "pod" is loopback.
	args = replaceFlag(args, "--health-bind-address", "127.0.0.1")
	// The aggregated API needs a kube-apiserver in front of it: internal/server/gateway and make e2e run it there.
	args = replaceFlag(args, "--gateway-port", "0")
	// The steady state: a cluster no agent has reached is unknown at once. A new replica's warm-up, when it is a
	// retryable 503 instead, is tested in internal/server/userserver.
	return append(args, "--bind-address=127.0.0.1", "--server-id=server-1", "--agent-warmup=0s",
		"--hub-kubeconfig="+w.serverHubKubeconfig(mpc))
}

// agentCommandLine is the rendered agent container's command line with the secret mounts replaced by this run's
// files, plus what a pod gets from Kubernetes: its in-cluster config (here a kubeconfig) and name resolution of
// in-cluster services (here --resolve, as hostAliases would).
func (w *harness) agentCommandLine(manifests []*unstructured.Unstructured) []string {
	var rendered []string
	for _, u := range manifests {
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, a := range containers[0].(map[string]any)["args"].([]any) {
			rendered = append(rendered, a.(string))
		}
	}
	Expect(rendered).NotTo(BeEmpty())
	files := map[string]string{
		"--ca-cert": w.bundlePath, "--agent-cert": "pki/agent/tls.crt", "--agent-key": "pki/agent/tls.key",
		"--hub-kubeconfig": w.agentHubKubeconfig(), "--service-ca-file": w.serviceCAPath,
	}
	args := replaceFiles(rendered, files)
	args = replaceFlag(args, "--health-server-port", fmt.Sprint(w.ports.agentHealth))
	return append(args, "--kubeconfig="+w.agentManagedKubeconfig(), "--agent-id=agent-1",
		"--resolve=web.default.svc:80="+w.web.Listener.Addr().String(),
		"--resolve=secure.default.svc:443="+w.secure.Listener.Addr().String(),
		"--resolve=untrusted.default.svc:443="+w.untrusted.Listener.Addr().String())
}

// echoService answers "<name> saw <path>".
func echoService(name string) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = fmt.Fprintf(rw, "%s saw %s", name, r.URL.Path)
	})
}

// startHTTPSServices starts default/secure and default/untrusted, each with a serving certificate from a private CA of
// its own, and writes secure's CA as the service CA file.
func (w *harness) startHTTPSServices() {
	secureCA := must(certs.NewCA("service-ca-1", 24*time.Hour, time.Now()))
	w.secureCert.Store(servingCertificate(secureCA, "secure.default.svc"))
	w.secure = startHTTPSService("secure", func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return w.secureCert.Load(), nil })
	untrusted := servingCertificate(must(certs.NewCA("service-ca-in-no-file", 24*time.Hour, time.Now())), "untrusted.default.svc")
	w.untrusted = startHTTPSService("untrusted", func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return untrusted, nil })
	w.serviceCAPath = writeFile("service-ca/service-ca.crt", secureCA.CertPEM)
}

// startHTTPSService serves echoService(name) over TLS with the certificate getCertificate returns. The service-proxy
// sends the service's host name (SNI), so getCertificate answers rather than httptest's own certificate.
func startHTTPSService(name string, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *httptest.Server {
	s := httptest.NewUnstartedServer(echoService(name))
	s.TLS = &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12}
	// Refused handshakes are what the specs expect; the agent's log has them from the service-proxy's side.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	return s
}

// servingCertificate is a serving certificate for dnsName signed by ca.
func servingCertificate(ca *certs.KeyPair, dnsName string) *tls.Certificate {
	leaf := must(certs.IssueLeaf(ca, certs.LeafSpec{CommonName: dnsName, DNSNames: []string{dnsName},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: 12 * time.Hour}, time.Now()))
	cert := must(tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM))
	return &cert
}

// replaceFiles points file flags at this run's files (relative names are under the work folder); every rendered
// file flag must be known, so a new mount cannot go unnoticed.
func replaceFiles(args []string, files map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		flag, value, _ := strings.Cut(a, "=")
		if strings.HasPrefix(value, "/") {
			path, ok := files[flag]
			ExpectWithOffset(1, ok).To(BeTrue(), "rendered file flag %s has no file in this test", a)
			if !filepath.IsAbs(path) {
				path = filepath.Join(workDir, path)
			}
			a = flag + "=" + path
		}
		out = append(out, a)
	}
	return out
}

func replaceFlag(args []string, flag, value string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if strings.HasPrefix(a, flag+"=") {
			a = flag + "=" + value
		}
		out = append(out, a)
	}
	return out
}

// waitConnected waits until the proxy-server lists the agent as connected for the cluster.
func (w *harness) waitConnected() {
	EventuallyWithOffset(1, func(g Gomega) {
		g.Expect(w.server.running()).To(BeTrue(), "proxy-server exited:\n%s", w.server.tail())
		g.Expect(w.agent.running()).To(BeTrue(), "proxy-agent exited:\n%s", w.agent.tail())
		g.Expect(w.connectedAgents(g)).To(ContainElement("agent-1"))
	}, timeout, interval).Should(Succeed())
}
