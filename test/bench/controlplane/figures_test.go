//go:build bench

package controlplane

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchplot"
)

// printSideBySide prints the per-cluster figures of every size in columns, so a cost that grows faster than the
// fleet shows as a column that grows.
func printSideBySide(all []sizeFigures) {
	rows := []struct {
		name string
		cell func(f sizeFigures) string
	}{
		{"clusters", func(f sizeFigures) string { return fmt.Sprint(f.Clusters) }},
		{"convergence", func(f sizeFigures) string { return fmt.Sprintf("%.1f s", f.ConvergenceSeconds) }},
		{"convergence per cluster", func(f sizeFigures) string { return fmt.Sprintf("%.2f ms", f.perCluster(f.ConvergenceSeconds)) }},
		{"manager CPU per cluster", func(f sizeFigures) string { return fmt.Sprintf("%.2f ms", f.perCluster(f.ManagerCPUSeconds)) }},
		{"kube-apiserver CPU per cluster", func(f sizeFigures) string { return fmt.Sprintf("%.2f ms", f.perCluster(f.KubeAPIServerCPUSeconds)) }},
		{"etcd CPU per cluster", func(f sizeFigures) string { return fmt.Sprintf("%.2f ms", f.perCluster(f.EtcdCPUSeconds)) }},
		{"writes per cluster", func(f sizeFigures) string { return fmt.Sprintf("%.2f", f.WritesPerCluster) }},
		{"reconciles per cluster", func(f sizeFigures) string { return fmt.Sprintf("%.2f", f.ReconcilesPerCluster) }},
		{"manager peak RSS", func(f sizeFigures) string { return fmt.Sprintf("%d MiB", f.ManagerPeakRSSMiB) }},
		{"memory cgroup: limit / peak / OOM kills", func(f sizeFigures) string {
			if f.MemoryLimitMiB == 0 {
				return "none"
			}
			return fmt.Sprintf("%d / %d MiB / %d", f.MemoryLimitMiB, f.CgroupPeakMiB, f.OOMKills)
		}},
		{"steady state: writes, GETs", func(f sizeFigures) string {
			return fmt.Sprintf("%.0f, %.0f in %.0f s", f.SteadyWrites, f.SteadyGets, f.SteadySeconds)
		}},
	}
	var b strings.Builder
	b.WriteString("\ncontrol-plane benchmark, side by side\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-40s", r.name)
		for _, f := range all {
			fmt.Fprintf(&b, " %22s", r.cell(f))
		}
		b.WriteString("\n")
	}
	fmt.Print(b.String())
}

// TestControlPlanePlots draws the plots again from the figures of an earlier run (BENCH_OUT), without measuring.
func TestControlPlanePlots(t *testing.T) {
	var all []sizeFigures
	if err := benchplot.ReadFigures(figuresPath(), &all); err != nil {
		t.Fatalf("%v (make bench-control-plane writes them)", err)
	}
	writePlots(t, filepath.Dir(figuresPath()), all)
}

// figuresPath is BENCH_OUT, default bin/bench/control-plane.json.
func figuresPath() string { return benchplot.FiguresPath("control-plane.json") }

func writeFigures(t *testing.T, all []sizeFigures) {
	out := figuresPath()
	if err := benchplot.WriteFigures(out, all); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures written to %s", out)
	writePlots(t, filepath.Dir(out), all)
}

// writePlots draws the figures next to the JSON: control-plane-convergence.svg, control-plane-per-cluster.svg and
// control-plane-memory.svg.
func writePlots(t *testing.T, dir string, all []sizeFigures) {
	var clusters, converged, mgrCPU, apiCPU, etcdCPU, rss, cgroupPeak, limit []float64
	limited := false
	for _, f := range all {
		clusters = append(clusters, float64(f.Clusters))
		converged = append(converged, f.ConvergenceSeconds)
		mgrCPU, apiCPU = append(mgrCPU, f.perCluster(f.ManagerCPUSeconds)), append(apiCPU, f.perCluster(f.KubeAPIServerCPUSeconds))
		etcdCPU = append(etcdCPU, f.perCluster(f.EtcdCPUSeconds))
		rss, limit = append(rss, float64(f.ManagerPeakRSSMiB)), append(limit, float64(f.MemoryLimitMiB))
		cgroupPeak = append(cgroupPeak, float64(f.CgroupPeakMiB))
		limited = limited || f.MemoryLimitMiB > 0
	}
	memory := []benchplot.Series{{Name: "manager peak RSS", Y: rss}}
	if limited {
		// The RSS counts the binary's mapped pages, which the cgroup does not charge when they were cached before.
		memory = append(memory, benchplot.Series{Name: "its cgroup's peak", Y: cgroupPeak}, benchplot.Series{Name: "memory limit", Y: limit})
	}
	charts := map[string]benchplot.Chart{
		"control-plane-convergence.svg": benchplot.Line{Title: "Every cluster converged, from the add-ons' creation", XLabel: "clusters",
			YLabel: "seconds", X: clusters, Series: []benchplot.Series{{Name: "convergence", Y: converged}}},
		"control-plane-per-cluster.svg": benchplot.Line{Title: "CPU per cluster while converging", XLabel: "clusters",
			YLabel: "CPU ms per cluster", X: clusters, Series: []benchplot.Series{
				{Name: "manager", Y: mgrCPU}, {Name: "kube-apiserver", Y: apiCPU}, {Name: "etcd", Y: etcdCPU}}},
		"control-plane-memory.svg": benchplot.Line{Title: "Manager memory", XLabel: "clusters", YLabel: "MiB", X: clusters,
			Series: memory},
	}
	names, err := benchplot.WriteFiles(dir, charts)
	must(t, err)
	t.Logf("plots written to %s: %s", dir, strings.Join(names, ", "))
}
