//go:build bench

package dataplane

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchmeasure"
)

// usage is this process's CPU time (getrusage, user+sys) and the whole machine's busy CPU time (/proc/stat).
type usage struct {
	self, machine time.Duration
	at            time.Time
}

func sample() usage {
	return usage{self: benchmeasure.SelfCPU(), machine: benchmeasure.MachineBusy(), at: time.Now()}
}

// cost is what one stretch of time took: wall time, our CPU and the other processes' CPU.
type cost struct {
	wall, self, other time.Duration
}

func since(u usage) cost {
	now := sample()
	return cost{wall: now.at.Sub(u.at), self: now.self - u.self, other: max(0, (now.machine-u.machine)-(now.self-u.self))}
}

func (c *cost) add(d cost) {
	c.wall += d.wall
	c.self += d.self
	c.other += d.other
}

// rotate runs every mode once per round, in an order that rotates each round, with a GC before each timed run.
func rotate[M any](rounds int, modes []M, run func(m M, round int)) {
	for r := range rounds {
		for i := range modes {
			runtime.GC()
			run(modes[(i+r)%len(modes)], r)
		}
	}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

func secs(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

// ratio formats a/b, or "-" when the baseline was not measured.
func ratio(a, b float64) string {
	if b == 0 || a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// verdict is PASS or MISS for a measured ratio against a target; "-" when not measured.
func verdict(measured, target float64, atLeast bool) string {
	switch {
	case measured == 0 || math.IsNaN(measured) || math.IsInf(measured, 0):
		return "-"
	case atLeast && measured >= target, !atLeast && measured <= target:
		return "PASS"
	}
	return "MISS"
}

// table prints tab-aligned rows.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { _, _ = fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

func (t *table) flush() { _ = t.w.Flush() }
