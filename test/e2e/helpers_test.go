//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

var (
	// managerLabels select the manager's pods (the chart's selector labels).
	managerLabels     = map[string]string{"app.kubernetes.io/name": "cluster-proxy-operator"}
	proxyServerLabels = map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}
	agentLabels       = map[string]string{proxyv1alpha1.ComponentLabel: "proxy-agent"}
)

func itoa(i int) string { return strconv.Itoa(i) }

func must[T any](v T, err error) T {
	GinkgoHelper()
	Expect(err).NotTo(HaveOccurred())
	return v
}

func ctx() context.Context { return context.Background() }

func types(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func clusterNames() []string { return sys.Clusters() }

// managedCluster is the managed cluster named name.
func managedCluster(name string) *realcluster.Cluster {
	GinkgoHelper()
	for _, c := range sys.Managed {
		if c.Name() == name {
			return c
		}
	}
	Fail("no managed cluster " + name)
	return nil
}

func managedConfig(cluster string) *rest.Config { return managedCluster(cluster).Config }

func managedKubeconfig(cluster string) string { return managedCluster(cluster).Kubeconfig }

func managedClient(cluster string) client.Client {
	return must(client.New(managedConfig(cluster), client.Options{Scheme: scheme.New()}))
}

func createOrExists(c client.Client, o client.Object) {
	GinkgoHelper()
	if err := c.Create(ctx(), o); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// hubUser is the hub ServiceAccount team/hub-user as the service-proxy maps it on a managed cluster.
const hubUser = "cluster:hub:system:serviceaccount:team:hub-user"

// viewerToken is a managed-cluster ServiceAccount token allowed to get, list and watch namespaces and to read, exec
// into and port-forward to the probe workload; the same bindings grant that to the hub user team/hub-user as the
// service-proxy maps it.
func viewerToken(cluster string) string {
	c := managedClient(cluster)
	createOrExists(c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "viewer"}})
	subjects := []rbacv1.Subject{
		{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "viewer"},
		{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: hubUser},
	}
	createOrExists(c, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "namespace-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}})
	createOrExists(c, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "namespace-viewer"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "namespace-viewer"}, Subjects: subjects})
	createOrExists(c, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: workloadNamespace, Name: "probe-operator"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/log", "services"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/portforward"}, Verbs: []string{"get", "create"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}},
		}})
	createOrExists(c, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: workloadNamespace, Name: "probe-operator"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "probe-operator"}, Subjects: subjects})
	return token(must(kubernetes.NewForConfig(managedConfig(cluster))), "default", "viewer")
}

// hubUserToken is the token of hub ServiceAccount team/hub-user, whom the hub lets reach every cluster.
func hubUserToken() string {
	return hubServiceAccountToken("hub-user", []string{})
}

// hubServiceAccountToken is the token of hub ServiceAccount team/<name>; when clusters is not nil, the hub's RBAC lets
// it reach those clusters (every verb on clusters/proxy with their names; an empty list: every cluster).
func hubServiceAccountToken(name string, clusters []string) string {
	createOrExists(sys.HubClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	createOrExists(sys.HubClient, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}})
	if clusters != nil {
		role := "reach-clusters:" + name
		createOrExists(sys.HubClient, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{gatewayGroup}, Resources: []string{"clusters/proxy"}, ResourceNames: clusters, Verbs: []string{"*"}}}})
		createOrExists(sys.HubClient, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team", Name: name}}})
	}
	return token(must(kubernetes.NewForConfig(sys.Hub.Config)), "team", name)
}

// expectWatchSeesNewNamespace runs kubectl get namespaces --watch-only with kubeconfig and checks that it sees a
// namespace created on cluster meanwhile.
func expectWatchSeesNewNamespace(cluster, kubeconfig string) {
	GinkgoHelper()
	mc := managedClient(cluster)
	create := func(c context.Context, name string) error {
		return mc.Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	Expect(testenv.WatchSeesNamespace(ctx(), kubeconfig, create, 3*time.Second, timeout)).To(Succeed())
}

// forwardedHealthz GETs /healthz of the probe through a local forwarded port.
func forwardedHealthz(port int) string {
	GinkgoHelper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	return string(must(io.ReadAll(resp.Body)))
}

// gatewayGroup is the hub's aggregated API.
const gatewayGroup = "gateway.proxy.open-cluster-management.io"

// viaHubKubeconfig is what kubectl-cluster_proxy kubeconfig --via-hub writes from a hub kubeconfig: the hub admin's
// when tok is "", else one of a hub user with tok.
func viaHubKubeconfig(cluster, name, tok string) string {
	hub := sys.Hub.Kubeconfig
	if tok != "" {
		cfg := rest.CopyConfig(sys.Hub.Config)
		cfg.CertData, cfg.KeyData, cfg.BearerToken = nil, nil, tok
		hub = filepath.Join(workDir, "kubeconfigs", "hub-"+name)
		Expect(kubeclient.WriteKubeconfig(hub, "hub", cfg, "", nil)).To(Succeed())
	}
	path := filepath.Join(workDir, "kubeconfigs", "via-hub-"+cluster+"-"+name)
	out, err := plugin("kubeconfig", cluster, "--via-hub", "-o", path, "--kubeconfig", hub)
	Expect(err).NotTo(HaveOccurred(), out)
	return path
}

func token(cs kubernetes.Interface, ns, name string) string {
	return must(kubeclient.ServiceAccountToken(ctx(), cs, ns, name, time.Hour))
}

func binary(name string) string { return filepath.Join(repo.Root(), "bin", name) }

// kubectl is kubectl of the node binaries, which the suite's clients share.
func kubectl(kubeconfig string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(os.Getenv("NODE_ASSETS"), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// plugin runs kubectl-cluster_proxy against the hub, with the proxy-servers' Service names sent to their NodePorts.
func plugin(args ...string) (string, error) {
	full := []string{"--kubeconfig", sys.Hub.Kubeconfig}
	for _, r := range sys.Resolve() {
		full = append(full, "--resolve", r)
	}
	cmd := exec.Command(binary("kubectl-cluster_proxy"), append(full, args...)...)
	return process.Output(cmd, "kubectl-cluster_proxy "+strings.Join(args, " "))
}

// userKubeconfig writes, with the plugin, a kubeconfig that reaches cluster through the user-server with tok.
func userKubeconfig(cluster, name, tok string) string {
	GinkgoHelper()
	path := filepath.Join(workDir, "kubeconfigs", cluster+"-"+name)
	Expect(os.MkdirAll(filepath.Dir(path), 0o700)).To(Succeed())
	_, err := plugin("kubeconfig", cluster, "-o", path, "--token", tok)
	Expect(err).NotTo(HaveOccurred())
	return path
}

// userRESTConfig is the rest.Config of a user-server kubeconfig.
func userRESTConfig(kubeconfig string) *rest.Config {
	return must(clientcmd.BuildConfigFromFlags("", kubeconfig))
}

// shell runs a command line as the README writes it (testenv.Shell) with the hub's admin kubeconfig; it fails the
// spec when the command fails.
func shell(command string) string {
	GinkgoHelper()
	out, err := testenv.Shell(command, sys.Hub.Kubeconfig).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s:\n%s", command, out)
	return string(out)
}

// hubClientFiles writes the proxy-client pair and the CA bundle from the hub, as a hub program mounts them.
func hubClientFiles() (cert, key, ca string) {
	GinkgoHelper()
	cert, key, ca, err := sys.HubClientFiles(ctx(), filepath.Join(workDir, "hub-client"))
	Expect(err).NotTo(HaveOccurred())
	return cert, key, ca
}

// frontendServerName is the name the proxy-server's serving certificate carries for in-cluster clients.
const frontendServerName = "proxy-entrypoint." + localsystem.Namespace + ".svc"

// grpcHealthz dials <cluster>:443 with the upstream konnectivity-client through the gRPC frontend (its NodePort)
// and GETs /healthz. The kube-apiserver's certificate does not name the cluster, so its name is not verified, as
// every konnectivity client of the existing addon does.
func grpcHealthz(cluster string) (string, error) {
	cert, key, ca := hubClientFiles()
	return grpcHealthzAs(cert, key, ca, cluster)
}

// grpcHealthzAs is grpcHealthz with the client certificate in cert and key.
func grpcHealthzAs(cert, key, ca, cluster string) (string, error) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(must(os.ReadFile(ca)))
	c, cancel := context.WithTimeout(ctx(), 15*time.Second)
	defer cancel()
	frontend := net.JoinHostPort(sys.Hub.NodeIP.String(), itoa(localsystem.FrontendNodePort))
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(c, ctx(), frontend,
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

// curlHealthz GETs https://<cluster>:443/healthz with curl through the HTTP-CONNECT frontend, by its in-cluster
// name resolved to its NodePort (the serving certificate names the Service).
func curlHealthz(cluster string) (string, error) {
	cert, key, ca := hubClientFiles()
	return curlHealthzAs(cert, key, ca, cluster)
}

// curlHealthzAs is curlHealthz with the client certificate in cert and key.
func curlHealthzAs(cert, key, ca, cluster string) (string, error) {
	proxy := fmt.Sprintf("%s:%d", frontendServerName, localsystem.HTTPConnectNodePort)
	cmd := exec.Command("curl", "-sS", "--max-time", "15", "--proxytunnel",
		"--resolve", proxy+":"+sys.Hub.NodeIP.String(), "-x", "https://"+proxy,
		"--proxy-cacert", ca, "--proxy-cert", cert, "--proxy-key", key,
		"-k", "https://"+cluster+":443/healthz")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), fmt.Errorf("curl: %w: %s", err, ee.Stderr)
	}
	return string(out), err
}

// proxies is pkg/clusterproxy for the hub, with the Services' names sent to the NodePorts.
func proxies() *clusterproxy.Client {
	resolve := must(clusterproxy.ParseResolve(sys.Resolve()))
	return must(clusterproxy.New(ctx(), sys.Hub.Config, clusterproxy.Options{Resolve: resolve}))
}

// proxyServerPods are the names of the proxy-server pods on the hub that are not being deleted.
func proxyServerPods(g Gomega) []string {
	pods := &corev1.PodList{}
	g.Expect(sys.HubClient.List(ctx(), pods, client.InNamespace(localsystem.Namespace),
		client.MatchingLabels{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer})).To(Succeed())
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// podUIDs are the UIDs of the pods in namespace matching labels on the cluster c reaches, terminating ones left out.
func podUIDs(c client.Client, namespace string, labels map[string]string) []string {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(c.List(ctx(), pods, client.InNamespace(namespace), client.MatchingLabels(labels))).To(Succeed())
	var uids []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil { // a terminating pod (an earlier rollout's) is on its way out
			uids = append(uids, string(p.UID))
		}
	}
	return uids
}

// expectAgentsOnEveryReplica waits until each of the replicas proxy-server replicas is Ready and its /agents lists
// replicas agents of every cluster.
func expectAgentsOnEveryReplica(replicas int) {
	GinkgoHelper()
	Eventually(func(g Gomega) { agentsOnEveryReplica(g, replicas) }).WithTimeout(3 * time.Minute).Should(Succeed())
}

// agentsOnEveryReplica asserts that each of the replicas proxy-server replicas is Ready and its /agents lists replicas
// agents of every cluster.
func agentsOnEveryReplica(g Gomega, replicas int) {
	answers, err := sys.ReplicaAgents(ctx())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(answers).To(HaveLen(replicas))
	for pod, agents := range answers {
		for _, cluster := range clusterNames() {
			g.Expect(agents[cluster]).To(HaveLen(replicas), "replica %s: the agents of %s", pod, cluster)
		}
	}
}

// expectAgentsRolledOutWith waits until every cluster runs 3 agent pods, none of them going away, each started with
// every one of args, and every proxy-server replica holds exactly those pods' agents.
func expectAgentsRolledOutWith(args ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		answers := replicaAgents(g)
		for _, cluster := range clusterNames() {
			for _, p := range onlyCurrentAgents(g, answers, cluster) {
				g.Expect(p.Spec.Containers[0].Args).To(ContainElements(args), "%s: agent pod %s", cluster, p.Name)
			}
		}
	}).WithTimeout(5 * time.Minute).Should(Succeed())
}

// replicaAgents is what each of the 3 proxy-server replicas lists as connected: replica, cluster, agent IDs.
func replicaAgents(g Gomega) map[string]map[string][]string {
	answers, err := sys.ReplicaAgents(ctx())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(answers).To(HaveLen(3))
	return answers
}

// onlyCurrentAgents asserts that cluster runs 3 agent pods, none of them going away, and that every proxy-server
// replica of answers (replicaAgents) holds exactly their agents: an agent of the old template that still drains its
// tunnels would answer some requests the old way. It returns the pods.
func onlyCurrentAgents(g Gomega, answers map[string]map[string][]string, cluster string) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(managedClient(cluster).List(ctx(), pods, client.InNamespace(agentNamespace(g, cluster)), client.MatchingLabels(agentLabels))).To(Succeed())
	var names []string
	for _, p := range pods.Items {
		g.Expect(p.DeletionTimestamp).To(BeNil(), "%s: agent pod %s is going away", cluster, p.Name)
		names = append(names, p.Name)
	}
	g.Expect(names).To(HaveLen(3), cluster)
	for replica, agents := range answers {
		g.Expect(agents[cluster]).To(ConsistOf(names), "replica %s: the agents of %s", replica, cluster)
	}
	return pods.Items
}

// portForward runs kubectl port-forward to target's port for the rest of the spec (or suite) and returns the local
// port.
func portForward(kubeconfig string, env []string, namespace, target string, port int32) (int, error) {
	cmd := kubectl(kubeconfig, env, "port-forward", "-n", namespace, target, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n') // "Forwarding from 127.0.0.1:NNNNN -> 8094"
	if err != nil {
		return 0, fmt.Errorf("kubectl port-forward %s: %w: %s", target, err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	var local int
	if _, err := fmt.Sscanf(line, "Forwarding from 127.0.0.1:%d ->", &local); err != nil {
		return 0, fmt.Errorf("%q: %w", line, err)
	}
	return local, nil
}

// deploymentRolledOut is true when d's controller has seen its last change and every replica runs the template.
func deploymentRolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.ReadyReplicas == want && s.Replicas == want
}

// httpsProxy is the HTTPS_PROXY of the agent container of d.
func httpsProxy(d *appsv1.Deployment) string {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "HTTPS_PROXY" {
			return e.Value
		}
	}
	return ""
}

// agentWorkHTTPSProxy is the HTTPS_PROXY of the agent Deployment in cluster1's ManifestWork on the hub: what the
// operator deploys, before the work agent applies it ("" without a Deployment).
func agentWorkHTTPSProxy(g Gomega) string {
	work := &workv1.ManifestWork{}
	g.Expect(sys.HubClient.Get(ctx(), types(localsystem.ProxiedCluster, render.AgentWorkName), work)).To(Succeed())
	for _, m := range work.Spec.Workload.Manifests {
		d := &appsv1.Deployment{}
		g.Expect(json.Unmarshal(m.Raw, d)).To(Succeed())
		if d.Kind == "Deployment" {
			return httpsProxy(d)
		}
	}
	return ""
}

// setProxy points cluster1's AddOnDeploymentConfig at proxyURL, trusting caBundle.
func setProxy(proxyURL string, caBundle []byte) {
	GinkgoHelper()
	updateProxyConfig(func(adc *addonv1beta1.AddOnDeploymentConfig) {
		adc.Spec.ProxyConfig.HTTPSProxy = proxyURL
		if caBundle != nil {
			adc.Spec.ProxyConfig.CABundle = caBundle
		}
	})
}

// updateProxyConfig changes cluster1's AddOnDeploymentConfig, reading it again on a conflict.
func updateProxyConfig(change func(*addonv1beta1.AddOnDeploymentConfig)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		adc := &addonv1beta1.AddOnDeploymentConfig{}
		g.Expect(sys.HubClient.Get(ctx(), types(localsystem.ProxiedCluster, localsystem.ProxyConfigName), adc)).To(Succeed())
		change(adc)
		g.Expect(sys.HubClient.Update(ctx(), adc)).To(Succeed())
	}).Should(Succeed())
}

// expectAgentRunsWithProxy waits until cluster1's agent Deployment carries proxyURL, has rolled out, only its new
// agents are on the proxy-servers, and its tunnel is up.
func expectAgentRunsWithProxy(proxyURL string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := agentDeployment(g, localsystem.ProxiedCluster)
		g.Expect(httpsProxy(d)).To(Equal(proxyURL), "the Deployment carries the new proxy")
		g.Expect(deploymentRolledOut(d)).To(BeTrue(), "every agent pod runs the new template: %+v", d.Status)
		onlyCurrentAgents(g, replicaAgents(g), localsystem.ProxiedCluster)
		g.Expect(grpcHealthz(localsystem.ProxiedCluster)).To(Equal("ok"))
	}).WithTimeout(3 * time.Minute).Should(Succeed())
}

// currentCA is the signer's current CA.
func currentCA() *x509.Certificate {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, proxyv1alpha1.SignerSecretName), s)).To(Succeed())
	return must(certs.ParseCertificates(s.Data["ca.crt"]))[0]
}

// agentNamespace is where the agent of cluster is installed, as its add-on reports (an AddOnDeploymentConfig
// defaults agentInstallNamespace to open-cluster-management-agent-addon).
func agentNamespace(g Gomega, cluster string) string {
	mca := &addonv1beta1.ManagedClusterAddOn{}
	g.Expect(sys.HubClient.Get(ctx(), types(cluster, proxyv1alpha1.AddonName), mca)).To(Succeed())
	return mca.Status.Namespace
}

// agentCertificate is the agent certificate the klusterlet wrote on the managed cluster.
func agentCertificate(g Gomega, cluster string) *x509.Certificate {
	s := &corev1.Secret{}
	g.Expect(managedClient(cluster).Get(ctx(), types(agentNamespace(g, cluster), render.AgentCertSecretName), s)).To(Succeed())
	chain, err := certs.ParseCertificates(s.Data["tls.crt"])
	g.Expect(err).NotTo(HaveOccurred())
	return chain[0]
}

// agentHubConfig is the hub as cluster's agent reaches it, with the client certificate OCM's registration wrote into
// the agent's hub kubeconfig Secret on the managed cluster: what whoever controls that cluster holds.
func agentHubConfig(cluster string) *rest.Config {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(managedClient(cluster).Get(ctx(), types(agentNamespace(Default, cluster), render.AgentHubKubeconfigSecretName), s)).To(Succeed())
	Expect(s.Data).To(HaveKey("tls.crt"))
	Expect(s.Data).To(HaveKey("tls.key"))
	return &rest.Config{Host: sys.Hub.Config.Host, TLSClientConfig: rest.TLSClientConfig{
		CAData: sys.Hub.Config.CAData, ServerName: sys.Hub.Config.ServerName, CertData: s.Data["tls.crt"], KeyData: s.Data["tls.key"]}}
}

// leftAfterUninstall lists what of the operator is still there: on the hub the objects of the release namespace
// (but the namespace's own ConfigMap and ServiceAccount, and the local system's NodePort Services), the
// cluster-scoped objects named after the add-on, the objects of the operator's kinds, the add-ons and their
// ManifestWorks; on the managed clusters the agents.
func leftAfterUninstall(g Gomega) []string {
	namespaced, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "-n", localsystem.Namespace, "-o", "name",
		"deployments,replicasets,pods,services,secrets,configmaps,serviceaccounts,roles,rolebindings,leases,placements,managedclustersetbindings")
	g.Expect(err).NotTo(HaveOccurred())
	clusterScoped, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "-o", "name",
		"clusterroles,clusterrolebindings,clustermanagementaddons,mutatingwebhookconfigurations,validatingwebhookconfigurations")
	g.Expect(err).NotTo(HaveOccurred())
	ours, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "-A", "-o", "name",
		"managedproxyconfigurations,clusterproxystatuses,proxycertificates,managedclusteraddons,manifestworks")
	g.Expect(err).NotTo(HaveOccurred())
	keep := map[string]bool{"configmap/kube-root-ca.crt": true, "serviceaccount/default": true,
		"service/proxy-agent-nodeport": true, "service/proxy-machine-nodeports": true}
	var left []string
	for _, name := range strings.Fields(namespaced) {
		if !keep[name] {
			left = append(left, localsystem.Namespace+": "+name)
		}
	}
	for _, name := range strings.Fields(clusterScoped) {
		if strings.Contains(name, "cluster-proxy") {
			left = append(left, name)
		}
	}
	for _, name := range strings.Fields(ours) {
		if !strings.HasPrefix(name, "manifestwork") || strings.Contains(name, "cluster-proxy") {
			left = append(left, name)
		}
	}
	for _, cluster := range clusterNames() {
		agents, err := kubeclient.Kubectl(managedKubeconfig(cluster), "get", "deployments,pods", "-A", "-l", proxyv1alpha1.ComponentLabel+"=proxy-agent", "-o", "name")
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range strings.Fields(agents) {
			left = append(left, cluster+": "+name)
		}
	}
	return left
}

// agentDeployment is cluster's agent Deployment, in the namespace its add-on reports.
func agentDeployment(g Gomega, cluster string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.Expect(managedClient(cluster).Get(ctx(), types(agentNamespace(g, cluster), render.AgentDeploymentName), d)).To(Succeed())
	return d
}

// agentPods are the UIDs of every cluster's running agent pods, by cluster.
func agentPods(g Gomega) map[string][]string {
	pods := map[string][]string{}
	for _, cluster := range clusterNames() {
		pods[cluster] = podUIDs(managedClient(cluster), agentNamespace(g, cluster), agentLabels)
	}
	return pods
}

// expectEveryClusterAvailable waits until every cluster's ClusterProxyStatus and add-on say Available.
func expectEveryClusterAvailable() { suite.ExpectEveryClusterAvailable() }

// oidcClientID is the audience of the OIDC tokens cluster1 accepts.
const oidcClientID = "cluster-proxy"

// setCustomizedVariables sets the customized variables of cluster1's AddOnDeploymentConfig.
func setCustomizedVariables(vars []addonv1beta1.CustomizedVariable) {
	GinkgoHelper()
	updateProxyConfig(func(adc *addonv1beta1.AddOnDeploymentConfig) { adc.Spec.CustomizedVariables = vars })
}

// expectAgentArgs waits until cluster's agent Deployment's arguments match, it has rolled out, only its new agents
// are on the proxy-servers, and its tunnel is up.
func expectAgentArgs(cluster string, match gomegatypes.GomegaMatcher) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := agentDeployment(g, cluster)
		g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(match)
		g.Expect(deploymentRolledOut(d)).To(BeTrue(), "every agent pod runs the new template: %+v", d.Status)
		onlyCurrentAgents(g, replicaAgents(g), cluster)
		g.Expect(grpcHealthz(cluster)).To(Equal("ok"))
	}).WithTimeout(3 * time.Minute).Should(Succeed())
}

// forgeSignature is a JWT with its signature's first byte changed.
func forgeSignature(jwt string) string {
	i := strings.LastIndex(jwt, ".") + 1
	b := byte('A')
	if jwt[i] == 'A' {
		b = 'B'
	}
	return jwt[:i] + string(b) + jwt[i+1:]
}

// probePod is the name of a running pod of the probe workload, read with cfg.
func probePod(cfg *rest.Config) string {
	GinkgoHelper()
	return must(findProbePod(ctx(), cfg))
}

// findProbePod is probePod without failing the spec: a soak looks for the pod again while a way in is down.
func findProbePod(c context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	pods, err := cs.CoreV1().Pods(workloadNamespace).List(c, metav1.ListOptions{LabelSelector: "app=probe"})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", errors.New("no running probe pod")
}

// goExec runs command in pod with client-go's websocket or SPDY executor and cfg, and returns its standard output.
func goExec(cfg *rest.Config, pod string, websocket bool, command ...string) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(workloadNamespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, clientgoscheme.ParameterCodec)
	var executor remotecommand.Executor
	if websocket {
		executor, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String())
	} else {
		executor, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	}
	if err != nil {
		return "", err
	}
	c, cancel := context.WithTimeout(ctx(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := executor.StreamWithContext(c, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("exec %v in %s: %w: %s", command, pod, err, stderr.String())
	}
	return stdout.String(), nil
}

// goPortForward forwards a local port to port of pod with client-go's port-forward over websocket or SPDY and cfg,
// and returns the local port and a function that stops the forwarding.
func goPortForward(cfg *rest.Config, pod string, websocket bool, port int) (int, func()) {
	GinkgoHelper()
	local, stop, done := startPortForward(cfg, pod, websocket, port)
	return local, func() {
		close(stop)
		Expect(<-done).To(Succeed(), "port-forward to %s ended", pod)
	}
}

// startPortForward starts client-go's port-forward to port of pod and returns the local port, the channel that stops
// it when closed, and the channel ForwardPorts' result arrives on when it ends.
func startPortForward(cfg *rest.Config, pod string, websocket bool, port int) (int, chan struct{}, <-chan error) {
	GinkgoHelper()
	local, stop, done, err := openPortForward(cfg, pod, websocket, port)
	Expect(err).NotTo(HaveOccurred())
	return local, stop, done
}

// openPortForward is startPortForward without failing the spec.
func openPortForward(cfg *rest.Config, pod string, websocket bool, port int) (int, chan struct{}, <-chan error, error) {
	return openPortForwardIn(cfg, workloadNamespace, pod, websocket, port)
}

// openPortForwardIn is openPortForward to a pod of namespace.
func openPortForwardIn(cfg *rest.Config, namespace, pod string, websocket bool, port int) (int, chan struct{}, <-chan error, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, nil, nil, err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	var dialer httpstream.Dialer
	if websocket {
		if dialer, err = portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg); err != nil {
			return 0, nil, nil, err
		}
	} else {
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			return 0, nil, nil, err
		}
		dialer = spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, GinkgoWriter, GinkgoWriter)
	if err != nil {
		return 0, nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return 0, nil, nil, fmt.Errorf("port-forward to %s: %w", pod, err)
	case <-time.After(30 * time.Second):
		close(stop)
		return 0, nil, nil, fmt.Errorf("port-forward to %s not ready in 30 s", pod)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		close(stop)
		return 0, nil, nil, err
	}
	return int(ports[0].Local), stop, done, nil
}

// leaderLease is the manager's leader-election Lease.
const leaderLease = "cluster-proxy-addon-manager.proxy.open-cluster-management.io"

// watchRecord keeps every object a watch delivers, in order; done is closed when the watch ends.
type watchRecord struct {
	mu   sync.Mutex
	objs []runtime.Object
	done chan struct{}
}

// recordWatch records w until it ends or the spec does.
func recordWatch(w watch.Interface) *watchRecord {
	DeferCleanup(w.Stop)
	return followWatch(w)
}

// followWatch records w until it ends; whoever started it stops it.
func followWatch(w watch.Interface) *watchRecord {
	r := &watchRecord{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range w.ResultChan() {
			r.mu.Lock()
			r.objs = append(r.objs, ev.Object)
			r.mu.Unlock()
		}
	}()
	return r
}

// objects is what the watch delivered so far.
func (r *watchRecord) objects() []runtime.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.objs)
}

// leaseWatch records the versions of the manager's leader-election Lease from when it was started.
type leaseWatch struct{ *watchRecord }

// watchLeaderLease watches the manager's Lease for the rest of the spec.
func watchLeaderLease() leaseWatch {
	GinkgoHelper()
	cs := must(kubernetes.NewForConfig(sys.Hub.Config))
	return leaseWatch{recordWatch(must(cs.CoordinationV1().Leases(localsystem.Namespace).Watch(ctx(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", leaderLease).String()})))}
}

// released reports whether the watch saw the Lease without a holder: the old manager gave it up.
func (l leaseWatch) released() bool {
	objs := l.objects()
	return slices.ContainsFunc(objs, func(o runtime.Object) bool {
		lease, ok := o.(*coordinationv1.Lease)
		return ok && ptr.Deref(lease.Spec.HolderIdentity, "") == ""
	})
}

// handover waits for a release of the Lease (no holder) followed by an acquisition. It returns the time between them
// as the two managers stamped them (the release's renewTime and the acquisition's acquireTime; both managers run on
// the hub's one node, so the two stamps come from one clock), and the acquisition's time.
func (l leaseWatch) handover() (time.Duration, time.Time) {
	GinkgoHelper()
	var d time.Duration
	var acquired time.Time
	Eventually(func(g Gomega) {
		objs := l.objects()
		var released *metav1.MicroTime
		for _, obj := range objs {
			lease, ok := obj.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			r := lease.Spec
			holder := ptr.Deref(r.HolderIdentity, "")
			switch {
			case holder == "" && released == nil:
				released = r.RenewTime
			case holder != "" && released != nil && r.AcquireTime != nil:
				d, acquired = r.AcquireTime.Sub(released.Time), r.AcquireTime.Time
				return
			}
		}
		g.Expect(released).NotTo(BeNil(), "the old manager released the Lease")
		g.Expect("no acquisition").To(Equal("an acquisition after the release"))
	}).Should(Succeed())
	return d, acquired
}
