package soak

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchplot"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestFaultCoversItsClusterFromItsStartToAWindowAfterItsEnd(t *testing.T) {
	g := NewWithT(t)
	hub := Fault{Kind: "proxy-server SIGKILL", Start: at(10), End: at(20)}
	cut := Fault{Kind: "network cut", Cluster: "1st-cluster", Start: at(10), End: at(20)}
	for _, c := range []struct {
		f       Fault
		cluster string
		at      time.Time
		want    bool
	}{
		{hub, "cluster1", at(9.9), false},
		{hub, "cluster1", at(10), true},
		{hub, "1st-cluster", at(20).Add(Window), true},
		{hub, "cluster1", at(20).Add(Window + time.Millisecond), false},
		{cut, "1st-cluster", at(15), true},
		{cut, "cluster1", at(15), false},
	} {
		g.Expect(c.f.Covers(c.cluster, c.at)).To(Equal(c.want), "%s of %q at %s", c.f.Kind, c.cluster, c.at)
	}
}

func TestLongestGapIsTheLongestRunOfConsecutiveFailures(t *testing.T) {
	g := NewWithT(t)
	g.Expect(LongestGap(nil)).To(BeZero())
	failures := []requestloop.Failure{
		{At: at(11), LastOK: at(10)}, {At: at(12), LastOK: at(10)}, // 2 s from the last answer
		{At: at(30), LastOK: at(25)}, {At: at(31), LastOK: at(25)}, {At: at(34), LastOK: at(25)}, // 9 s
		{At: at(50), LastOK: at(49.5)},
	}
	g.Expect(LongestGap(failures)).To(Equal(9 * time.Second))
	g.Expect(LongestGap([]requestloop.Failure{{At: at(3)}})).To(BeZero(), "without LastOK a run starts at its first failure")
}

func TestDiffStatesNamesEveryChange(t *testing.T) {
	g := NewWithT(t)
	start := map[string]string{"leases": "3", "secrets": "9", "cluster1": "Available"}
	g.Expect(DiffStates(start, map[string]string{"leases": "3", "secrets": "9", "cluster1": "Available"})).To(BeEmpty())
	g.Expect(DiffStates(start, map[string]string{"leases": "3", "secrets": "10", "manifestworks": "2"})).To(Equal([]string{
		"cluster1: Available at the start, gone at the end",
		"manifestworks: not there at the start, 2 at the end",
		"secrets: 9 at the start, 10 at the end",
	}))
}

func TestProcessFiguresReadsGoroutinesAndResidentMemory(t *testing.T) {
	g := NewWithT(t)
	metrics := []byte(`# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 142
go_gc_duration_seconds{quantile="0.5"} 0.0001
process_resident_memory_bytes 3.145728e+07
`)
	goroutines, rss, err := ProcessFigures(metrics)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(goroutines).To(Equal(142.0))
	g.Expect(rss).To(Equal(31457280.0))
	_, _, err = ProcessFigures([]byte("go_goroutines 3\n"))
	g.Expect(err).To(MatchError(ContainSubstring("no process_resident_memory_bytes")))
}

// measured is a run with a SIGKILL of a proxy-server, a cut of 1st-cluster, a fault that did not recover, and
// failures inside and outside their windows.
func measured() Measured {
	return Measured{
		Seed: 9, Began: t0, Ended: at(300),
		Faults: []Fault{
			{Kind: "proxy-server SIGKILL", Target: "cluster-proxy-1", Start: at(10), Restored: at(10), End: at(40)},
			{Kind: "network cut", Target: "1st-cluster for 20s", Cluster: "1st-cluster", Start: at(100), Restored: at(120), End: at(150)},
			{Kind: "agent pod delete", Target: "cluster1/agent-2", Cluster: "cluster1", Start: at(200), Restored: at(200), End: at(260),
				RecoveryError: "replica a holds 2 agents of cluster1"},
		},
		Loops: []Loop{
			{Way: "gRPC frontend", Cluster: "1st-cluster", Answered: 1000, Failures: []requestloop.Failure{
				{At: at(105), Err: "no agent", LastOK: at(100)}, {At: at(119), Err: "no agent", LastOK: at(100)},
			}},
			{Way: "gRPC frontend", Cluster: "cluster1", Answered: 1000, Failures: []requestloop.Failure{
				{At: at(105), Err: "no agent for cluster1", LastOK: at(104)}, // a cut of the other cluster excuses nothing
			}},
			{Way: "user-server", Cluster: "cluster1", Answered: 998, Failures: []requestloop.Failure{
				{At: at(12), Err: "connection refused", LastOK: at(11)},
				{At: at(54), Err: "connection refused", LastOK: at(53)}, // the SIGKILL's window ended at 55 s
				{At: at(56), Err: "EOF", LastOK: at(55)},
			}},
		},
		Streams: []Stream{
			{StreamSlot: StreamSlot{Way: "user-server", Cluster: "cluster1", Kind: "watch"}, Started: at(0), Outcome: StreamLasted},
			{StreamSlot: StreamSlot{Way: "gRPC frontend", Cluster: "cluster1", Kind: "exec"}, Started: at(0), Over: at(12), Outcome: StreamEnded, Why: "EOF"},
			{StreamSlot: StreamSlot{Way: "gRPC frontend", Cluster: "cluster1", Kind: "exec"}, Started: at(13), Outcome: StreamLasted},
			{StreamSlot: StreamSlot{Way: "gRPC frontend", Cluster: "1st-cluster", Kind: "logs -f"}, Started: at(0), Over: at(130), Outcome: StreamHung,
				Why: "neither ended nor carried mark 7 within 30s"},
			// The agent delete's window, which ends at 275 s, holds cluster1's ends alone.
			{StreamSlot: StreamSlot{Way: "gRPC frontend", Cluster: "1st-cluster", Kind: "logs -f"}, Started: at(131), Over: at(270), Outcome: StreamEnded,
				Why: "unexpected EOF"},
		},
		FailedStreamStarts: map[StreamSlot]int{{Way: "gRPC frontend", Cluster: "1st-cluster", Kind: "logs -f"}: 3},
		AllAgentsBack:      at(300),
		ManagerEvents:      map[string]int{"Issued": 4},
		StartUsage: []Usage{{Component: "manager", Pods: 1, Goroutines: 100, RSSBytes: 50 << 20},
			{Component: "proxy-server", Pods: 3, Goroutines: 600, RSSBytes: 200 << 20}, {Component: "agents", Pods: 3, Goroutines: 150, RSSBytes: 100 << 20}},
		EndUsage: []Usage{{Component: "manager", Pods: 1, Goroutines: 151, RSSBytes: 50 << 20},
			{Component: "proxy-server", Pods: 3, Goroutines: 700, RSSBytes: 290 << 20}, {Component: "agents", Pods: 3, Goroutines: 150, RSSBytes: 170 << 20}},
		StartState: map[string]string{"secrets": "9"},
		EndState:   map[string]string{"secrets": "10"},
		Problems:   []string{"/metrics of agents of cluster1 pod a: EOF"},
	}
}

// excused is make soak's rule: a cut fails every way in, a SIGKILL the ways that do not try again.
func excused(way, kind string) bool {
	return kind == "network cut" || kind == "proxy-server SIGKILL" && way != "gRPC frontend"
}

func TestBuildAttributesEveryFailureToTheFaultsItFellIn(t *testing.T) {
	g := NewWithT(t)
	r := Build(measured())
	g.Expect(r.LastFaultEnd).To(Equal(at(260)))
	g.Expect(*r.AllAgentsBackSeconds).To(Equal(40.0))
	g.Expect(r.Loops).To(HaveLen(3))
	grpc, user := r.Loops[0], r.Loops[2]
	g.Expect(grpc.Cluster).To(Equal("1st-cluster"), "sorted by way, then cluster")
	g.Expect(grpc.Failures[0].During).To(Equal([]string{"network cut"}))
	g.Expect(grpc.LongestGapSeconds).To(Equal(19.0))
	g.Expect(r.Loops[1].Failures[0].During).To(BeEmpty(), "1st-cluster's cut does not cover cluster1")
	g.Expect(user.Requests).To(Equal(1001))
	g.Expect(user.Failures[0].During).To(Equal([]string{"proxy-server SIGKILL"}))
	g.Expect(user.Failures[1].During).To(Equal([]string{"proxy-server SIGKILL"}), "within the window after its end")
	g.Expect(user.Failures[2].During).To(BeEmpty())
	g.Expect(r.Kinds).To(ContainElement(KindSummary{Kind: "network cut", Count: 1, Injected: 1, Recovered: 1,
		LongestRecoverySeconds: 30, MeanRecoverySeconds: 30}), "recovery counts from the link's return")
	g.Expect(r.Kinds).To(ContainElement(KindSummary{Kind: "agent pod delete", Count: 1, Injected: 1}))
}

func TestBuildSumsStreamsUpByKindAndWayAndAttributesEveryEnd(t *testing.T) {
	g := NewWithT(t)
	r := Build(measured())
	g.Expect(r.Streams).To(Equal([]StreamSummary{
		{Kind: "exec", Way: "gRPC frontend", Started: 2, Ended: 1, EndedDuring: map[string]int{"proxy-server SIGKILL": 1}},
		{Kind: "logs -f", Way: "gRPC frontend", Started: 2, Ended: 1, Hung: 1, FailedStarts: 3, EndedDuring: map[string]int{}, NoFault: 1},
		{Kind: "watch", Way: "user-server", Started: 1, EndedDuring: map[string]int{}},
	}), "sorted by kind, then way; both clusters in one row")
	g.Expect(r.StreamEnds).To(HaveLen(3))
	g.Expect(r.StreamEnds[0]).To(Equal(StreamEnd{StreamSlot: StreamSlot{Way: "gRPC frontend", Cluster: "cluster1", Kind: "exec"},
		Started: at(0), At: at(12), Outcome: StreamEnded, Why: "EOF", During: []string{"proxy-server SIGKILL"}}))
	g.Expect(r.StreamEnds[1].Outcome).To(Equal(StreamHung))
	g.Expect(r.StreamEnds[1].During).To(Equal([]string{"network cut"}), "a hang is attributed as an end is")
	g.Expect(r.StreamEnds[2].During).To(BeEmpty(), "cluster1's agent delete does not cover 1st-cluster")
}

func TestShortfallsNameEveryGoalMissed(t *testing.T) {
	g := NewWithT(t)
	r := Build(measured())
	got := r.Shortfalls(Goals{Excused: excused, AllAgentsBack: 30 * time.Second})
	g.Expect(got).To(ConsistOf(
		ContainSubstring("cluster1 through the gRPC frontend: a request failed at 12:01:45.000 outside the window of any fault that may fail it (during: no fault): no agent for cluster1"),
		ContainSubstring("cluster1 through the user-server: a request failed at 12:00:56.000"),
		Equal("the logs -f stream to 1st-cluster through the gRPC frontend hung at 12:02:10.000: neither ended nor carried mark 7 within 30s"),
		ContainSubstring("fault agent pod delete (cluster1/agent-2) at 12:03:20.000: no recovery seen: replica a holds 2 agents of cluster1"),
		Equal("every agent was on every replica again 40s after the last fault's end, more than 30s"),
		Equal("the end state differs from the start: secrets: 9 at the start, 10 at the end"),
		Equal("manager: goroutines grew from 100 to 151, by more than the larger of 20% and 50"),
		Equal("agents: resident memory grew from 100.0 MiB to 170.0 MiB, by more than the larger of 50% and 64.0 MiB"),
		Equal("not measured: /metrics of agents of cluster1 pod a: EOF"),
	), "the proxy-server's 100 more goroutines of 600 stay within 20 percent, its 90 MiB more of 200 within 50 percent")

	m := measured()
	m.Faults, m.Loops, m.Streams, m.EndState = m.Faults[:2], m.Loops[:1], m.Streams[:2], m.StartState
	m.AllAgentsBack, m.EndUsage, m.Problems = at(150), m.StartUsage, nil
	g.Expect(Build(m).Shortfalls(Goals{Excused: excused, AllAgentsBack: 30 * time.Second})).To(BeEmpty())
	m.AllAgentsBack = time.Time{}
	g.Expect(Build(m).Shortfalls(Goals{Excused: excused, AllAgentsBack: 30 * time.Second})).To(
		ConsistOf("every agent was never seen on every replica after the last fault"))
}

func TestWriteLeavesTheReportAsJSONAndItsPlotBesideIt(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "out", "soak.json")
	plot, err := Build(measured()).Write(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plot).To(Equal(filepath.Join(filepath.Dir(path), "soak.svg")))

	var back Report
	g.Expect(json.Unmarshal(must(os.ReadFile(path)), &back)).To(Succeed())
	g.Expect(back.Seed).To(BeEquivalentTo(9))
	g.Expect(back.Loops[2].Failures[0].Error).To(Equal("connection refused"))
	g.Expect(back.StreamEnds).To(HaveLen(3))
	g.Expect(back.StreamEnds[1].At).To(BeTemporally("==", at(130)))
	g.Expect(back.StreamEnds[1].Why).To(Equal("neither ended nor carried mark 7 within 30s"))
	g.Expect(back.StreamEnds[1].StreamSlot).To(Equal(StreamSlot{Way: "gRPC frontend", Cluster: "1st-cluster", Kind: "logs -f"}))

	svg := string(must(os.ReadFile(plot)))
	els := elements(g, svg)
	// The background, three bands and a legend square for the failures and each of the three kinds.
	g.Expect(els["rect"]).To(Equal(1 + 3 + 4))
	g.Expect(strings.Count(svg, `stroke="#d62728"`)).To(Equal(6), "a tick per failed request")
	g.Expect(svg).To(ContainSubstring(">cluster1 through the user-server<"))
	g.Expect(svg).To(ContainSubstring(">network cut<"))
}

func TestTableShowsEveryPart(t *testing.T) {
	g := NewWithT(t)
	table := Build(measured()).Table()
	for _, want := range []string{
		"seed 9 (SOAK_SEED=9 draws the same faults)",
		"network cut", "12:01:45.000 cluster1 through the gRPC frontend, during no fault: no agent for cluster1",
		"12:02:10.000 the logs -f stream to 1st-cluster through the gRPC frontend hung, during network cut: neither ended nor carried mark 7 within 30s",
		"12:04:30.000 the logs -f stream to 1st-cluster through the gRPC frontend ended, during no fault: unexpected EOF",
		"every agent on every replica after the last fault's end (12:04:20.000): 40s",
		"Issued", "manager", "secrets: 9 at the start, 10 at the end", "not measured: /metrics of agents of cluster1 pod a: EOF",
	} {
		g.Expect(table).To(ContainSubstring(want))
	}
	g.Expect(table).To(MatchRegexp(`exec +gRPC frontend +2 +1 +0 +0 +proxy-server SIGKILL 1\n`))
	g.Expect(table).To(MatchRegexp(`logs -f +gRPC frontend +2 +1 +1 +3 +no fault 1\n`))
	g.Expect(table).NotTo(ContainSubstring("ended, during proxy-server SIGKILL"), "the ends a fault explains are counted, not listed")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// elements counts the elements of svg by name; it fails on XML that does not parse.
func elements(g Gomega, svg string) map[string]int {
	out, err := benchplot.Elements(svg)
	g.Expect(err).NotTo(HaveOccurred(), svg)
	return out
}
