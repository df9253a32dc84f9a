//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/system"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

func itoa(i int) string { return strconv.Itoa(i) }

func must[T any](v T, err error) T {
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return v
}

func ctx() context.Context { return context.Background() }

func clusterNames() []string {
	names := make([]string, 0, len(sys.Env.Clusters))
	for _, c := range sys.Env.Clusters {
		names = append(names, c.Name)
	}
	return names
}

func managedConfig(cluster string) *rest.Config { return sys.Env.Cluster(cluster).Config }

func managedClient(cluster string) client.Client {
	return must(client.New(managedConfig(cluster), client.Options{}))
}

func createOrExists(c client.Client, o client.Object) {
	if err := c.Create(ctx(), o); err != nil && !apierrors.IsAlreadyExists(err) {
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
	}
}

// viewerToken is a managed-cluster ServiceAccount token allowed to get, list and watch namespaces; the same
// ClusterRoleBinding grants that to the hub user team/hub-user as the service-proxy maps it.
func viewerToken(cluster string) string {
	c := managedClient(cluster)
	createOrExists(c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "viewer"}})
	createOrExists(c, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "namespace-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}})
	createOrExists(c, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "namespace-viewer"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "namespace-viewer"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "viewer"},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "cluster:hub:system:serviceaccount:team:hub-user"},
		}})
	return token(must(kubernetes.NewForConfig(managedConfig(cluster))), "default", "viewer")
}

// hubUserToken is a hub ServiceAccount's token (team/hub-user).
func hubUserToken() string {
	createOrExists(sys.HubClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	createOrExists(sys.HubClient, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "hub-user"}})
	return token(must(kubernetes.NewForConfig(sys.Env.Hub)), "team", "hub-user")
}

func token(cs kubernetes.Interface, ns, name string) string {
	return must(testenv.ServiceAccountToken(ctx(), cs, ns, name, time.Hour))
}

func binary(name string) string { return filepath.Join(testenv.RepoRoot(), "bin", name) }

// plugin runs kubectl-cluster_proxy against the hub, with the hub's in-cluster names mapped to loopback.
func plugin(args ...string) (string, error) {
	full := []string{"--kubeconfig", sys.Env.HubKubeconfig}
	for _, r := range sys.Resolve {
		full = append(full, "--resolve", r)
	}
	cmd := exec.Command(binary("kubectl-cluster_proxy"), append(full, args...)...)
	return testenv.Output(cmd, "kubectl-cluster_proxy "+strings.Join(args, " "))
}

// userKubeconfig writes, with the plugin, a kubeconfig that reaches cluster through the user-server with token.
func userKubeconfig(cluster, name, tok string) string {
	path := filepath.Join(workDir, "kubeconfigs", cluster+"-"+name)
	Expect(os.MkdirAll(filepath.Dir(path), 0o700)).To(Succeed())
	_, err := plugin("kubeconfig", cluster, "-o", path, "--token", tok)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return path
}

// shell runs a command line as the README writes it (testenv.Shell) with the hub's admin kubeconfig; it fails the
// spec when the command fails.
func shell(command string) string {
	GinkgoHelper()
	out, err := testenv.Shell(command, sys.Env.HubKubeconfig).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s:\n%s", command, out)
	return string(out)
}

// hubClientFiles writes the proxy-client pair and the CA bundle from the hub, as a hub program mounts them.
func hubClientFiles() (cert, key, ca string) {
	dir := filepath.Join(workDir, "hub-client")
	Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
	client := &corev1.Secret{}
	Expect(sys.HubClient.Get(ctx(), types(system.Namespace, "proxy-client"), client)).To(Succeed())
	bundle := &corev1.Secret{}
	Expect(sys.HubClient.Get(ctx(), types(system.Namespace, "proxy-server-ca"), bundle)).To(Succeed())
	cert, key, ca = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	Expect(os.WriteFile(cert, client.Data["tls.crt"], 0o600)).To(Succeed())
	Expect(os.WriteFile(key, client.Data["tls.key"], 0o600)).To(Succeed())
	Expect(os.WriteFile(ca, bundle.Data["ca.crt"], 0o600)).To(Succeed())
	return cert, key, ca
}

func types(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// frontendServerName is the name the proxy-server's serving certificate carries for in-cluster clients.
const frontendServerName = "proxy-entrypoint." + system.Namespace + ".svc"

// grpcHealthz dials <cluster>:443 with the upstream konnectivity-client through the gRPC frontend and GETs
// /healthz. The kube-apiserver's certificate does not name the cluster, so its name is not verified, as every
// konnectivity client of the existing addon does.
func grpcHealthz(cluster string) (string, error) {
	cert, key, ca := hubClientFiles()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(must(os.ReadFile(ca)))
	c, cancel := context.WithTimeout(ctx(), 15*time.Second)
	defer cancel()
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(c, ctx(), fmt.Sprintf("127.0.0.1:%d", sys.Ports.Frontend),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: frontendServerName, MinVersion: tls.VersionTLS12})))
	if err != nil {
		return "", fmt.Errorf("create tunnel: %w", err)
	}
	transport := &http.Transport{
		DialContext: func(c context.Context, _, _ string) (net.Conn, error) {
			return tunnel.DialContext(c, "tcp", cluster+":443")
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the apiserver's certificate does not name the cluster
	}
	defer transport.CloseIdleConnections()
	req := must(http.NewRequestWithContext(c, http.MethodGet, "https://"+cluster+"/healthz", nil))
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// curlHealthz GETs https://<cluster>:443/healthz with curl through the HTTP-CONNECT frontend.
func curlHealthz(cluster string) (string, error) {
	cert, key, ca := hubClientFiles()
	cmd := exec.Command("curl", "-sS", "--max-time", "15", "--proxytunnel",
		"-x", fmt.Sprintf("https://127.0.0.1:%d", sys.Ports.HTTPConnect), // the serving certificate names 127.0.0.1 too
		"--proxy-cacert", ca, "--proxy-cert", cert, "--proxy-key", key,
		"-k", "https://"+cluster+":443/healthz")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), fmt.Errorf("curl: %w: %s", err, ee.Stderr)
	}
	return string(out), err
}
