//go:build bench

// Package fleet measures the hub against a fleet of simulated agents: the product's agent, each with its own
// certificate, over real mTLS gRPC on 127.0.0.1, in a child process, to one proxy-server in this process. For each
// fleet size (BENCH_AGENTS, default 1000,10000) it reports:
//
//   - the memory the proxy-server holds per idle agent (heap and stacks, and RSS), and the CPU it spends at idle;
//   - tunnel health: CPU per round on the hub (manager and proxy-server, this process) of the design in use (each
//     replica probes the clusters it holds through its own tunnels, in plain HTTP to the agents' tunnel health port,
//     and answers what changed, GET /tunnels) next to the previous design (the manager opens a tunnel and a TLS
//     connection per cluster per round), rounds interleaved in the same run, and their ratio;
//   - at the largest size, a restart of the proxy-server: how long until every agent is back, how many connection
//     attempts the agents made meanwhile, and a round that finds every cluster healthy again.
//
// Figures are printed and written as JSON to BENCH_OUT (default bin/bench/fleet.json), and drawn beside it as
// fleet-round-cpu.svg and fleet-memory.svg, which docs/performance.md shows. Targets are printed as PASS or MISS, never asserted; the test fails only when agents do not connect, a
// cluster is not healthy, or the restart does not bring every agent back. Run it with 'make bench-fleet'.
package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchmeasure"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchplot"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/tunneltest"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// Targets from docs/performance.md#targets.
const (
	targetBytesPerAgent = 50 << 10         // proxy-server memory per idle agent
	targetRoundRatio    = 10.0             // previous design's CPU per round over this design's
	targetRestart       = 60 * time.Second // every agent back after a proxy-server restart
	// previousConcurrency is how many probes the previous design ran at once (its default).
	previousConcurrency = 16
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		if err := runChild(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sizeFigures is what one fleet size measured.
type sizeFigures struct {
	Agents int `json:"agents"`
	// ConnectSeconds is how long the new agents took to connect, all started at once.
	ConnectSeconds float64 `json:"connectSeconds"`
	// Memory of the proxy-server per idle agent (heap and stacks after a GC, and RSS), before any probe round and after
	// the rounds (stacks that grew while serving stay until the runtime shrinks them).
	HeapBytesPerAgentIdle        float64 `json:"heapBytesPerAgentIdle"`
	RSSBytesPerAgentIdle         float64 `json:"rssBytesPerAgentIdle"`
	HeapBytesPerAgentAfterRounds float64 `json:"heapBytesPerAgentAfterRounds"`
	RSSBytesPerAgentAfterRounds  float64 `json:"rssBytesPerAgentAfterRounds"`
	IdleCPUMillisPerSecond       float64 `json:"idleCPUMillisPerSecond"`
	// Tunnel health rounds on the hub: this design's and the previous one's, medians of interleaved rounds.
	FirstRoundCPUMillis      float64 `json:"firstRoundCPUMillis"`
	RoundCPUMillis           float64 `json:"roundCPUMillis"`
	PreviousRoundCPUMillis   float64 `json:"previousRoundCPUMillis"`
	RoundSeconds             float64 `json:"roundSeconds"`
	PreviousRoundSeconds     float64 `json:"previousRoundSeconds"`
	RoundRatio               float64 `json:"roundRatio"`
	RestartSeconds           float64 `json:"restartSeconds,omitempty"`
	RestartDials             int64   `json:"restartDials,omitempty"`
	RestartDialErrors        int64   `json:"restartDialErrors,omitempty"`
	OtherProcessesCPUPercent float64 `json:"otherProcessesCPUPercent"`
}

func TestFleet(t *testing.T) {
	sizes := intsFromEnv(t, "BENCH_AGENTS", []int{1000, 10000})
	rounds := intsFromEnv(t, "BENCH_ROUNDS", []int{3})[0]
	idle := durationFromEnv(t, "BENCH_IDLE", 10*time.Second)

	hub := tunneltest.Start(t, "proxy-ns", func(o *server.Options) { o.Log = logr.Discard() })
	reader := hub.Reader()
	ctx := context.Background()
	src := tunnelhealth.New(tunnelhealth.Options{Reader: reader, Resolve: hub.Resolve, Interval: time.Hour, StaleAfter: 24 * time.Hour})
	go func() { // the reconciler's part: take the change events
		for range src.Changes() {
		}
	}()
	previous, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: reader, Resolve: hub.Resolve})
	if err != nil {
		t.Fatal(err)
	}

	baseHeap, baseRSS := memory()
	var all []sizeFigures
	var children []*child
	started := 0
	for i, n := range sizes {
		if n <= started {
			t.Fatalf("BENCH_AGENTS must grow: %v", sizes)
		}
		f := sizeFigures{Agents: n}
		other := otherCPU()
		begin := time.Now()
		children = append(children, startChild(t, hub, started, n))
		started = n
		waitConnected(t, hub, n, 10*time.Minute)
		f.ConnectSeconds = time.Since(begin).Seconds()

		heap, rss := memory()
		writeHeapProfile(t, fmt.Sprintf("%d-idle", n))
		f.HeapBytesPerAgentIdle, f.RSSBytesPerAgentIdle = float64(heap-baseHeap)/float64(n), float64(rss-baseRSS)/float64(n)
		cpu0, t0 := benchmeasure.SelfCPU(), time.Now()
		time.Sleep(idle) // what is measured is the idle hub itself: nothing to await
		f.IdleCPUMillisPerSecond = float64((benchmeasure.SelfCPU() - cpu0).Milliseconds()) / time.Since(t0).Seconds()

		// The first round answers every cluster; then both designs in turns.
		cpu0 = benchmeasure.SelfCPU()
		src.Round(ctx)
		f.FirstRoundCPUMillis = float64((benchmeasure.SelfCPU() - cpu0).Milliseconds())
		expectHealthy(t, src, n)
		var ours, prev, oursWall, prevWall []float64
		for range rounds {
			cpu, wall := measure(func() { src.Round(ctx) })
			expectHealthy(t, src, n)
			ours, oursWall = append(ours, cpu), append(oursWall, wall)
			cpu, wall = measure(func() { previousRound(t, ctx, previous, n) })
			prev, prevWall = append(prev, cpu), append(prevWall, wall)
		}
		f.RoundCPUMillis, f.PreviousRoundCPUMillis = benchmeasure.Median(ours), benchmeasure.Median(prev)
		f.RoundSeconds, f.PreviousRoundSeconds = benchmeasure.Median(oursWall), benchmeasure.Median(prevWall)
		f.RoundRatio = f.PreviousRoundCPUMillis / max(f.RoundCPUMillis, 0.001)
		heap, rss = memory()
		writeHeapProfile(t, fmt.Sprintf("%d-probed", n))
		f.HeapBytesPerAgentAfterRounds, f.RSSBytesPerAgentAfterRounds = float64(heap-baseHeap)/float64(n), float64(rss-baseRSS)/float64(n)

		if i == len(sizes)-1 {
			before := sumStats(t, children)
			begin = time.Now()
			hub.Restart(t)
			waitConnected(t, hub, n, 5*time.Minute)
			f.RestartSeconds = time.Since(begin).Seconds()
			after := sumStats(t, children)
			f.RestartDials, f.RestartDialErrors = after.Dials-before.Dials, after.DialErrors-before.DialErrors
			src.Round(ctx) // the new process answers in full
			expectHealthy(t, src, n)
		}
		f.OtherProcessesCPUPercent = other()
		report(t, f)
		all = append(all, f)
	}
	writeFigures(t, all)
}

// previousRound is a round of the previous design: GET /agents, then a tunnel and GET /healthz per cluster,
// previousConcurrency at a time, each cluster tried twice at most.
func previousRound(t *testing.T, ctx context.Context, proxies *clusterproxy.Client, want int) {
	agents, err := proxies.ReplicaAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var clusters []string
	for _, held := range agents {
		for cluster := range held {
			clusters = append(clusters, cluster)
		}
	}
	var healthy atomic.Int64
	workqueue.ParallelizeUntil(ctx, previousConcurrency, len(clusters), func(i int) {
		for range 2 {
			probeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			r, err := proxies.Probe(probeCtx, clusters[i])
			cancel()
			if err == nil && r.Healthy {
				healthy.Add(1)
				return
			}
		}
	})
	if int(healthy.Load()) != want {
		t.Fatalf("previous design: %d of %d clusters healthy", healthy.Load(), want)
	}
}

// expectHealthy fails unless the source reports every one of the fleet's n clusters connected and healthy.
func expectHealthy(t *testing.T, src *tunnelhealth.Source, n int) {
	t.Helper()
	for i := range n {
		st, ok := src.Tunnel(clusterName(i))
		if !ok || st.ConnectedAgents != 1 || st.Probe == nil || !st.Probe.Healthy {
			t.Fatalf("cluster %s: %+v (reported %v)", clusterName(i), st, ok)
		}
	}
}

func clusterName(i int) string { return fmt.Sprintf("fleet-%05d", i) }

// child is a process running agents.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	stats string // address of its GET /stats
}

// startChild issues certificates for the agents of clusters [from, to) and runs them in a child process.
func startChild(t *testing.T, hub *tunneltest.Hub, from, to int) *child {
	t.Helper()
	m := manifest{ServerAddress: hub.Server.Addrs().Agent}
	for i := from; i < to; i++ {
		cert, key, ca := hub.AgentCredentials(t, clusterName(i))
		m.Agents = append(m.Agents, agentConfig{Cluster: clusterName(i), Cert: cert, Key: key, CA: ca})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		_ = c.stdin.Close()
		_ = c.cmd.Wait()
	})
	var line string
	if _, err := fmt.Fscanln(stdout, &line, &c.stats); err != nil || line != "stats" {
		t.Fatalf("child: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return c
}

func sumStats(t *testing.T, children []*child) childStats {
	t.Helper()
	var sum childStats
	for _, c := range children {
		resp, err := http.Get("http://" + c.stats + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		var s childStats
		err = json.NewDecoder(resp.Body).Decode(&s)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		sum.Dials += s.Dials
		sum.DialErrors += s.DialErrors
	}
	return sum
}

// waitConnected waits until the proxy-server holds an agent of n clusters.
func waitConnected(t *testing.T, hub *tunneltest.Hub, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for hub.Server.Agents().ClusterCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d agents connected after %s", hub.Server.Agents().ClusterCount(), n, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// measure is the process's CPU and the wall time f takes, in milliseconds and seconds.
func measure(f func()) (cpuMillis, wallSeconds float64) {
	runtime.GC()
	cpu0, t0 := benchmeasure.SelfCPU(), time.Now()
	f()
	return float64((benchmeasure.SelfCPU() - cpu0).Microseconds()) / 1000, time.Since(t0).Seconds()
}

// memory is the heap and stacks in use after two GCs, and the resident set, in bytes. The second GC frees what
// sync.Pools kept through the first: gRPC's write buffers, which connections share and return after each flush, are
// held by no agent, and would count 2 to 5 KiB per agent, depending on the last flushes before the first GC.
func memory() (heap, rss int64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if os.Getenv("BENCH_VERBOSE") != "" {
		fmt.Printf("heap in use %d KiB, stacks %d KiB, goroutines %d\n", ms.HeapInuse>>10, ms.StackInuse>>10, runtime.NumGoroutine())
	}
	return int64(ms.HeapInuse + ms.StackInuse), vmRSS()
}

func vmRSS() int64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// otherCPU starts counting the CPU of every other process on the machine; the returned func says how busy they kept
// it, in percent of one core.
func otherCPU() func() float64 {
	total0, self0, t0 := benchmeasure.MachineBusy(), benchmeasure.SelfCPU(), time.Now()
	return func() float64 {
		others := (benchmeasure.MachineBusy() - total0) - (benchmeasure.SelfCPU() - self0)
		return 100 * others.Seconds() / time.Since(t0).Seconds()
	}
}

func intsFromEnv(t *testing.T, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("%s: %q is not a list of positive numbers", name, v)
		}
		out = append(out, n)
	}
	return out
}

func durationFromEnv(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

func passOrMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func report(t *testing.T, f sizeFigures) {
	t.Logf("%d agents, connected in %.1fs (other processes, the agents' included, used %.0f%% of a core meanwhile)", f.Agents, f.ConnectSeconds, f.OtherProcessesCPUPercent)
	t.Logf("  proxy-server memory per idle agent: heap+stacks %.1f KiB, RSS %.1f KiB  [%s ≤ 50 KiB]; after the probe rounds %.1f / %.1f KiB",
		f.HeapBytesPerAgentIdle/1024, f.RSSBytesPerAgentIdle/1024, passOrMiss(f.HeapBytesPerAgentIdle <= targetBytesPerAgent),
		f.HeapBytesPerAgentAfterRounds/1024, f.RSSBytesPerAgentAfterRounds/1024)
	t.Logf("  idle hub CPU: %.1f ms/s", f.IdleCPUMillisPerSecond)
	t.Logf("  tunnel health round, hub CPU (median): %.1f ms (%.2fs); previous design %.1f ms (%.2fs); ratio %.1fx  [%s ≥ %.0fx]; first round %.1f ms",
		f.RoundCPUMillis, f.RoundSeconds, f.PreviousRoundCPUMillis, f.PreviousRoundSeconds, f.RoundRatio,
		passOrMiss(f.RoundRatio >= targetRoundRatio), targetRoundRatio, f.FirstRoundCPUMillis)
	if f.RestartSeconds > 0 {
		t.Logf("  proxy-server restart: every agent back in %.1fs  [%s ≤ 60s], %d connection attempts (%d refused or failed)",
			f.RestartSeconds, passOrMiss(f.RestartSeconds <= targetRestart.Seconds()), f.RestartDials, f.RestartDialErrors)
	}
}

// writeHeapProfile writes a heap profile to BENCH_HEAPPROFILE-<name>, and the goroutines to the same with .goroutines,
// when BENCH_HEAPPROFILE is set.
func writeHeapProfile(t *testing.T, name string) {
	path := os.Getenv("BENCH_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path + "-" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
	g, err := os.Create(path + "-" + name + ".goroutines")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
		t.Fatal(err)
	}
}

// TestFleetPlots draws the plots again from the figures of an earlier run (BENCH_OUT), without measuring.
func TestFleetPlots(t *testing.T) {
	var all []sizeFigures
	if err := benchplot.ReadFigures(figuresPath(), &all); err != nil {
		t.Fatalf("%v (make bench-fleet writes them)", err)
	}
	writePlots(t, filepath.Dir(figuresPath()), all)
}

// figuresPath is BENCH_OUT, default bin/bench/fleet.json.
func figuresPath() string { return benchplot.FiguresPath("fleet.json") }

func writeFigures(t *testing.T, all []sizeFigures) {
	out := figuresPath()
	if err := benchplot.WriteFigures(out, all); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures written to %s", out)
	writePlots(t, filepath.Dir(out), all)
}

// writePlots draws the figures next to the JSON: fleet-round-cpu.svg and fleet-memory.svg.
func writePlots(t *testing.T, dir string, all []sizeFigures) {
	var agents, ours, previous, idle, afterRounds, target []float64
	for _, f := range all {
		agents = append(agents, float64(f.Agents))
		ours, previous = append(ours, f.RoundCPUMillis), append(previous, f.PreviousRoundCPUMillis)
		idle, afterRounds = append(idle, f.HeapBytesPerAgentIdle/1024), append(afterRounds, f.HeapBytesPerAgentAfterRounds/1024)
		target = append(target, targetBytesPerAgent/1024)
	}
	charts := map[string]benchplot.Chart{
		"fleet-round-cpu.svg": benchplot.Line{Title: "Tunnel-health round: hub CPU (manager + proxy-server)", XLabel: "agents",
			YLabel: "CPU ms per round (log)", X: agents, LogY: true,
			Series: []benchplot.Series{{Name: "GET /tunnels", Y: ours}, {Name: "a tunnel per cluster", Y: previous}}},
		"fleet-memory.svg": benchplot.Line{Title: "Proxy-server memory per idle agent (heap + stacks)", XLabel: "agents",
			YLabel: "KiB per agent", X: agents,
			Series: []benchplot.Series{{Name: "idle", Y: idle}, {Name: "after probe rounds", Y: afterRounds}, {Name: "target", Y: target}}},
	}
	names, err := benchplot.WriteFiles(dir, charts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plots written to %s: %s", dir, strings.Join(names, ", "))
}
