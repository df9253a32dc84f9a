//go:build bench

// Package controlplane measures the operator's control plane at scale: N managed clusters (1,000 by default) on a
// real envtest hub, the manager as its own process. It reports how long every cluster takes to get its ManifestWork
// and ClusterProxyStatus, the CPU and API writes per cluster, the manager's peak RSS, and its API requests during
// 60 s of steady state (BENCH_STEADY). Run it with 'make bench-control-plane'.
//
//   - BENCH_CLUSTERS=1000,5000,10000 measures each size on a hub of its own and prints the per-cluster figures side by
//     side, so a step that grows faster than the fleet shows.
//   - BENCH_MEMORY_LIMIT=256Mi runs the manager in a memory cgroup of its own with that limit, as every install path
//     limits its container (cgroup v1 and root).
//   - Figures are written as JSON to BENCH_OUT (default bin/bench/control-plane.json) and drawn beside it as SVG;
//     TestControlPlanePlots draws them again without measuring.
//   - BENCH_PROFILE_DIR=dir saves CPU profiles and the objects of one cluster.
package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchmeasure"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// Targets for 1,000 clusters (docs/performance.md#targets).
const (
	targetConvergence  = 10 * time.Second
	targetRSSMiB       = 100
	targetWritesPerCl  = 7
	defaultSteadyState = 60 * time.Second
	convergenceTimeout = 10 * time.Minute
)

// sizeFigures is what one fleet size measured; per-cluster figures are the totals over Clusters.
type sizeFigures struct {
	// Manager is the manager measured (the operator's, or the existing addon's), Hub what ran beside it.
	Manager  string `json:"manager,omitempty"`
	Hub      string `json:"hub,omitempty"`
	Clusters int    `json:"clusters"`
	// ConvergenceSeconds runs from the first add-on created until every cluster has its ManifestWork, and for the
	// operator also its ClusterProxyStatus; WorksSeconds until every cluster has its ManifestWork (measured on an OCM
	// hub only).
	ConvergenceSeconds float64 `json:"convergenceSeconds"`
	WorksSeconds       float64 `json:"worksSeconds,omitempty"`
	// CPU seconds while converging, and the CPU the whole machine spent busy meanwhile.
	ManagerCPUSeconds       float64 `json:"managerCPUSeconds"`
	KubeAPIServerCPUSeconds float64 `json:"kubeAPIServerCPUSeconds"`
	EtcdCPUSeconds          float64 `json:"etcdCPUSeconds"`
	// OCMCPUSeconds is what OCM's add-on manager and conversion webhook spent (on an OCM hub only).
	OCMCPUSeconds      float64 `json:"ocmCPUSeconds,omitempty"`
	HarnessCPUSeconds  float64 `json:"harnessCPUSeconds"`
	MachineBusySeconds float64 `json:"machineBusySeconds"`
	WritesPerCluster   float64 `json:"writesPerCluster"`
	// ReadsPerCluster counts GETs, lists and watches alike, as client-go does.
	ReadsPerCluster      float64 `json:"readsPerCluster,omitempty"`
	ReconcilesPerCluster float64 `json:"reconcilesPerCluster"`
	ManagerPeakRSSMiB    int     `json:"managerPeakRSSMiB"`
	// MemoryLimitMiB is the memory cgroup limit the manager ran under (BENCH_MEMORY_LIMIT), 0 for none; the cgroup's
	// peak is what it was charged (the binary's pages only when they were not cached before), and OOMKills says
	// whether the kernel killed the manager.
	MemoryLimitMiB int     `json:"memoryLimitMiB,omitempty"`
	CgroupPeakMiB  int     `json:"cgroupPeakMiB,omitempty"`
	OOMKills       int     `json:"oomKills,omitempty"`
	SteadySeconds  float64 `json:"steadySeconds"`
	SteadyWrites   float64 `json:"steadyWrites"`
	SteadyGets     float64 `json:"steadyGets"`
	MeasuredAt     string  `json:"measuredAt"`
}

func (f sizeFigures) perCluster(seconds float64) float64 { return seconds * 1000 / float64(f.Clusters) }

// TestControlPlaneScale measures each fleet size of BENCH_CLUSTERS (default 1000) on a hub of its own, then prints
// the per-cluster figures side by side and writes them as JSON and plots to BENCH_OUT's folder.
func TestControlPlaneScale(t *testing.T) {
	sizes, how := fromEnv(t)
	// envtest logs through controller-runtime's logger; without one, each hub prints a warning with a stack trace.
	log.SetLogger(logr.Discard())
	var all []sizeFigures
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			all = append(all, measureSize(t, n, how, operator))
		})
		if t.Failed() {
			return
		}
	}
	printSideBySide(all)
	writeFigures(t, all)
}

// fromEnv reads the fleet sizes (BENCH_CLUSTERS, default 1000), the steady state's length (BENCH_STEADY), the
// manager's memory limit (BENCH_MEMORY_LIMIT) and the kind of hub (BENCH_HUB).
func fromEnv(t *testing.T) ([]int, setup) {
	sizes := []int{1000}
	if v := os.Getenv("BENCH_CLUSTERS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("BENCH_CLUSTERS=%q: want cluster counts separated by commas, such as 1000,5000,10000", v)
			}
			sizes = append(sizes, n)
		}
	}
	how := setup{steady: defaultSteadyState}
	if v := os.Getenv("BENCH_STEADY"); v != "" {
		var err error
		if how.steady, err = time.ParseDuration(v); err != nil {
			t.Fatalf("BENCH_STEADY=%q: %v", v, err)
		}
	}
	if v := os.Getenv("BENCH_MEMORY_LIMIT"); v != "" {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Value() <= 0 {
			t.Fatalf("BENCH_MEMORY_LIMIT=%q: want a memory quantity such as 256Mi", v)
		}
		how.memoryLimit = q.Value()
	}
	switch v := os.Getenv("BENCH_HUB"); v {
	case "", "plain":
	case "ocm":
		how.withOCM = true
	default:
		t.Fatalf("BENCH_HUB=%q: want plain (OCM v1.0's CRDs and nothing else) or ocm (OCM v1.2 with its add-on manager)", v)
	}
	return sizes, how
}

// setup is how a size is measured: the steady state's length, the manager's memory limit, and the hub.
type setup struct {
	steady      time.Duration
	memoryLimit int64
	// withOCM makes the hub one of OCM v1.2 (its CRDs and add-on conversion webhook) and runs OCM's own add-on
	// manager beside the manager measured, as an OCM hub does: the existing addon's manager deploys nothing without
	// the configuration and owner references it writes. Without it, the hub has OCM v1.0's CRDs and nothing else.
	withOCM bool
}

// measureSize registers n clusters on a new hub, installs the add-on on all of them at once, and measures the
// manager of who until they converge and through the steady state after.
func measureSize(t *testing.T, n int, how setup, who contender) sizeFigures {
	ctx := context.Background()
	hub, err := testenv.NewHubOf(hubRelease(how), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hub.ControlPlane.GetAPIServer().Configure().Set("max-requests-inflight", "1000").Set("max-mutating-requests-inflight", "500").
		Set("profiling", "true")
	cfg, err := hub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("registering %d managed clusters", n)
	caPEM := clusterCABundle(t)
	parallel(t, n, func(i int) error {
		name := fmt.Sprintf("cluster-%05d", i)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return err
		}
		return registerCluster(ctx, c, name, caPEM)
	})
	if how.withOCM {
		ocm := startOCMAddonManager(t, hub.Environment)
		defer ocm.Stop()
	}
	// The manager starts on a hub whose clusters have joined, as it would be installed on one, so that its watches
	// are as young as they can be at steady state: client-go re-opens them after 5 to 10 minutes, and counts each
	// re-opened watch as a GET (at 10,000 clusters, only a steady state of about 30 s ends before 5 minutes).
	metricsAddr, pprofAddr := freeAddr(t), freeAddr(t)
	mpc := benchConfiguration()
	var mgr *manager
	if who.ours() {
		mgr = startManager(t, hub.Environment, cfg, c, metricsAddr, pprofAddr, how.memoryLimit)
		must(t, c.Create(ctx, mpc))
	} else {
		// The addon's manager reads its configuration once, as it starts, and fails without it.
		installAddonPrerequisites(t, c, mpc)
		mgr = startAddonManager(t, hub.Environment, who.addonManager, metricsAddr, how.memoryLimit)
	}
	defer mgr.stop()
	waitFor(t, "the configuration to be Ready", convergenceTimeout, func() bool {
		if exited, _ := mgr.Exited(); exited {
			t.Fatalf("the manager exited (%s); its log ends:\n%s", mgr.exitDescription(t), mgr.Tail(30))
		}
		live := &proxyv1alpha1.ManagedProxyConfiguration{}
		return c.Get(ctx, client.ObjectKeyFromObject(mpc), live) == nil && who.configurationReady(live)
	})
	if !who.ours() {
		issueServiceProxyCertificate(t, c)
	}

	waitQuiet(t, metricsAddr)
	before := scrape(t, metricsAddr)

	t.Logf("installing the add-on on %d clusters (%s)", n, who.name)
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	// Watches, not polling lists: measuring must not take API server CPU.
	var worksAt, statusAt <-chan time.Time
	if how.withOCM {
		worksAt = watchWorks(t, cfg, n)
	}
	if who.ours() {
		statusAt = watchConvergence(t, cfg, n)
	}
	cpuBefore, busyBefore, harnessBefore := mgr.cpuSeconds(t), machineBusySeconds(), pidCPUSeconds(t, os.Getpid())
	apiBefore, etcdBefore, ocmBefore := processCPUSeconds(t, "kube-apiserver"), processCPUSeconds(t, "etcd"), processCPUSeconds(t, ocmLocalComm)
	stopProfiles := profile(t, cfg, pprofAddr, who)
	start := time.Now()
	parallel(t, n, func(i int) error { return createAddOn(ctx, hc, cfg.Host, fmt.Sprintf("cluster-%05d", i)) })
	created := time.Since(start)
	var worksDone, statusDone time.Time
	for worksAt != nil || statusAt != nil {
		select {
		case worksDone = <-worksAt:
			worksAt = nil
		case statusDone = <-statusAt:
			statusAt = nil
		case <-mgr.Done():
			t.Fatalf("the manager exited (%s) before every cluster converged; its log ends:\n%s", mgr.exitDescription(t), mgr.Tail(30))
		case <-time.After(convergenceTimeout):
			t.Fatalf("timed out after %s waiting for every cluster to have %s; the manager's log ends:\n%s",
				convergenceTimeout, who.convergedWhen(), mgr.Tail(30))
		}
	}
	doneAt := worksDone
	if statusDone.After(doneAt) {
		doneAt = statusDone
	}
	converged := doneAt.Sub(start)
	stopProfiles()
	heapProfile(t, pprofAddr, who)
	mgrCPU, machineCPU, harnessCPU := mgr.cpuSeconds(t)-cpuBefore, machineBusySeconds()-busyBefore, pidCPUSeconds(t, os.Getpid())-harnessBefore
	apiCPU, etcdCPU, ocmCPU := processCPUSeconds(t, "kube-apiserver")-apiBefore, processCPUSeconds(t, "etcd")-etcdBefore, processCPUSeconds(t, ocmLocalComm)-ocmBefore
	if who.ours() {
		checkWorks(t, c, n)
	} else {
		checkAddonWorks(t, c, n)
	}
	waitQuiet(t, metricsAddr)
	afterConverge := scrape(t, metricsAddr)
	writes := afterConverge.writes() - before.writes()

	t.Logf("steady state: watching the manager's API requests for %s", how.steady)
	time.Sleep(how.steady) // the measurement is the absence of requests over this period
	afterSteady := scrape(t, metricsAddr)
	steadyWrites := afterSteady.writes() - afterConverge.writes()
	steadyGets := afterSteady.method("GET") - afterConverge.method("GET")
	rss := mgr.peakRSSMiB(t)
	sizes := objectSizes(t, cfg, "cluster-00000", who)
	fig := sizeFigures{
		Manager: who.name, Hub: hubDescription(how),
		Clusters: n, ConvergenceSeconds: converged.Seconds(),
		ManagerCPUSeconds: mgrCPU, KubeAPIServerCPUSeconds: apiCPU, EtcdCPUSeconds: etcdCPU, HarnessCPUSeconds: harnessCPU,
		MachineBusySeconds: machineCPU,
		WritesPerCluster:   writes / float64(n), ReadsPerCluster: (afterConverge.method("GET") - before.method("GET")) / float64(n),
		ReconcilesPerCluster: (afterConverge[reconciles] - before[reconciles]) / float64(n),
		ManagerPeakRSSMiB:    rss, SteadySeconds: how.steady.Seconds(), SteadyWrites: steadyWrites, SteadyGets: steadyGets,
		MeasuredAt: time.Now().UTC().Format(time.RFC3339),
	}
	if how.withOCM {
		fig.WorksSeconds, fig.OCMCPUSeconds = worksDone.Sub(start).Seconds(), ocmCPU
	}
	memory := ""
	if mgr.cgroup != nil {
		fig.MemoryLimitMiB, fig.CgroupPeakMiB, fig.OOMKills = int(how.memoryLimit>>20), mgr.cgroup.peakMiB(t), mgr.cgroup.oomKills(t)
		memory = fmt.Sprintf("; memory cgroup limit %d MiB, its peak %d MiB, OOM kills %d", fig.MemoryLimitMiB, fig.CgroupPeakMiB, fig.OOMKills)
	}

	report := []string{
		fmt.Sprintf("manager                          %s", who.name),
		fmt.Sprintf("hub                              %s", fig.Hub),
		fmt.Sprintf("clusters                         %d", n),
		fmt.Sprintf("add-ons created by the harness   %s", created.Round(time.Millisecond)),
		fmt.Sprintf("%-33s%s   (target <= %s for 1,000)", "convergence ("+who.convergedWhen()+")", converged.Round(time.Millisecond), targetConvergence),
	}
	if how.withOCM && who.ours() {
		report = append(report, fmt.Sprintf("every ManifestWork created after %.3fs", fig.WorksSeconds))
	}
	report = append(report,
		fmt.Sprintf("clusters per second              %.1f", float64(n)/converged.Seconds()),
		fmt.Sprintf("CPU while converging             manager %.1fs, kube-apiserver %.1fs, etcd %.1fs, OCM %.1fs, this harness %.1fs; whole machine %.1fs of %.1fs available",
			mgrCPU, apiCPU, etcdCPU, fig.OCMCPUSeconds, harnessCPU, machineCPU, converged.Seconds()*float64(runtime.NumCPU())),
		fmt.Sprintf("manager API writes per cluster   %.2f   (target <= %d)", fig.WritesPerCluster, targetWritesPerCl),
		fmt.Sprintf("manager requests while converging %s", afterConverge.minus(before)),
		fmt.Sprintf("reconciles per cluster           %.2f", fig.ReconcilesPerCluster),
		fmt.Sprintf("manager peak RSS                 %d MiB   (target <= %d MiB for 1,000); now %s%s", rss, targetRSSMiB, mgr.rssNow(t), memory),
		fmt.Sprintf("steady state %s: writes %.0f, GETs %.0f   (target 0, 0)", how.steady, steadyWrites, steadyGets),
		fmt.Sprintf("one cluster's objects (JSON)     %s", sizes),
	)
	fmt.Println("\ncontrol-plane benchmark\n  " + strings.Join(report, "\n  "))
	if !who.ours() {
		return fig // the targets below are the operator's
	}
	if steadyWrites != 0 {
		t.Errorf("the manager made %.0f API writes at steady state; want 0", steadyWrites)
	}
	// client-go counts lists and watches as GETs, and informers re-open their watches after 5 to 10 minutes, so GETs
	// are a fault only while none of the manager's watches can have expired (any default run).
	switch ran := time.Since(mgr.StartedAt()); {
	case steadyGets == 0:
	case ran < minWatchTimeout:
		t.Errorf("the manager made %.0f GET requests at steady state; want 0 (reads come from its cache); its warnings and errors:\n%s",
			steadyGets, warnings(mgr.LogPath()))
	default:
		t.Logf("%.0f GETs at steady state not judged: after %s of the manager they may be re-opened watches", steadyGets, ran.Round(time.Second))
	}
	if os.Getenv("BENCH_IDENTITY") == "serviceaccount" {
		// Run as deployed: a request RBAC denied is a permission config/rbac lacks, even one nothing else noticed.
		must(t, testenv.CheckManagerRBAC(mgr.LogPath()))
	}
	return fig
}

// benchConfiguration is the ManagedProxyConfiguration every measurement installs: one proxy-server and agent, and
// an entry point by host name, which neither manager needs to wait for.
func benchConfiguration() *proxyv1alpha1.ManagedProxyConfiguration {
	return &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{Image: "example.com/proxy:1", Replicas: 1, Namespace: addonNamespace,
				Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{Type: proxyv1alpha1.EntryPointTypeHostname,
					Hostname: &proxyv1alpha1.EntryPointHostname{Value: "hub.example.com"}, Port: 443}},
			ProxyAgent: proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "example.com/proxy:1", Replicas: 1},
		},
	}
}

// addonNamespace is the hub namespace of the proxy-servers, and of the addon's manager.
const addonNamespace = "open-cluster-management-addon"

func hubRelease(how setup) testenv.OCMRelease {
	if how.withOCM {
		return testenv.OCM12
	}
	return testenv.OCM10
}

func hubDescription(how setup) string {
	if how.withOCM {
		return "OCM v1.2 CRDs, add-on conversion webhook and add-on manager"
	}
	return "OCM v1.0 CRDs"
}

// warnings are the manager log's warning and error lines (klog's W and E lines, and zap's), where a re-opened
// watch or an uncached read would show.
func warnings(logPath string) string {
	raw, err := os.ReadFile(logPath)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "W1") || strings.HasPrefix(line, "E1") || strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"warn"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// minWatchTimeout is the shortest time after which client-go's reflectors re-open a watch (5 min, times 1 to 2).
const minWatchTimeout = 5 * time.Minute

// profile takes CPU profiles of the manager, the kube-apiserver and this harness while the clusters converge when
// BENCH_PROFILE_DIR is set, over the first BENCH_PROFILE_SECONDS (default 10) from the first add-on created; the
// returned function waits for them. Inspect with 'go tool pprof <file>'. The addon's
// manager serves no profiles.
func profile(t *testing.T, cfg *rest.Config, pprofAddr string, who contender) func() {
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	seconds := "10"
	if v := os.Getenv("BENCH_PROFILE_SECONDS"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("BENCH_PROFILE_SECONDS=%q: want a whole number of seconds", v)
		}
		seconds = v
	}
	must(t, os.MkdirAll(dir, 0o755))
	var wg sync.WaitGroup
	fetch := func(name string, get func() (*http.Response, error)) {
		defer wg.Done()
		if err := saveProfile(filepath.Join(dir, name+".pprof"), get); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
	harness, err := os.Create(filepath.Join(dir, who.fileName("harness.pprof")))
	must(t, err)
	must(t, pprof.StartCPUProfile(harness))
	if who.ours() {
		wg.Add(1)
		go fetch("manager", func() (*http.Response, error) {
			return http.Get("http://" + pprofAddr + "/debug/pprof/profile?seconds=" + seconds)
		})
	}
	wg.Add(1)
	go fetch(who.fileName("kube-apiserver"), func() (*http.Response, error) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		return hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/debug/pprof/profile?seconds=" + seconds)
	})
	return func() {
		wg.Wait()
		pprof.StopCPUProfile()
		must(t, harness.Close())
	}
}

// heapProfile saves the manager's heap profile when BENCH_PROFILE_DIR is set, right after convergence.
func heapProfile(t *testing.T, pprofAddr string, who contender) {
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" || !who.ours() {
		return
	}
	must(t, saveProfile(filepath.Join(dir, "manager-heap.pprof"), func() (*http.Response, error) {
		return http.Get("http://" + pprofAddr + "/debug/pprof/heap")
	}))
}

// saveProfile writes the body of the answer get fetches to path.
func saveProfile(path string, get func() (*http.Response, error)) error {
	resp, err := get()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// watchConvergence reports the moment every one of n clusters has a ClusterProxyStatus with an AgentDeployed
// condition that names the cluster's ManifestWork, from one watch: the operator names the work only once its create
// or read returned it. checkWorks confirms the works after the fact, so the measurement costs the API server one
// watch, not two. The harness shares the two cores with what it measures, so it decodes only the fields it looks at.
func watchConvergence(t *testing.T, cfg *rest.Config, n int) <-chan time.Time {
	var ev struct {
		Object struct {
			Metadata struct{ Namespace string }
			Status   struct {
				ManifestWork *struct{ Name string }
				Conditions   []struct{ Type string }
			}
		}
	}
	return watchUntil(t, cfg, "/apis/"+proxyv1alpha1.GroupVersion.String()+"/clusterproxystatuses", n, func(dec *json.Decoder) (string, error) {
		ev.Object.Status.ManifestWork, ev.Object.Status.Conditions = nil, nil
		if err := dec.Decode(&ev); err != nil {
			return "", err
		}
		for _, c := range ev.Object.Status.Conditions {
			if c.Type == proxyv1alpha1.ConditionAgentDeployed && ev.Object.Status.ManifestWork != nil {
				return ev.Object.Metadata.Namespace, nil
			}
		}
		return "", nil
	})
}

// watchUntil watches the collection at path and reports the moment n namespaces have been named by next, which
// decodes one event and names its namespace when the event counts ("" when not).
func watchUntil(t *testing.T, cfg *rest.Config, path string, n int, next func(*json.Decoder) (string, error)) <-chan time.Time {
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + path + "?watch=true") //nolint:bodyclose // the watch's goroutine closes it
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %s", path, resp.Status)
	}
	done := make(chan time.Time, 1)
	go func() {
		defer resp.Body.Close()
		counted := map[string]bool{}
		for dec := json.NewDecoder(resp.Body); len(counted) < n; {
			ns, err := next(dec)
			if err != nil {
				return // the wait times out and says so
			}
			if ns != "" {
				counted[ns] = true
			}
		}
		done <- time.Now()
	}()
	return done
}

// createAddOn creates the ManagedClusterAddOn cluster-proxy of a cluster as a user would, with a body encoded once
// and an answer that is only checked, not decoded: the harness's CPU is not the operator's.
func createAddOn(ctx context.Context, hc *http.Client, host, cluster string) error {
	body := fmt.Sprintf(`{"apiVersion":%q,"kind":"ManagedClusterAddOn","metadata":{"name":%q,"namespace":%q},"spec":{}}`,
		addonv1alpha1.GroupVersion.String(), proxyv1alpha1.AddonName, cluster)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		strings.TrimSuffix(host, "/")+"/apis/"+addonv1alpha1.GroupVersion.String()+"/namespaces/"+cluster+"/managedclusteraddons", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create the add-on of %s: %s: %s", cluster, resp.Status, answer)
	}
	return nil
}

// checkWorks fails unless each of the n clusters has the ManifestWork its ClusterProxyStatus names.
func checkWorks(t *testing.T, c client.Client, n int) {
	works := &metav1.PartialObjectMetadataList{}
	works.SetGroupVersionKind(workv1.SchemeGroupVersion.WithKind("ManifestWorkList"))
	must(t, c.List(context.Background(), works))
	statuses := &proxyv1alpha1.ClusterProxyStatusList{}
	must(t, c.List(context.Background(), statuses))
	have := map[string]bool{}
	for _, w := range works.Items {
		have[w.Namespace+"/"+w.Name] = true
	}
	missing := 0
	for _, s := range statuses.Items {
		if s.Status.ManifestWork == nil || !have[s.Namespace+"/"+s.Status.ManifestWork.Name] {
			missing++
		}
	}
	if len(statuses.Items) != n || missing != 0 {
		t.Fatalf("%d ClusterProxyStatuses for %d clusters, %d of them without their ManifestWork", len(statuses.Items), n, missing)
	}
}

// objectSizes is the size of the JSON the API server stores and sends for one cluster's ManifestWork, add-on and
// ClusterProxyStatus (the operator's only), managed fields included: the API server's cost per write grows with it.
// With BENCH_PROFILE_DIR set, the objects are saved there too.
func objectSizes(t *testing.T, cfg *rest.Config, namespace string, who contender) string {
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	objects := []struct{ name, path string }{
		{"ManifestWork", "/apis/work.open-cluster-management.io/v1/namespaces/" + namespace + "/manifestworks"},
		{"ManagedClusterAddOn", "/apis/addon.open-cluster-management.io/v1alpha1/namespaces/" + namespace + "/managedclusteraddons"},
	}
	if who.ours() {
		objects = append(objects, struct{ name, path string }{"ClusterProxyStatus", "/apis/proxy.open-cluster-management.io/v1alpha1/namespaces/" + namespace + "/clusterproxystatuses"})
	}
	var parts []string
	for _, o := range objects {
		resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + o.path)
		must(t, err)
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		must(t, err)
		var list struct{ Items []json.RawMessage }
		must(t, json.Unmarshal(raw, &list))
		if len(list.Items) != 1 {
			t.Fatalf("%s in %s: %d objects, want 1", o.name, namespace, len(list.Items))
		}
		parts = append(parts, fmt.Sprintf("%s %d B", o.name, len(list.Items[0])))
		if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" {
			must(t, os.WriteFile(filepath.Join(dir, who.fileName(o.name+".json")), list.Items[0], 0o644))
		}
	}
	return strings.Join(parts, ", ")
}

// manager is the operator's manager running as its own process, so its RSS is its own; with BENCH_MEMORY_LIMIT, in
// a memory cgroup of its own, as its Deployment's limit puts it.
type manager struct {
	*process.Process
	cgroup *memoryCgroup
}

// startManager builds and starts the manager. It runs as a cluster admin, as envtest's clients do and as the
// addon's baseline in docs/performance.md#targets was measured; with BENCH_IDENTITY=serviceaccount it runs as deployed instead (see
// testenv.DeployedManagerKubeconfig).
func startManager(t *testing.T, env *envtest.Environment, cfg *rest.Config, c client.Client, metricsAddr, pprofAddr string, memoryLimit int64) *manager {
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = repo.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the manager: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	switch id := os.Getenv("BENCH_IDENTITY"); id {
	case "", "admin":
		_, err := testenv.AdminKubeconfig(env, "cluster-proxy-operator", kubeconfig)
		must(t, err)
	case "serviceaccount":
		// Such a run also proves that the shipped least-privilege rules suffice for a thousand clusters.
		// Deployed in the proxy-servers' namespace, as the install paths put it: its Role is granted there.
		must(t, testenv.DeployedManagerKubeconfig(context.Background(), cfg, c, addonNamespace, kubeconfig))
	default:
		t.Fatalf("BENCH_IDENTITY=%q: want admin or serviceaccount", id)
	}
	cmd := process.Command{Path: bin, LogPath: filepath.Join(dir, "manager.log"),
		Args: []string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=0",
			"--pprof-bind-address=" + pprofAddr, "--proxy-server-namespaces=" + addonNamespace}}
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

func (m *manager) stop() {
	m.Stop()
	if m.cgroup != nil {
		m.cgroup.remove()
	}
}

// exitDescription says how the manager ended, and whether the kernel's OOM killer ended it.
func (m *manager) exitDescription(t *testing.T) string {
	if m.cgroup != nil {
		if kills := m.cgroup.oomKills(t); kills > 0 {
			return fmt.Sprintf("%s; OOM kills in its memory cgroup: %d", m.ExitDescription(), kills)
		}
	}
	return m.ExitDescription()
}

// peakRSSMiB is the manager's high-water resident set (VmHWM).
func (m *manager) peakRSSMiB(t *testing.T) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.Pid()))
	must(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb / 1024
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// rssNow is the manager's resident set now, split into anonymous memory (heap, stacks) and mapped files (the binary).
func (m *manager) rssNow(t *testing.T) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.Pid()))
	must(t, err)
	var parts []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "RssAnon:") || strings.HasPrefix(line, "RssFile:") {
			f := strings.Fields(line)
			kb, _ := strconv.Atoi(f[1])
			parts = append(parts, fmt.Sprintf("%s %d MiB", strings.TrimSuffix(f[0], ":"), kb/1024))
		}
	}
	return strings.Join(parts, ", ")
}

// cpuSeconds is the manager's user+system CPU time.
func (m *manager) cpuSeconds(t *testing.T) float64 {
	return pidCPUSeconds(t, m.Pid())
}

// processCPUSeconds sums the CPU time of this test's child processes with the given command name (the control
// plane envtest started).
func processCPUSeconds(t *testing.T, comm string) float64 {
	entries, err := os.ReadDir("/proc")
	must(t, err)
	var total float64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(name)) != comm || parentPID(pid) != os.Getpid() {
			continue
		}
		total += pidCPUSeconds(t, pid)
	}
	return total
}

func parentPID(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(raw[strings.LastIndex(string(raw), ")")+2:]))
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

func pidCPUSeconds(t *testing.T, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(t, err)
	fields := strings.Fields(string(raw[strings.LastIndex(string(raw), ")")+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // clock ticks; USER_HZ is 100 on Linux
}

// machineBusySeconds is the CPU time all processes on the machine spent busy (not idle or waiting for I/O).
func machineBusySeconds() float64 { return benchmeasure.MachineBusy().Seconds() }

// requests are the manager's client-go request counts by HTTP method, from its metrics endpoint, and under the key
// reconciles the per-cluster controller's reconciles.
type requests map[string]float64

const reconciles = "reconciles"

func (r requests) method(m string) float64 { return r[m] }

// minus is the requests made since earlier, by HTTP method, as text; lists and watches are GETs.
func (r requests) minus(earlier requests) string {
	var parts []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if d := r[m] - earlier[m]; d != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", m, d))
		}
	}
	return strings.Join(parts, ", ")
}

func (r requests) writes() float64 { return r["POST"] + r["PUT"] + r["PATCH"] + r["DELETE"] }

func scrape(t *testing.T, addr string) requests {
	resp, err := http.Get("http://" + addr + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	out := requests{}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, `controller_runtime_reconcile_total{controller="clusteragent"`) {
			fields := strings.Fields(line)
			v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
			out[reconciles] += v
			continue
		}
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		i := strings.Index(line, `method="`)
		if i < 0 {
			continue
		}
		method := line[i+len(`method="`):]
		method = method[:strings.Index(method, `"`)]
		fields := strings.Fields(line)
		v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		out[method] += v
	}
	return out
}

// waitQuiet waits until the manager has made no write for two seconds.
func waitQuiet(t *testing.T, addr string) {
	last := scrape(t, addr).writes()
	waitFor(t, "the manager to go quiet", convergenceTimeout, func() bool {
		time.Sleep(2 * time.Second)
		now := scrape(t, addr).writes()
		quiet := now == last
		last = now
		return quiet
	})
}

func waitFor(t *testing.T, what string, limit time.Duration, done func() bool) {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(500 * time.Millisecond) // polling 1,000 objects takes API server CPU from the manager
	}
}

func parallel(t *testing.T, n int, f func(int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// clusterCABundle is the PEM of a CA certificate, as a klusterlet puts its cluster's CA in its ManagedCluster.
func clusterCABundle(t *testing.T) []byte {
	ca, err := certs.NewCA("managed-cluster-ca", time.Hour, time.Now())
	must(t, err)
	return certs.EncodeBundle(ca.Cert)
}

// registerCluster creates a ManagedCluster as a joined klusterlet leaves it: accepted, its kube-apiserver's URL and CA
// bundle in the spec, and a status with the conditions, capacity, version and claims the klusterlet reports.
func registerCluster(ctx context.Context, c client.Client, name string, caPEM []byte) error {
	mc := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"cluster.open-cluster-management.io/clusterset": "default", "name": name, "vendor": "Kubernetes", "cloud": "Other",
	}}, Spec: clusterv1.ManagedClusterSpec{
		HubAcceptsClient: true, LeaseDurationSeconds: 60,
		ManagedClusterClientConfigs: []clusterv1.ClientConfig{{URL: "https://" + name + ".example.com:6443", CABundle: caPEM}},
	}}
	if err := c.Create(ctx, mc); err != nil {
		return err
	}
	now := metav1.Now()
	condition := func(t, reason, message string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: now}
	}
	mc.Status = clusterv1.ManagedClusterStatus{
		Conditions: []metav1.Condition{
			condition(clusterv1.ManagedClusterConditionHubAccepted, "HubClusterAdminAccepted", "Accepted by hub cluster admin"),
			condition(clusterv1.ManagedClusterConditionJoined, "ManagedClusterJoined", "Managed cluster joined"),
			condition(clusterv1.ManagedClusterConditionAvailable, "ManagedClusterAvailable", "Managed cluster is available"),
			condition("ManagedClusterConditionClockSynced", "ManagedClusterClockSynced", "The clock of the managed cluster is synced with the hub."),
		},
		Capacity: clusterv1.ResourceList{
			clusterv1.ResourceCPU: resource.MustParse("16"), clusterv1.ResourceMemory: resource.MustParse("64Gi"),
		},
		Allocatable: clusterv1.ResourceList{
			clusterv1.ResourceCPU: resource.MustParse("15500m"), clusterv1.ResourceMemory: resource.MustParse("62Gi"),
		},
		Version: clusterv1.ManagedClusterVersion{Kubernetes: "v1.36.3"},
		ClusterClaims: []clusterv1.ManagedClusterClaim{
			{Name: "id.k8s.io", Value: name}, {Name: "kubeversion.open-cluster-management.io", Value: "v1.36.3"},
			{Name: "platform.open-cluster-management.io", Value: "Other"}, {Name: "product.open-cluster-management.io", Value: "Kubernetes"},
			{Name: "region.open-cluster-management.io", Value: "eu-west-1"}, {Name: "consoleurl.cluster.open-cluster-management.io", Value: "https://console." + name + ".example.com"},
		},
	}
	return c.Status().Update(ctx, mc)
}
