package soak

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchplot"
)

// Table writes the report for a person: faults by kind, requests by way in with every failure and the faults it fell
// in, streams by kind and way in with every hang and every end outside a fault's window, the agents' return, the
// manager's Events, the components' goroutines and memory, and the end state.
func (r Report) Table() string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "soak of %s, seed %d (SOAK_SEED=%d draws the same faults)\n\n", r.Ended.Sub(r.Began).Round(time.Second), r.Seed, r.Seed)

	fmt.Fprintln(w, "fault\tcount\tinjected\trecovered\tlongest recovery\tmean recovery")
	for _, k := range r.Kinds {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\n", k.Kind, k.Count, k.Injected, k.Recovered, seconds(k.LongestRecoverySeconds), seconds(k.MeanRecoverySeconds))
	}
	for _, f := range r.Faults {
		if f.InjectError != "" || f.RecoveryError != "" {
			fmt.Fprintf(w, "  %s %s (%s): %s%s\n", clockTime(f.Start), f.Kind, f.Target, f.InjectError, f.RecoveryError)
		}
	}

	fmt.Fprintln(w, "\nway in\tcluster\trequests\tfailed\tlongest gap")
	for _, l := range r.Loops {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", l.Way, l.Cluster, l.Requests, l.Failed, seconds(l.LongestGapSeconds))
	}
	for _, l := range r.Loops {
		for _, f := range l.Failures {
			fmt.Fprintf(w, "  %s %s through the %s, during %s: %s\n", clockTime(f.At), l.Cluster, l.Way, orNone(f.During), f.Error)
		}
	}

	fmt.Fprintln(w, "\nstream\tway in\tstarted\tended\thung\tfailed starts\tends during")
	for _, st := range r.Streams {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", st.Kind, st.Way, st.Started, st.Ended, st.Hung, st.FailedStarts, endsDuring(st))
	}
	for _, e := range r.StreamEnds {
		if e.Outcome == StreamHung || len(e.During) == 0 {
			fmt.Fprintf(w, "  %s the %s stream to %s through the %s %s, during %s: %s\n", clockTime(e.At), e.Kind, e.Cluster, e.Way, e.Outcome, orNone(e.During), e.Why)
		}
	}

	back := "never seen"
	if r.AllAgentsBackSeconds != nil {
		back = seconds(*r.AllAgentsBackSeconds)
	}
	fmt.Fprintf(w, "\nevery agent on every replica after the last fault's end (%s): %s\n", clockTime(r.LastFaultEnd), back)

	fmt.Fprintln(w, "\nmanager Event\tcount")
	for _, reason := range slices.Sorted(maps.Keys(r.ManagerEvents)) {
		fmt.Fprintf(w, "%s\t%d\n", reason, r.ManagerEvents[reason])
	}

	fmt.Fprintln(w, "\ncomponent\tpods\tgoroutines at the start\tat the end\tRSS at the start\tat the end")
	end := map[string]Usage{}
	for _, u := range r.EndUsage {
		end[u.Component] = u
	}
	for _, was := range r.StartUsage {
		now := end[was.Component]
		fmt.Fprintf(w, "%s\t%d → %d\t%.0f\t%.0f\t%s\t%s\n", was.Component, was.Pods, now.Pods, was.Goroutines, now.Goroutines, mib(was.RSSBytes), mib(now.RSSBytes))
	}

	for _, p := range r.Problems {
		fmt.Fprintln(w, "not measured: "+p)
	}
	if len(r.StateChanges) == 0 {
		fmt.Fprintf(w, "\nthe end state equals the start state (%d values)\n", len(r.StartState))
	} else {
		fmt.Fprintln(w, "\nthe end state differs from the start state:")
		for _, c := range r.StateChanges {
			fmt.Fprintln(w, "  "+c)
		}
	}
	_ = w.Flush()
	return b.String()
}

// endsDuring says how many of a row's ends fell in the window of each kind of fault, and how many in none.
func endsDuring(st StreamSummary) string {
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(st.EndedDuring)) {
		parts = append(parts, fmt.Sprintf("%s %d", kind, st.EndedDuring[kind]))
	}
	if st.NoFault > 0 {
		parts = append(parts, fmt.Sprintf("no fault %d", st.NoFault))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

// Timeline is the report's plot: the failed requests over time, a lane per loop, against the faults, a band per
// fault from its start to its end, coloured by kind.
func (r Report) Timeline() benchplot.Timeline {
	since := func(t time.Time) float64 { return t.Sub(r.Began).Seconds() }
	t := benchplot.Timeline{
		Title:  fmt.Sprintf("Failed requests against faults, seed %d", r.Seed),
		XLabel: "seconds since the soak began",
		Span:   max(since(r.Ended), 1),
	}
	for _, l := range r.Loops {
		lane := benchplot.Lane{Name: l.Cluster + " through the " + l.Way}
		for _, f := range l.Failures {
			lane.At = append(lane.At, since(f.At))
		}
		t.Lanes = append(t.Lanes, lane)
	}
	for _, f := range r.Faults {
		t.Bands = append(t.Bands, benchplot.Band{Kind: f.Kind, From: since(f.Start), To: since(f.End)})
	}
	return t
}

// Write writes the report as JSON to path and its plot (Timeline) as SVG beside it, path with the extension .svg, and
// returns the plot's path.
func (r Report) Write(path string) (string, error) {
	if err := benchplot.WriteFigures(path, r); err != nil {
		return "", err
	}
	plot := strings.TrimSuffix(path, filepath.Ext(path)) + ".svg"
	f, err := os.Create(plot)
	if err != nil {
		return "", err
	}
	err = r.Timeline().WriteSVG(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return plot, err
}
