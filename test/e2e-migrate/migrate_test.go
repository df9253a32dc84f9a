//go:build e2e

// Package migrate takes a hub from the existing OCM cluster-proxy add-on (v0.11.0, built from its source and installed
// with its own chart) to the operator, on the real clusters of internal/localsystem, as docs/migration.md says, then
// back and forward again, with the add-on's kinds of clients running throughout: a konnectivity gRPC client holding
// the add-on's proxy-client from before the switch (as a hub program that read its mounted Secret at start), a
// client-go client through the user-server with a managed cluster's token, and pkg/clusterproxy. Run it with
// 'make e2e-migrate ADDON_SOURCE=<a checkout of the add-on at v0.11.0>'.
package migrate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/e2esuite"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

const (
	// firstIndex keeps this suite's clusters apart from make run (1–3), make e2e (11–13) and make e2e-olm (21–23).
	firstIndex = 31
	// retryFor is how long a retrying client retries one request before it counts it failed.
	retryFor = 60 * time.Second
	// unreachableGoal is the longest a cluster may be unreachable for a client that does not retry.
	unreachableGoal = 30 * time.Second
)

// The client kinds of the add-on that the probes stand for.
const (
	kindGRPC       = "gRPC, the add-on's proxy-client held since before"
	kindUserServer = "user-server, client-go, managed token (retrying)"
	kindLibrary    = "pkg/clusterproxy (retrying)"
)

var (
	suite   *e2esuite.Suite
	sys     *localsystem.System
	workDir string
	probes  []*probe
)

func TestMigrate(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "From the existing add-on to the operator on real clusters")
}

var _ = BeforeSuite(func() {
	ctrllog.SetLogger(GinkgoLogr)
	SetDefaultEventuallyTimeout(5 * time.Minute)
	SetDefaultEventuallyPollingInterval(time.Second)
	source := os.Getenv("ADDON_SOURCE")
	Expect(source).NotTo(BeEmpty(), "run through 'make e2e-migrate ADDON_SOURCE=<a checkout of the add-on at v0.11.0>'")
	suite = e2esuite.Start("cluster-proxy-migrate", "e2e-migrate", firstIndex, 30*time.Minute, func(o *localsystem.Options) {
		o.AddOn = &localsystem.AddOnOptions{Source: source}
		o.ReadyTimeout = 10 * time.Minute
	})
	sys, workDir = suite.Sys, suite.WorkDir
})

var _ = ReportAfterEach(func(r SpecReport) { suite.Record(r) })

var _ = AfterSuite(func() {
	for _, p := range probes {
		p.loop.Stop()
	}
	suite.Stop()
})

var _ = Describe("A hub that runs the existing add-on", Ordered, func() {
	var addonCA string // the fingerprint of the add-on's CA
	stopFollowing := func() {}

	It("serves both clusters to the add-on's clients", func() {
		secret := &corev1.Secret{}
		Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Namespace: localsystem.Namespace, Name: proxyv1alpha1.SignerSecretName}, secret)).To(Succeed())
		ca, err := certs.ParseCertificates(secret.Data["ca.crt"])
		Expect(err).NotTo(HaveOccurred())
		addonCA = certs.Fingerprint(ca[0])
		GinkgoWriter.Printf("the add-on's CA: %s\n", addonCA)

		grpcTLS, bundle := addOnClientTLS()
		library := must(clusterproxy.New(ctx(), sys.Hub.Config, clusterproxy.Options{Resolve: must(clusterproxy.ParseResolve(sys.Resolve()))}))
		for _, cluster := range sys.Clusters() {
			user := userServerClient(cluster, bundle)
			base := rest.CopyConfig(managedConfig(cluster))
			base.Host = "https://kubernetes.default.svc"
			lib := must(kubernetes.NewForConfig(must(library.RESTConfig(cluster, base)))).Discovery().RESTClient()
			Eventually(func() error { return grpcHealthz(ctx(), grpcTLS, cluster) }).Should(Succeed(), "gRPC to %s through the add-on", cluster)
			Eventually(func() error { return readyz(ctx(), user) }).Should(Succeed(), "the add-on's user-server to %s", cluster)
			Eventually(func() error { return readyz(ctx(), lib) }).Should(Succeed(), "pkg/clusterproxy to %s through the add-on", cluster)
			probes = append(probes,
				startProbe(kindGRPC, cluster, false, func(c context.Context) error { return grpcHealthz(c, grpcTLS, cluster) }),
				startProbe(kindUserServer, cluster, true, func(c context.Context) error { return readyz(c, user) }),
				startProbe(kindLibrary, cluster, true, func(c context.Context) error { return readyz(c, lib) }))
		}
		stopFollowing = followUserServer()
		settle("the add-on")
	})

	It("migrates to the operator as docs/migration.md says, keeping the CA, the clients and the tunnels", func() {
		migrate()
		expectPhase("migration to the operator")

		By("the CA is the add-on's, and what the add-on left is gone")
		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Name: proxyv1alpha1.DefaultConfigurationName}, mpc)).To(Succeed())
		Expect(mpc.Status.Signer).NotTo(BeNil())
		Expect(mpc.Status.Signer.CAFingerprint).To(Equal(addonCA), "no agent and no hub client needs a new CA")
		for _, o := range []client.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: "cluster-proxy-addon-user"}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy-addon-agent-tokenreview"}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy-addon-agent-tokenreview"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: "cluster-proxy-service-proxy-server-cert"}},
		} {
			Eventually(func() bool {
				return apierrors.IsNotFound(sys.HubClient.Get(ctx(), client.ObjectKeyFromObject(o), o))
			}).Should(BeTrue(), "%T %s is gone", o, o.GetName())
		}
		By("each cluster's agent is the operator's, replaced through OCM, and OCM's work agent removed the add-on's objects the work no longer lists")
		for _, c := range sys.Managed {
			d, err := agentDeployment(c.Config)
			Expect(err).NotTo(HaveOccurred(), c.Name())
			Expect(d.Spec.Template.Spec.Containers[0].Image).NotTo(Equal(localsystem.AddOnImage), c.Name())
			managed := must(client.New(c.Config, client.Options{}))
			for _, o := range []client.Object{
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy-addon-agent-impersonator"}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: "cluster-proxy-service-proxy-server-certificates"}},
			} {
				Eventually(func() bool {
					return apierrors.IsNotFound(managed.Get(ctx(), client.ObjectKeyFromObject(o), o))
				}).Should(BeTrue(), "%s: %T %s is gone", c.Name(), o, o.GetName())
			}
		}
	})

	It("rolls back to the add-on as docs/migration.md says", func() {
		rollBack()
		expectPhase("rollback to the add-on")
	})

	It("migrates forward again", func() {
		migrate()
		expectPhase("migration again")
		stopFollowing()
	})
})

// migrate runs the steps of docs/migration.md: the operator's CRDs, the add-on's manager stopped, helm upgrade with the
// add-on's values file (less the values that name its image) and the local system's own values, then waits until
// every cluster's tunnel is Available.
func migrate() {
	GinkgoHelper()
	before := shell(caFingerprintCommand)
	By("the operator's CRDs (Helm does not upgrade CRDs)")
	shell("kubectl apply --server-side --force-conflicts -f charts/cluster-proxy/crds/")
	By("the add-on's manager stopped (its Deployment's selector is not the operator's)")
	shell("kubectl delete deployment -n open-cluster-management-addon cluster-proxy-addon-manager")
	By("helm upgrade cluster-proxy charts/cluster-proxy -f <the add-on's values, less its image>")
	args := []string{"upgrade", "-n", localsystem.Namespace, "cluster-proxy", filepath.Join(repo.Root(), "charts", "cluster-proxy"), "-f", addOnValuesFile()}
	for _, v := range must(sys.HelmValues()) {
		args = append(args, "--set", v)
	}
	Expect(sys.Helm(ctx(), args...)).Error().NotTo(HaveOccurred())
	shell("kubectl wait managedproxyconfiguration cluster-proxy --for=condition=Ready --timeout=5m")
	suite.ExpectEveryClusterAvailable()
	GinkgoWriter.Println(shell("kubectl get clusterproxystatuses -A"))
	Expect(shell(caFingerprintCommand)).To(Equal(before), "the CA is the one the hub had")
	settle("the operator")
}

// caFingerprintCommand is step 0 of docs/migration.md: the CA's fingerprint, before and after.
const caFingerprintCommand = `kubectl get secret -n open-cluster-management-addon cluster-proxy-signer -o jsonpath='{.data.ca\.crt}' | base64 -d | openssl x509 -noout -fingerprint -sha256`

// rollBack runs the rollback of docs/migration.md: the operator's manager and proxy-server Deployments deleted (their
// selectors are not the add-on's) with their pods, then the ServiceAccount and Services of the add-on's names that the
// operator wrote (Helm's rollback creates its own and refuses objects it did not write; the add-on's manager never
// updates a Service, so proxy-entrypoint would keep selecting the operator's pods), helm rollback to the add-on's
// release, until the add-on is Available again.
func rollBack() {
	GinkgoHelper()
	By("the operator's manager and proxy-servers deleted with their pods (their selectors are not the add-on's)")
	shell("kubectl delete deployment --cascade=foreground -n open-cluster-management-addon cluster-proxy-addon-manager cluster-proxy")
	By("the ServiceAccount and Services the operator wrote under the add-on's names deleted")
	shell("kubectl delete -n open-cluster-management-addon serviceaccount/cluster-proxy service/cluster-proxy-addon-user service/proxy-entrypoint")
	By("helm rollback cluster-proxy 1")
	Expect(sys.Helm(ctx(), "rollback", "-n", localsystem.Namespace, "cluster-proxy", "1")).Error().NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		for _, c := range sys.Managed {
			d, err := agentDeployment(c.Config)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(localsystem.AddOnImage), c.Name())
			g.Expect(d.Status.UpdatedReplicas).To(Equal(d.Status.Replicas))
			g.Expect(d.Status.AvailableReplicas).To(BeNumerically(">=", 1))
		}
	}).Should(Succeed(), "the add-on's agents are back")
	settle("the add-on again")
}

// agentDeployment is the agent Deployment cluster-proxy-proxy-agent of a managed cluster, in the namespace OCM installs
// it in (the add-on's default, or an AddOnDeploymentConfig's agentInstallNamespace).
func agentDeployment(cfg *rest.Config) (*appsv1.Deployment, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx(), metav1.ListOptions{FieldSelector: "metadata.name=cluster-proxy-proxy-agent"})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d Deployments cluster-proxy-proxy-agent, want one", len(list.Items))
	}
	return &list.Items[0], nil
}

// settle lets every probe answer again after a step before the phase is measured: the figures then hold the step's
// whole cost.
func settle(what string) {
	GinkgoHelper()
	for _, p := range probes {
		Eventually(func() bool { return p.loop.Answering(5 * time.Second) }).Should(BeTrue(), func() string {
			return fmt.Sprintf("%s answers %s on %s (its last error: %s)", what, p.kind, p.cluster, p.loop.LastError())
		})
	}
}

// expectPhase takes every probe's figures of the phase, prints them, and holds them to the goals: no failed request
// for retrying clients, no cluster unreachable longer than unreachableGoal for the others.
func expectPhase(phase string) {
	GinkgoHelper()
	got := map[*probe]requestloop.Figures{}
	for _, p := range probes {
		got[p] = p.loop.Take()
	}
	t := table(phase, probes, got)
	AddReportEntry(phase, t)
	GinkgoWriter.Println(t)
	for _, p := range probes {
		f := got[p]
		if p.retrying {
			Expect(f.Failures).To(BeEmpty(), "%s to %s", p.kind, p.cluster)
		} else {
			Expect(f.LongestUnreachable).To(BeNumerically("<=", unreachableGoal), "%s to %s", p.kind, p.cluster)
		}
	}
}

// addOnValuesFile writes the values the add-on was installed with as its user keeps them in a file, less the values
// that name the add-on's image (docs/migration.md: its programs cannot run the operator's).
func addOnValuesFile() string {
	GinkgoHelper()
	values := localsystem.AddOnValues()
	for _, image := range []string{"image", "tag", "proxyServerImage", "proxyAgentImage"} {
		delete(values, image)
	}
	path := filepath.Join(workDir, "addon-values.yaml")
	Expect(localsystem.WriteValues(path, values)).To(Succeed())
	return path
}

// followUserServer keeps the machine's user-server NodePort on the pods the in-cluster Service selects, as kube-proxy
// does for clients in the hub, until the returned function is called.
func followUserServer() func() {
	c, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c.Err() == nil {
			if changed, err := sys.FollowUserServerService(c); err == nil && changed {
				GinkgoWriter.Printf("%s the user-server's NodePort follows the Service\n", time.Now().Format("15:04:05.000"))
			}
			select {
			case <-c.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// addOnClientTLS is the TLS of a hub program that read the proxy-client and proxy-server-ca Secrets once, at its
// start, before the migration, and keeps them in memory.
func addOnClientTLS() (*tls.Config, []byte) {
	GinkgoHelper()
	cert, key, ca, err := sys.HubClientFiles(ctx(), filepath.Join(workDir, "addon-hub-client"))
	Expect(err).NotTo(HaveOccurred())
	pair := must(tls.LoadX509KeyPair(cert, key))
	bundle := must(os.ReadFile(ca))
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(bundle)).To(BeTrue())
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "proxy-entrypoint." + localsystem.Namespace + ".svc",
		MinVersion: tls.VersionTLS12}, bundle
}

// grpcHealthz GETs /healthz of cluster's kube-apiserver through a single-use konnectivity tunnel to the frontend, as
// the add-on's hub clients (and 'clusteradm proxy health') do.
func grpcHealthz(c context.Context, cfg *tls.Config, cluster string) error {
	frontend := net.JoinHostPort(sys.Hub.NodeIP.String(), fmt.Sprint(localsystem.FrontendNodePort))
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(c, context.Background(), frontend, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return fmt.Errorf("create tunnel: %w", err)
	}
	transport := &http.Transport{
		DialContext: func(c context.Context, _, _ string) (net.Conn, error) {
			return tunnel.DialContext(c, "tcp", cluster+":443")
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the add-on's clients: the apiserver's certificate does not name the cluster
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(c, http.MethodGet, "https://"+cluster+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("%s: %q", resp.Status, body)
	}
	return nil
}

// userServerClient is client-go through the user-server Service (its machine NodePort, by its in-cluster name) with
// a token of a ServiceAccount of cluster, trusting the CA bundle read before the migration.
func userServerClient(cluster string, bundle []byte) rest.Interface {
	GinkgoHelper()
	cs := must(kubernetes.NewForConfig(managedConfig(cluster)))
	_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "migrate-probe"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	tok := must(cs.CoreV1().ServiceAccounts("default").CreateToken(ctx(), "migrate-probe",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(7200))}}, metav1.CreateOptions{}))
	user := fmt.Sprintf("%s.%s.svc", proxyv1alpha1.UserServerServiceName, localsystem.Namespace)
	node := net.JoinHostPort(sys.Hub.NodeIP.String(), fmt.Sprint(localsystem.UserServerNodePort))
	cfg := &rest.Config{
		Host: "https://" + user + ":" + fmt.Sprint(proxyv1alpha1.UserServerPort) + "/" + cluster, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: bundle, ServerName: user},
		Dial: func(c context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(c, network, node)
		},
	}
	return must(kubernetes.NewForConfig(cfg)).Discovery().RESTClient()
}

func readyz(c context.Context, rc rest.Interface) error {
	body, err := rc.Get().AbsPath("/readyz").DoRaw(c)
	if err != nil {
		return err
	}
	if string(body) != "ok" {
		return fmt.Errorf("readyz: %q", body)
	}
	return nil
}

func managedConfig(cluster string) *rest.Config {
	for _, c := range sys.Managed {
		if c.Name() == cluster {
			return rest.CopyConfig(c.Config)
		}
	}
	Fail("no managed cluster " + cluster)
	return nil
}

// shell runs a command line of docs/migration.md as it is written, with the hub's admin kubeconfig, and returns its
// output; it fails the spec when the command fails.
func shell(command string) string {
	GinkgoHelper()
	out, err := testenv.Shell(command, sys.Hub.Kubeconfig).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s:\n%s", command, out)
	return string(out)
}

func ctx() context.Context { return context.Background() }

func must[T any](v T, err error) T {
	GinkgoHelper()
	Expect(err).NotTo(HaveOccurred())
	return v
}
