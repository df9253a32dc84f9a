package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/tunneltest"
)

// plugin runs the command line and returns its exit code and output.
func plugin(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// hubFixture is an envtest hub holding what the operator would have put there, and a data plane on 127.0.0.1.
type hubFixture struct {
	kubeconfig string // an admin of the hub, with a client certificate (no token)
	nobody     string // a hub user without any right
	client     client.Client
	data       *tunneltest.Hub
	resolve    []string
}

func startHub(t *testing.T) *hubFixture {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through 'make test', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")
	}
	env, err := testenv.NewHub()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "hub-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	f := &hubFixture{kubeconfig: filepath.Join(t.TempDir(), "hub.kubeconfig"), nobody: filepath.Join(t.TempDir(), "nobody.kubeconfig")}
	if err := os.WriteFile(f.kubeconfig, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	nobody, err := env.AddUser(envtest.User{Name: "nobody"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = nobody.KubeConfig(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.nobody, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := (&globals{kubeconfig: f.kubeconfig}).hub()
	if err != nil {
		t.Fatal(err)
	}
	f.client = h.client
	f.data = tunneltest.Start(t, "proxy-ns")
	for _, r := range f.data.ResolveFlags() {
		f.resolve = append(f.resolve, "--resolve", r)
	}
	ctx := context.Background()
	mustDo(t, f.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "proxy-ns"}}))
	for _, o := range f.data.Objects() {
		mustDo(t, f.client.Create(ctx, o))
	}
	return f
}

// addCluster registers a managed cluster, with the add-on and its Available condition when available is set.
func (f *hubFixture) addCluster(t *testing.T, name string, available metav1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	mustDo(t, f.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	mustDo(t, f.client.Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true}}))
	if available == "" {
		return
	}
	mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: name}}
	mustDo(t, f.client.Create(ctx, mca))
	meta.SetStatusCondition(&mca.Status.Conditions, metav1.Condition{Type: "Available", Status: available, Reason: "ProbeAvailable"})
	mustDo(t, f.client.Status().Update(ctx, mca))
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var columns = regexp.MustCompile(`\s{2,}`)

func TestPluginAgainstAHubAndTunnels(t *testing.T) {
	f := startHub(t)
	var c4Healthy atomic.Bool
	api, _ := tunneltest.KubeAPIServer(t, "v1", nil)
	sick, _ := tunneltest.KubeAPIServer(t, "v1", c4Healthy.Load)
	f.addCluster(t, "3rd", metav1.ConditionTrue) // a name that starts with a digit
	f.addCluster(t, "c1", metav1.ConditionTrue)
	f.addCluster(t, "c2", metav1.ConditionFalse) // installed, its agent not connected
	f.addCluster(t, "c4", metav1.ConditionTrue)  // connected, its kube-apiserver failing
	f.addCluster(t, "c5", "")                    // no add-on
	f.data.StartAgent(t, "3rd", api)
	f.data.StartAgent(t, "c1", api)
	f.data.StartAgent(t, "c4", sick)

	t.Run("health prints the clusteradm table, probing every tunnel now", func(t *testing.T) {
		g := NewWithT(t)
		code, out, errOut := plugin(append([]string{"health", "--kubeconfig", f.kubeconfig}, f.resolve...)...)
		g.Expect(code).To(Equal(0), errOut)
		t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines[0]).To(Equal("CLUSTER NAME    INSTALLED    AVAILABLE    PROBED HEALTH    LATENCY"))
		rows := map[string][]string{}
		for _, l := range lines[1:] {
			fields := columns.Split(strings.TrimSpace(l), -1)
			g.Expect(fields).To(HaveLen(5), l)
			rows[fields[0]] = fields[1:]
			g.Expect(strings.LastIndex(l, fields[4])).To(Equal(strings.Index(lines[0], "LATENCY")), "columns are aligned: %q", l)
		}
		g.Expect(rows).To(HaveLen(5))
		for _, healthy := range []string{"3rd", "c1"} {
			g.Expect(rows[healthy][:3]).To(Equal([]string{"True", "True", "True"}), healthy)
			latency, err := time.ParseDuration(rows[healthy][3])
			g.Expect(err).NotTo(HaveOccurred(), healthy)
			g.Expect(latency).To(BeNumerically(">", 0))
		}
		g.Expect(rows["c2"]).To(Equal([]string{"True", "False", "False", "<none>"}))
		g.Expect(rows["c4"]).To(Equal([]string{"True", "True", "False", "<none>"}))
		g.Expect(rows["c5"]).To(Equal([]string{"False", "False", "False", "<none>"}))
		g.Expect(errOut).To(ContainSubstring("cluster c4: GET /healthz answered 500"), "why a probe failed goes to stderr")
	})

	t.Run("kubeconfig writes the user-server URL of the cluster with the hub's CA", func(t *testing.T) {
		g := NewWithT(t)
		path := filepath.Join(t.TempDir(), "c1.kubeconfig")
		code, out, errOut := plugin("kubeconfig", "c1", "-o", path, "--token", "managed-cluster-token", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(BeEmpty())
		cfg, err := clientcmd.LoadFromFile(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.CurrentContext).To(Equal("c1"))
		cluster := cfg.Clusters[cfg.Contexts["c1"].Cluster]
		g.Expect(cluster.Server).To(Equal("https://cluster-proxy-addon-user.proxy-ns.svc:9092/c1"))
		g.Expect(cluster.CertificateAuthorityData).To(Equal(f.data.BundleSecret.Data["ca.crt"]))
		g.Expect(cluster.TLSServerName).To(BeEmpty())
		g.Expect(cfg.AuthInfos[cfg.Contexts["c1"].AuthInfo].Token).To(Equal("managed-cluster-token"))
		info, err := os.Stat(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the file holds a token")
	})

	t.Run("kubeconfig --via-hub writes a context on the hub's server with the hub user, and refuses user-server flags", func(t *testing.T) {
		g := NewWithT(t)
		code, out, errOut := plugin("kubeconfig", "c1", "--via-hub", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(0), errOut)
		// A user who may reach clusters but not read ManagedClusters gets the context all the same.
		code, nobodyOut, errOut := plugin("kubeconfig", "c1", "--via-hub", "--kubeconfig", f.nobody)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(nobodyOut).To(ContainSubstring("c1-via-hub"))
		cfg, err := clientcmd.Load([]byte(out))
		g.Expect(err).NotTo(HaveOccurred())
		hub, err := clientcmd.LoadFromFile(f.kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		hubContext := hub.Contexts[hub.CurrentContext]
		g.Expect(cfg.CurrentContext).To(Equal("c1-via-hub"))
		g.Expect(cfg.Clusters["c1-via-hub"].Server).To(Equal(strings.TrimSuffix(hub.Clusters[hubContext.Cluster].Server, "/") +
			"/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/c1/proxy"))
		user, hubUser := cfg.AuthInfos[hubContext.AuthInfo], hub.AuthInfos[hubContext.AuthInfo]
		g.Expect(user).NotTo(BeNil())
		g.Expect(user.ClientCertificateData).To(Equal(hubUser.ClientCertificateData), "the hub user as it is")
		g.Expect(user.ClientKeyData).To(Equal(hubUser.ClientKeyData))

		code, _, errOut = plugin("kubeconfig", "c1", "--via-hub", "--token", "t", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(ContainSubstring("drop --token"))
		code, _, errOut = plugin("kubeconfig", "nope", "--via-hub", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(ContainSubstring(`managed cluster "nope" not found`))
	})

	t.Run("kubeconfig follows --resolve and --user-server-url, and writes to stdout without -o", func(t *testing.T) {
		g := NewWithT(t)
		code, out, errOut := plugin("--kubeconfig", f.kubeconfig, "kubeconfig", "3rd", "--token", "t",
			"--resolve", "cluster-proxy-addon-user.proxy-ns.svc:9092=127.0.0.1:19092")
		g.Expect(code).To(Equal(0), errOut)
		cfg, err := clientcmd.Load([]byte(out))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Clusters["3rd"].Server).To(Equal("https://127.0.0.1:19092/3rd"))
		g.Expect(cfg.Clusters["3rd"].TLSServerName).To(Equal("cluster-proxy-addon-user.proxy-ns.svc"), "the certificate is checked against the Service name")

		code, out, errOut = plugin("kubeconfig", "c1", "--token", "t", "--kubeconfig", f.kubeconfig, "--user-server-url", "https://users.hub.example/proxy/")
		g.Expect(code).To(Equal(0), errOut)
		cfg, err = clientcmd.Load([]byte(out))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Clusters["c1"].Server).To(Equal("https://users.hub.example/proxy/c1"))
	})

	t.Run("errors say what is wrong", func(t *testing.T) {
		g := NewWithT(t)
		code, _, errOut := plugin("kubeconfig", "nope", "--token", "t", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(ContainSubstring(`managed cluster "nope" not found`))

		code, _, errOut = plugin("kubeconfig", "c1", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(ContainSubstring("no token: pass --token"))

		code, _, errOut = plugin("kubeconfig", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(ContainSubstring("kubeconfig takes one managed cluster name"))

		code, _, errOut = plugin("status", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(ContainSubstring(`unknown command "status"`))

		code, _, errOut = plugin("health", "--resolve", "no-port=127.0.0.1:1", "--kubeconfig", f.kubeconfig)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(ContainSubstring("--resolve"))
	})

	t.Run("an unreachable hub is named with the cause", func(t *testing.T) {
		g := NewWithT(t)
		cfg, err := clientcmd.LoadFromFile(f.kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		for _, c := range cfg.Clusters {
			c.Server = "https://127.0.0.1:1"
		}
		path := filepath.Join(t.TempDir(), "unreachable.kubeconfig")
		g.Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
		for _, cmd := range [][]string{{"health"}, {"kubeconfig", "c1", "--token", "t"}} {
			code, _, errOut := plugin(append(cmd, "--kubeconfig", path)...)
			g.Expect(code).To(Equal(1), "%v", cmd)
			g.Expect(errOut).To(And(ContainSubstring("cannot reach the hub at https://127.0.0.1:1"), ContainSubstring("connection refused")), "%v", cmd)
		}
	})

	t.Run("a hub without the ManagedProxyConfiguration is named", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(f.client.Delete(context.Background(), f.data.MPC.DeepCopy())).To(Succeed())
		for _, cmd := range [][]string{{"health"}, {"kubeconfig", "c1", "--token", "t"}} {
			code, _, errOut := plugin(append(cmd, "--kubeconfig", f.kubeconfig)...)
			g.Expect(code).To(Equal(1), "%v", cmd)
			g.Expect(errOut).To(ContainSubstring(`no ManagedProxyConfiguration "cluster-proxy" on the hub at https://127.0.0.1:`), "%v", cmd)
		}
	})
}
