//go:build realcluster

package realcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// Indexes far from the local system's, so this suite and 'make run' can share a machine.
const indexA, indexB, indexKilled = 201, 202, 203

// nodeAssets are the folders 'make node-assets' fills.
func nodeAssets(t *testing.T) (binaries, pause string) {
	binaries, pause = os.Getenv("NODE_ASSETS"), os.Getenv("PAUSE")
	if binaries == "" || pause == "" {
		t.Fatal("NODE_ASSETS and PAUSE are not set: run this suite with 'make test-nodes'")
	}
	if err := realcluster.Preflight(binaries, pause); err != nil {
		t.Fatal(err)
	}
	return binaries, pause
}

// buildProbe packs the probe program into an image archive, as a non-root pod would run it.
func buildProbe(t *testing.T) string {
	archive, err := testenv.ProbeImage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return archive
}

func TestTwoClustersRunPodsSideBySideAndLeaveNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	binaries, pause := nodeAssets(t)
	probe := buildProbe(t)
	root := t.TempDir()

	start := func(name string, index int) *realcluster.Cluster {
		c, err := realcluster.Start(ctx, realcluster.Options{Name: name, Index: index, Dir: filepath.Join(root, name),
			Binaries: binaries, Pause: pause, Images: []string{probe}, CoreDNSHosts: map[string]string{"hub.example.test": "100.66.1.1"}})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	began := time.Now()
	a := start("cluster-a", indexA)
	b := start("1st-cluster", indexB)
	t.Logf("two clusters Ready with CoreDNS in %s", time.Since(began).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = a.Stop()
			_ = b.Stop()
		}
	})

	cs, err := kubernetes.NewForConfig(a.Config)
	g.Expect(err).NotTo(HaveOccurred())
	deployProbe(ctx, g, cs)
	proxy := func(path string, query ...string) (string, error) {
		req := cs.CoreV1().Services("default").ProxyGet("http", "probe", "80", path, params(query...))
		out, err := req.DoRaw(ctx)
		return string(out), err
	}

	// A pod resolves names through CoreDNS: a Service, and a name of the hosts plugin. The first request waits for
	// the Service's endpoints.
	g.Eventually(func() (string, error) { return proxy("resolve", "name", "kubernetes.default.svc.cluster.local") }).
		WithTimeout(30 * time.Second).Should(ContainSubstring("100.65.0.1"))
	g.Expect(proxy("resolve", "name", "hub.example.test")).To(ContainSubstring("100.66.1.1"))

	// A pod reaches the machine's side of its veth, and not the other cluster.
	listener, err := net.Listen("tcp", net.JoinHostPort(a.HostIP.String(), "0"))
	g.Expect(err).NotTo(HaveOccurred())
	defer listener.Close()
	go acceptAll(listener)
	g.Expect(proxy("dial", "addr", listener.Addr().String())).To(ContainSubstring("connected"))
	_, err = proxy("dial", "addr", net.JoinHostPort(b.NodeIP.String(), "6443"))
	g.Expect(err).To(HaveOccurred(), "the clusters have no route to each other")

	// The machine reaches each kube-apiserver, and a ClusterIP answers from the node itself.
	for _, c := range []*realcluster.Cluster{a, b} {
		g.Expect(kubeclient.Kubectl(c.Kubeconfig, "get", "--raw", "/readyz")).To(Equal("ok"))
	}
	svc, err := cs.CoreV1().Services("default").Get(ctx, "probe", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		out, err := exec.Command("nsenter", "--net="+a.NetNS(), "--", "curl", "-sS", "--max-time", "5", "http://"+svc.Spec.ClusterIP+"/healthz").CombinedOutput()
		return string(out), err
	}).WithTimeout(30 * time.Second).Should(Equal("ok\n"))

	// The kube-apiserver proxies aggregated APIs as a front proxy: it publishes the CA and the name of its client
	// certificate to aggregated API servers (make e2e-olm's OLM package-server is one).
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(auth.Data["requestheader-client-ca-file"]).To(ContainSubstring("BEGIN CERTIFICATE"))
	g.Expect(auth.Data["requestheader-allowed-names"]).To(Equal(`["` + realcluster.FrontProxyClient + `"]`))

	// kubectl logs and exec reach the container through the kubelet.
	g.Expect(kubeclient.Kubectl(a.Kubeconfig, "logs", "deploy/probe")).To(ContainSubstring("resolve hub.example.test"))
	g.Expect(kubeclient.Kubectl(a.Kubeconfig, "exec", "deploy/probe", "--", "/probe", "echo", "from", "exec")).To(Equal("from exec\n"))

	began = time.Now()
	g.Expect(a.Stop()).To(Succeed())
	g.Expect(b.Stop()).To(Succeed())
	stopped = true
	t.Logf("two clusters stopped in %s", time.Since(began).Round(time.Millisecond))
	g.Expect(realcluster.Leftovers(indexA, a.Dir())).To(BeEmpty())
	g.Expect(realcluster.Leftovers(indexB, b.Dir())).To(BeEmpty())
	g.Expect(a.Dir()).NotTo(BeADirectory())
}

// TestMain runs the child of TestAKilledRunIsCleanedByTheNext when this binary is started as it.
func TestMain(m *testing.M) {
	if dir := os.Getenv("REALCLUSTER_CHILD_DIR"); dir != "" {
		startClusterUntilKilled(dir)
		return
	}
	os.Exit(m.Run())
}

// TestAKilledRunIsCleanedByTheNext starts a cluster in a child process (this test binary, see TestMain), SIGKILLs it
// once the cluster is Ready, and proves that CleanStale leaves nothing of it.
func TestAKilledRunIsCleanedByTheNext(t *testing.T) {
	g := NewWithT(t)
	binaries, pause := nodeAssets(t)
	dir := filepath.Join(t.TempDir(), "killed")
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "REALCLUSTER_CHILD_DIR="+dir, "NODE_ASSETS="+binaries, "PAUSE="+pause)
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := child.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	child.Stderr = os.Stderr
	g.Expect(child.Start()).To(Succeed())
	ready := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if strings.Contains(scanner.Text(), "CLUSTER READY") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Minute):
		_ = child.Process.Kill()
		t.Fatal("the child's cluster did not start")
	}
	g.Expect(child.Process.Kill()).To(Succeed())
	_ = child.Wait()
	g.Expect(realcluster.Leftovers(indexKilled, "")).NotTo(BeEmpty(), "a killed run leaves its cluster until it is cleaned")

	g.Expect(realcluster.CleanStale(0)).To(Succeed())
	g.Expect(realcluster.Leftovers(indexKilled, dir)).To(BeEmpty())
}

// startClusterUntilKilled is the child: it starts a cluster, says so, and waits to be killed.
func startClusterUntilKilled(dir string) {
	c, err := realcluster.Start(context.Background(), realcluster.Options{Name: "killed", Index: indexKilled, Dir: dir,
		Binaries: os.Getenv("NODE_ASSETS"), Pause: os.Getenv("PAUSE")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("CLUSTER READY", c.Name())
	select {} // until killed
}

func deployProbe(ctx context.Context, g Gomega, cs kubernetes.Interface) {
	deploy, svc := testenv.ProbeWorkload("default")
	_, err := cs.AppsV1().Deployments("default").Create(ctx, deploy, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "probe", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(1))
	}).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
}

func params(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func acceptAll(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		conn.Close()
	}
}
