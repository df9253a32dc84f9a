//go:build bench

package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchplot"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// contender is the hub manager one measurement runs: the operator's, or the existing OCM cluster-proxy addon's.
type contender struct {
	name string
	// addonManager is the path of the addon's addon-manager; "" runs the operator's manager.
	addonManager string
}

var operator = contender{name: "cluster-proxy-operator"}

func (c contender) ours() bool { return c.addonManager == "" }

// fileName is name for the operator's files, and "addon-"+name for the addon's, so one profile folder holds both.
func (c contender) fileName(name string) string {
	if c.ours() {
		return name
	}
	return "addon-" + name
}

// configurationReady says whether the manager has set up the proxy-servers' side of mpc: the operator reports Ready;
// the addon reports its proxy-server and agent-server certificates signed (its Deployment never becomes available on
// a hub without nodes).
func (c contender) configurationReady(mpc *proxyv1alpha1.ManagedProxyConfiguration) bool {
	if c.ours() {
		return meta.IsStatusConditionTrue(mpc.Status.Conditions, proxyv1alpha1.ConditionReady)
	}
	return meta.IsStatusConditionTrue(mpc.Status.Conditions, "ProxyServerSecretSigned") &&
		meta.IsStatusConditionTrue(mpc.Status.Conditions, "AgentServerSecretSigned")
}

// convergedWhen says what convergence waits for.
func (c contender) convergedWhen() string {
	if c.ours() {
		return "work + status"
	}
	return "work"
}

// TestControlPlaneVersusAddon measures the existing addon's manager (BENCH_ADDON_MANAGER) and the operator's on the
// same kind of hub: for each fleet size of BENCH_CLUSTERS, BENCH_REPEAT times (default 1), each on a new OCM v1.2
// hub with OCM's add-on manager, the same clusters registered the same way, and the add-on created on every cluster
// at once by the same requests. The order alternates between sizes and repeats, so neither manager always runs on a
// machine the other has warmed. It prints the figures side by side with the addon's divided by the operator's, and
// writes them as JSON (BENCH_OUT, default bin/bench/control-plane-vs-addon.json) and a plot beside it.
func TestControlPlaneVersusAddon(t *testing.T) {
	path := os.Getenv(addonManagerEnv)
	version, err := addonManagerVersion(path)
	if err != nil {
		t.Fatal(err)
	}
	addon := contender{name: "addon " + version, addonManager: path}
	sizes, how := fromEnv(t)
	how.withOCM = true
	repeats := 1
	if v := os.Getenv("BENCH_REPEAT"); v != "" {
		if repeats, err = strconv.Atoi(v); err != nil || repeats <= 0 {
			t.Fatalf("BENCH_REPEAT=%q: want a count of runs per size, such as 3", v)
		}
	}
	log.SetLogger(logr.Discard())
	var pairs []pair
	turn := 0
	for _, n := range sizes {
		for r := 0; r < repeats; r++ {
			order := []contender{addon, operator}
			if turn%2 == 1 {
				order = []contender{operator, addon}
			}
			turn++
			measured := map[bool]sizeFigures{}
			for _, who := range order {
				t.Run(fmt.Sprintf("%d/%d/%s", n, r+1, strings.Fields(who.name)[0]), func(t *testing.T) {
					measured[who.ours()] = measureSize(t, n, how, who)
				})
				if t.Failed() {
					return
				}
			}
			pairs = append(pairs, pair{Addon: measured[false], Operator: measured[true], OperatorFirst: order[0].ours()})
		}
	}
	printVersus(pairs)
	writeVersus(t, pairs)
}

// pair is one size measured with both managers.
type pair struct {
	Addon         sizeFigures `json:"addon"`
	Operator      sizeFigures `json:"operator"`
	OperatorFirst bool        `json:"operatorFirst"`
}

// versusRows are the figures compared, each with whether less is better (every one here) and how to read it.
var versusRows = []struct {
	name string
	get  func(f sizeFigures) float64
	unit string
}{
	{"convergence (every ManifestWork)", func(f sizeFigures) float64 { return f.WorksSeconds }, "s"},
	{"convergence (operator: work + status)", func(f sizeFigures) float64 { return f.ConvergenceSeconds }, "s"},
	{"manager CPU per cluster", func(f sizeFigures) float64 { return f.perCluster(f.ManagerCPUSeconds) }, "ms"},
	{"kube-apiserver CPU per cluster", func(f sizeFigures) float64 { return f.perCluster(f.KubeAPIServerCPUSeconds) }, "ms"},
	{"etcd CPU per cluster", func(f sizeFigures) float64 { return f.perCluster(f.EtcdCPUSeconds) }, "ms"},
	{"OCM CPU per cluster", func(f sizeFigures) float64 { return f.perCluster(f.OCMCPUSeconds) }, "ms"},
	{"writes per cluster", func(f sizeFigures) float64 { return f.WritesPerCluster }, ""},
	{"reads per cluster (GET, list, watch)", func(f sizeFigures) float64 { return f.ReadsPerCluster }, ""},
	{"manager peak RSS", func(f sizeFigures) float64 { return float64(f.ManagerPeakRSSMiB) }, "MiB"},
	{"steady-state writes", func(f sizeFigures) float64 { return f.SteadyWrites }, ""},
	{"steady-state reads", func(f sizeFigures) float64 { return f.SteadyGets }, ""},
}

// printVersus prints, for each pair, the addon's figure, the operator's, and the addon's divided by the operator's:
// above 1, the operator needs less.
func printVersus(pairs []pair) {
	var b strings.Builder
	b.WriteString("\ncontrol-plane benchmark: the existing addon's manager and the operator's on the same hub\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "  %d clusters, %s first; steady state %.0f s\n", p.Operator.Clusters, firstName(p), p.Operator.SteadySeconds)
		fmt.Fprintf(&b, "    %-40s %14s %14s %16s\n", "", "addon", "operator", "addon/operator")
		for _, r := range versusRows {
			a, o := r.get(p.Addon), r.get(p.Operator)
			fmt.Fprintf(&b, "    %-40s %14s %14s %16s\n", r.name, withUnit(a, r.unit), withUnit(o, r.unit), ratio(a, o))
		}
	}
	fmt.Print(b.String())
}

func firstName(p pair) string {
	if p.OperatorFirst {
		return "operator"
	}
	return "addon"
}

func withUnit(v float64, unit string) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	if unit != "" {
		s += " " + unit
	}
	return s
}

// ratio is a/o as text, "-" when o is zero.
func ratio(a, o float64) string {
	if o == 0 {
		if a == 0 {
			return "equal"
		}
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/o)
}

// versusPath is BENCH_OUT, default bin/bench/control-plane-vs-addon.json.
func versusPath() string { return benchplot.FiguresPath("control-plane-vs-addon.json") }

func writeVersus(t *testing.T, pairs []pair) {
	out := versusPath()
	must(t, benchplot.WriteFigures(out, pairs))
	t.Logf("figures written to %s", out)
	writeVersusPlot(t, filepath.Dir(out), pairs)
}

// TestControlPlaneVersusAddonPlot draws the plot again from the figures of an earlier run (BENCH_OUT), without
// measuring.
func TestControlPlaneVersusAddonPlot(t *testing.T) {
	var pairs []pair
	if err := benchplot.ReadFigures(versusPath(), &pairs); err != nil {
		t.Fatalf("%v (make bench-control-plane-vs-addon writes them)", err)
	}
	writeVersusPlot(t, filepath.Dir(versusPath()), pairs)
}

// writeVersusPlot draws control-plane-vs-addon.svg: for the first pair of the largest size, each figure of the
// operator's as a share of the addon's (the addon = 1).
func writeVersusPlot(t *testing.T, dir string, pairs []pair) {
	p := pairs[0]
	for _, q := range pairs {
		if q.Operator.Clusters > p.Operator.Clusters {
			p = q
		}
	}
	chart := benchplot.Bar{Title: fmt.Sprintf("%d clusters: the operator's manager against the addon's (= 1)", p.Operator.Clusters),
		YLabel: "share of the addon's figure"}
	addon, ours := benchplot.Series{Name: "addon"}, benchplot.Series{Name: "operator"}
	for _, r := range []int{0, 2, 3, 6, 7, 8} { // convergence, CPU, requests, memory
		a, o := versusRows[r].get(p.Addon), versusRows[r].get(p.Operator)
		if a == 0 {
			continue
		}
		chart.Names = append(chart.Names, versusRows[r].name)
		addon.Y, ours.Y = append(addon.Y, 1), append(ours.Y, o/a)
	}
	chart.Series = []benchplot.Series{addon, ours}
	names, err := benchplot.WriteFiles(dir, map[string]benchplot.Chart{"control-plane-vs-addon.svg": chart})
	must(t, err)
	t.Logf("plot written to %s: %s", dir, strings.Join(names, ", "))
}

// installAddonPrerequisites creates what the addon's Helm chart installs before its manager starts: the namespace,
// the ManagedProxyConfiguration mpc (which the manager reads as it starts), and the ClusterManagementAddOn that hands
// the add-on's lifecycle to OCM's add-on manager with mpc as its default configuration. Its install strategy is
// Manual: the harness creates the ManagedClusterAddOns, as for the operator.
func installAddonPrerequisites(t *testing.T, c client.Client, mpc *proxyv1alpha1.ManagedProxyConfiguration) {
	ctx := context.Background()
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: addonNamespace}}))
	must(t, c.Create(ctx, mpc))
	cma := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "addon.open-cluster-management.io/v1beta1",
		"kind":       "ClusterManagementAddOn",
		"metadata": map[string]any{
			"name":        proxyv1alpha1.AddonName,
			"annotations": map[string]any{"addon.open-cluster-management.io/lifecycle": "addon-manager"},
		},
		"spec": map[string]any{
			"addOnMeta": map[string]any{"displayName": "cluster-proxy"},
			"defaultConfigs": []any{map[string]any{
				"group": proxyv1alpha1.GroupVersion.Group, "resource": "managedproxyconfigurations", "name": mpc.Name,
			}},
			"installStrategy": map[string]any{"type": "Manual"},
		},
	}}
	must(t, c.Create(ctx, cma))
}

// startAddonManager starts the addon's manager as its Deployment runs it (POD_NAMESPACE, the signer's namespace, no
// leader election), as a cluster admin like the operator's here, its metrics at metricsAddr.
func startAddonManager(t *testing.T, env *envtest.Environment, bin, metricsAddr string, memoryLimit int64) *manager {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	_, err := testenv.AdminKubeconfig(env, "cluster-proxy-addon-manager", kubeconfig)
	must(t, err)
	cmd := process.Command{Path: bin, LogPath: filepath.Join(dir, "addon-manager.log"),
		Env: append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE="+addonNamespace),
		Args: []string{"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + freeAddr(t),
			"--signer-secret-namespace=" + addonNamespace, "--agent-image-name=example.com/proxy:1"}}
	m := &manager{}
	if memoryLimit > 0 {
		m.cgroup = newMemoryCgroup(t, memoryLimit)
		cmd = m.cgroup.wrap(cmd)
	}
	p, err := process.Run(cmd)
	must(t, err)
	m.Process = p
	return m
}

// issueServiceProxyCertificate does, once, what the addon's second hub program ('cluster-proxy controllers', which
// its chart runs beside the user-server) does before any agent is deployed: it signs the service-proxy's serving
// certificate with the addon's signer CA into the Secret the addon's manager reads for every cluster's manifests.
// It is not per cluster, so it costs neither manager anything measured.
func issueServiceProxyCertificate(t *testing.T, c client.Client) {
	ctx := context.Background()
	signer := &corev1.Secret{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: addonNamespace, Name: "cluster-proxy-signer"}, signer))
	ca, err := certs.ParseCA(signer.Data["ca.crt"], signer.Data["ca.key"])
	must(t, err)
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "cluster-proxy-service-proxy",
		DNSNames: []string{"*", "localhost", "*.open-cluster-management.proxy"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: 180 * 24 * time.Hour}, time.Now())
	must(t, err)
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: addonNamespace, Name: "cluster-proxy-service-proxy-server-cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM},
	}))
}

// ocmLocalComm is the command name of bin/ocm-local's processes: OCM's add-on manager and conversion webhook.
const ocmLocalComm = "ocm-local"

// startOCMAddonManager runs OCM v1.2's own add-on manager (bin/ocm-local, make ocm-local) on the hub: it owns the
// add-ons' configuration references, owner references and Configured conditions, as on a real OCM hub.
func startOCMAddonManager(t *testing.T, env *envtest.Environment) *process.Process {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	_, err := testenv.AdminKubeconfig(env, "ocm-addon-manager", kubeconfig)
	must(t, err)
	p, err := process.Run(process.Command{Path: repo.OCMLocal(), LogPath: filepath.Join(dir, "ocm-addon-manager.log"),
		Args: []string{"hub", "--kubeconfig=" + kubeconfig, "--components=addon-manager"}})
	must(t, err)
	return p
}

// watchWorks reports the moment each of n cluster namespaces holds a ManifestWork, from one watch that decodes only
// the namespace.
func watchWorks(t *testing.T, cfg *rest.Config, n int) <-chan time.Time {
	var ev struct {
		Type   string
		Object struct{ Metadata struct{ Namespace string } }
	}
	return watchUntil(t, cfg, "/apis/"+workv1.SchemeGroupVersion.String()+"/manifestworks", n, func(dec *json.Decoder) (string, error) {
		if err := dec.Decode(&ev); err != nil || ev.Type != "ADDED" {
			return "", err
		}
		return ev.Object.Metadata.Namespace, nil
	})
}

// checkAddonWorks fails unless each of the n clusters has a ManifestWork of the add-on.
func checkAddonWorks(t *testing.T, c client.Client, n int) {
	works := &metav1.PartialObjectMetadataList{}
	works.SetGroupVersionKind(workv1.SchemeGroupVersion.WithKind("ManifestWorkList"))
	must(t, c.List(context.Background(), works, client.MatchingLabels{"open-cluster-management.io/addon-name": proxyv1alpha1.AddonName}))
	namespaces := map[string]bool{}
	for _, w := range works.Items {
		namespaces[w.Namespace] = true
	}
	if len(namespaces) != n {
		t.Fatalf("%d of %d clusters have a ManifestWork of the add-on", len(namespaces), n)
	}
}
