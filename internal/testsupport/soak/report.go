package soak

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
)

// Window is how long after a fault's end a failed request, or a stream's end, is still attributed to it: clients
// notice a replaced replica or a restored route a little after the system does.
const Window = 15 * time.Second

// Fault is one fault of a run.
type Fault struct {
	Kind string `json:"kind"`
	// Target names what the fault hit: a pod, a Secret, a cluster.
	Target string `json:"target,omitempty"`
	// Cluster is the managed cluster the fault concerns alone (its agents, its route to the hub): it can explain
	// failed requests to that cluster only. Empty: a hub component that every request goes through.
	Cluster string    `json:"cluster,omitempty"`
	Start   time.Time `json:"start"`
	// Restored is when the fault's cause was over: the process killed, the link up again, the change applied.
	Restored time.Time `json:"restored"`
	// End is when the system was seen recovered from the fault, or when the wait for it gave up.
	End         time.Time `json:"end"`
	InjectError string    `json:"injectError,omitempty"`
	// RecoveryError says what was still missing when the wait for recovery gave up.
	RecoveryError string `json:"recoveryError,omitempty"`
}

// Recovery is the time from the fault's cause being over until the system was seen recovered.
func (f Fault) Recovery() time.Duration {
	from := f.Restored
	if from.IsZero() {
		from = f.Start
	}
	return f.End.Sub(from)
}

// Covers reports whether a request to cluster that failed at at falls in the fault's window: from its start to
// Window after its end.
func (f Fault) Covers(cluster string, at time.Time) bool {
	return (f.Cluster == "" || f.Cluster == cluster) && !at.Before(f.Start) && !at.After(f.End.Add(Window))
}

// Loop is one request loop of a run: requests through one way in to one cluster.
type Loop struct {
	Way, Cluster string
	Answered     int
	Failures     []requestloop.Failure
}

// Usage is what the pods of one component hold at one time, summed over them.
type Usage struct {
	Component  string  `json:"component"`
	Pods       int     `json:"pods"`
	Goroutines float64 `json:"goroutines"`
	RSSBytes   float64 `json:"rssBytes"`
}

// Measured is what a soak saw; Build sums it up.
type Measured struct {
	Seed         uint64
	Began, Ended time.Time
	Faults       []Fault
	Loops        []Loop
	// Streams are every long-lived stream of the run (StreamBook), FailedStreamStarts the starts that failed by slot.
	Streams            []Stream
	FailedStreamStarts map[StreamSlot]int
	// AllAgentsBack is when, after the last fault's end, every agent was first seen on every replica; zero if never.
	AllAgentsBack time.Time
	// ManagerEvents counts the Events the manager emitted during the run, by reason.
	ManagerEvents        map[string]int
	StartUsage, EndUsage []Usage
	// StartState and EndState describe the system before the first fault and after the last, as named values.
	StartState, EndState map[string]string
	// Problems are what the soak could not measure (a component's /metrics that did not answer, say).
	Problems []string
}

// Report is a soak summed up, as make soak writes it.
type Report struct {
	Seed   uint64        `json:"seed"`
	Began  time.Time     `json:"began"`
	Ended  time.Time     `json:"ended"`
	Kinds  []KindSummary `json:"kinds"`
	Faults []Fault       `json:"faults"`
	Loops  []LoopSummary `json:"loops"`
	// Streams sum up the long-lived streams by kind and way in; StreamEnds are every end and hang among them.
	Streams      []StreamSummary `json:"streams"`
	StreamEnds   []StreamEnd     `json:"streamEnds"`
	LastFaultEnd time.Time       `json:"lastFaultEnd"`
	// AllAgentsBackSeconds is the time from the last fault's end until every agent was on every replica again; null
	// when that was never seen.
	AllAgentsBackSeconds *float64          `json:"allAgentsBackSeconds"`
	ManagerEvents        map[string]int    `json:"managerEvents"`
	StartUsage           []Usage           `json:"startUsage"`
	EndUsage             []Usage           `json:"endUsage"`
	StartState           map[string]string `json:"startState"`
	// StateChanges lists how the end state differs from the start state; empty when they are equal.
	StateChanges []string `json:"stateChanges"`
	// Problems are what the soak could not measure.
	Problems []string `json:"problems,omitempty"`
}

// KindSummary sums up the faults of one kind.
type KindSummary struct {
	Kind string `json:"kind"`
	// Count faults started; Injected of them were injected; Recovered of those were seen recovered.
	Count     int `json:"count"`
	Injected  int `json:"injected"`
	Recovered int `json:"recovered"`
	// LongestRecoverySeconds and MeanRecoverySeconds are over the recovered faults (Fault.Recovery).
	LongestRecoverySeconds float64 `json:"longestRecoverySeconds"`
	MeanRecoverySeconds    float64 `json:"meanRecoverySeconds"`
}

// LoopSummary sums up one request loop.
type LoopSummary struct {
	Way      string `json:"way"`
	Cluster  string `json:"cluster"`
	Requests int    `json:"requests"`
	Failed   int    `json:"failed"`
	// LongestGapSeconds is the longest run of consecutive failures, from the last answer before it to its last
	// failure.
	LongestGapSeconds float64         `json:"longestGapSeconds"`
	Failures          []FailedRequest `json:"failures"`
}

// FailedRequest is one failed request of a loop.
type FailedRequest struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
	// During lists the kinds of the faults whose window holds the failure.
	During []string `json:"during"`
}

// StreamSummary sums up the long-lived streams of one kind through one way in, to every cluster.
type StreamSummary struct {
	Kind string `json:"kind"`
	Way  string `json:"way"`
	// Started streams; Ended and Hung of them ended, or were closed as hung; FailedStarts starts failed.
	Started      int `json:"started"`
	Ended        int `json:"ended"`
	Hung         int `json:"hung"`
	FailedStarts int `json:"failedStarts"`
	// EndedDuring counts the ends by the kind of fault whose window held them (an end in two windows counts for
	// both); NoFault the ends in no fault's window.
	EndedDuring map[string]int `json:"endedDuring"`
	NoFault     int            `json:"endedDuringNoFault"`
}

// StreamEnd is a long-lived stream that ended, or hung.
type StreamEnd struct {
	StreamSlot
	Started time.Time `json:"started"`
	At      time.Time `json:"at"`
	// Outcome is StreamEnded or StreamHung.
	Outcome string `json:"outcome"`
	Why     string `json:"why"`
	// During lists the kinds of the faults whose window holds the end (the rule of failed requests).
	During []string `json:"during"`
}

// Build sums m up.
func Build(m Measured) Report {
	r := Report{
		Seed: m.Seed, Began: m.Began, Ended: m.Ended, Faults: m.Faults,
		ManagerEvents: m.ManagerEvents, StartUsage: m.StartUsage, EndUsage: m.EndUsage, StartState: m.StartState,
		StateChanges: DiffStates(m.StartState, m.EndState), Problems: m.Problems,
	}
	r.Kinds = summarizeKinds(m.Faults)
	r.Streams, r.StreamEnds = summarizeStreams(m.Streams, m.FailedStreamStarts, m.Faults)
	for _, f := range m.Faults {
		if f.End.After(r.LastFaultEnd) {
			r.LastFaultEnd = f.End
		}
	}
	if !m.AllAgentsBack.IsZero() {
		back := max(m.AllAgentsBack.Sub(r.LastFaultEnd), 0).Seconds()
		r.AllAgentsBackSeconds = &back
	}
	for _, l := range m.Loops {
		s := LoopSummary{Way: l.Way, Cluster: l.Cluster, Requests: l.Answered + len(l.Failures), Failed: len(l.Failures),
			LongestGapSeconds: LongestGap(l.Failures).Seconds()}
		for _, f := range l.Failures {
			s.Failures = append(s.Failures, FailedRequest{At: f.At, Error: f.Err, During: During(m.Faults, l.Cluster, f.At)})
		}
		r.Loops = append(r.Loops, s)
	}
	sort.Slice(r.Loops, func(i, j int) bool {
		a, b := r.Loops[i], r.Loops[j]
		return a.Way < b.Way || a.Way == b.Way && a.Cluster < b.Cluster
	})
	return r
}

func summarizeKinds(faults []Fault) []KindSummary {
	byKind := map[string]*KindSummary{}
	var total = map[string]time.Duration{}
	for _, f := range faults {
		k := byKind[f.Kind]
		if k == nil {
			k = &KindSummary{Kind: f.Kind}
			byKind[f.Kind] = k
		}
		k.Count++
		if f.InjectError != "" {
			continue
		}
		k.Injected++
		if f.RecoveryError != "" {
			continue
		}
		k.Recovered++
		d := f.Recovery()
		total[f.Kind] += d
		k.LongestRecoverySeconds = max(k.LongestRecoverySeconds, d.Seconds())
	}
	var out []KindSummary
	for _, name := range slices.Sorted(maps.Keys(byKind)) {
		k := *byKind[name]
		if k.Recovered > 0 {
			k.MeanRecoverySeconds = (total[name] / time.Duration(k.Recovered)).Seconds()
		}
		out = append(out, k)
	}
	return out
}

// summarizeStreams sums streams up by kind and way in, sorted so, with every end and hang in the order they happened.
func summarizeStreams(streams []Stream, failedStarts map[StreamSlot]int, faults []Fault) ([]StreamSummary, []StreamEnd) {
	type row struct{ kind, way string }
	rows := map[row]*StreamSummary{}
	of := func(slot StreamSlot) *StreamSummary {
		k := row{slot.Kind, slot.Way}
		if rows[k] == nil {
			rows[k] = &StreamSummary{Kind: slot.Kind, Way: slot.Way, EndedDuring: map[string]int{}}
		}
		return rows[k]
	}
	var ends []StreamEnd
	for _, s := range streams {
		sum := of(s.StreamSlot)
		sum.Started++
		switch s.Outcome {
		case StreamHung:
			sum.Hung++
		case StreamEnded:
			sum.Ended++
		default:
			continue
		}
		end := StreamEnd{StreamSlot: s.StreamSlot, Started: s.Started, At: s.Over, Outcome: s.Outcome, Why: s.Why,
			During: During(faults, s.Cluster, s.Over)}
		if s.Outcome == StreamEnded {
			for _, kind := range end.During {
				sum.EndedDuring[kind]++
			}
			if len(end.During) == 0 {
				sum.NoFault++
			}
		}
		ends = append(ends, end)
	}
	for slot, n := range failedStarts {
		of(slot).FailedStarts += n
	}
	var out []StreamSummary
	for _, k := range slices.SortedFunc(maps.Keys(rows), func(a, b row) int { return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.way, b.way)) }) {
		out = append(out, *rows[k])
	}
	slices.SortStableFunc(ends, func(a, b StreamEnd) int { return a.At.Compare(b.At) })
	return out, ends
}

// During lists, sorted and once each, the kinds of the faults whose window holds a request to cluster that failed at
// at.
func During(faults []Fault, cluster string, at time.Time) []string {
	var kinds []string
	for _, f := range faults {
		if f.Covers(cluster, at) && !slices.Contains(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	slices.Sort(kinds)
	return kinds
}

// LongestGap is the longest run of consecutive failures among failures (in order, as a loop records them): from the
// last answer before the run to its last failure. Zero without failures.
func LongestGap(failures []requestloop.Failure) time.Duration {
	var longest time.Duration
	for i, f := range failures {
		if i+1 < len(failures) && failures[i+1].LastOK.Equal(f.LastOK) {
			continue // not the run's last failure
		}
		from := f.LastOK
		if from.IsZero() {
			from = f.At
		}
		longest = max(longest, f.At.Sub(from))
	}
	return longest
}

// DiffStates lists, sorted, every name whose value differs between start and end, or that only one of them has.
func DiffStates(start, end map[string]string) []string {
	var out []string
	for name, was := range start {
		if now, ok := end[name]; !ok {
			out = append(out, fmt.Sprintf("%s: %s at the start, gone at the end", name, was))
		} else if now != was {
			out = append(out, fmt.Sprintf("%s: %s at the start, %s at the end", name, was, now))
		}
	}
	for name, now := range end {
		if _, ok := start[name]; !ok {
			out = append(out, fmt.Sprintf("%s: not there at the start, %s at the end", name, now))
		}
	}
	slices.Sort(out)
	return out
}

const (
	// GoroutineGrowth and GoroutineGrowthAbsolute bound how far a component's goroutines may grow from the start of
	// a run to its end: by the larger of the two (a fraction of the start, a count).
	GoroutineGrowth         = 0.20
	GoroutineGrowthAbsolute = 50
	// RSSGrowth and RSSGrowthAbsolute bound how far a component's resident memory may grow over a run, likewise. The
	// Go runtime returns freed memory to the system lazily, so only a growth beyond both is a leak's sign.
	RSSGrowth         = 0.50
	RSSGrowthAbsolute = 64 << 20
)

// Goals are what a soak must show.
type Goals struct {
	// Excused tells whether a request through way may fail in the window of a fault of kind: a fault that takes a
	// cluster off the network fails every way in to it, a killed process the requests of clients that do not try
	// again.
	Excused func(way, kind string) bool
	// AllAgentsBack bounds the time from the last fault's end until every agent is on every replica again.
	AllAgentsBack time.Duration
}

// Shortfalls lists every way r falls short of goals, each naming what it concerns; none when the soak met them.
func (r Report) Shortfalls(goals Goals) []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, "not measured: "+p)
	}
	for _, l := range r.Loops {
		for _, f := range l.Failures {
			if !slices.ContainsFunc(f.During, func(kind string) bool { return goals.Excused(l.Way, kind) }) {
				out = append(out, fmt.Sprintf("%s through the %s: a request failed at %s outside the window of any fault that may fail it (during: %s): %s",
					l.Cluster, l.Way, clockTime(f.At), orNone(f.During), f.Error))
			}
		}
	}
	for _, e := range r.StreamEnds {
		if e.Outcome == StreamHung {
			out = append(out, fmt.Sprintf("the %s stream to %s through the %s hung at %s: %s", e.Kind, e.Cluster, e.Way, clockTime(e.At), e.Why))
		}
	}
	for _, f := range r.Faults {
		switch {
		case f.InjectError != "":
			out = append(out, fmt.Sprintf("fault %s (%s) at %s was not injected: %s", f.Kind, f.Target, clockTime(f.Start), f.InjectError))
		case f.RecoveryError != "":
			out = append(out, fmt.Sprintf("fault %s (%s) at %s: no recovery seen: %s", f.Kind, f.Target, clockTime(f.Start), f.RecoveryError))
		}
	}
	switch back := r.AllAgentsBackSeconds; {
	case back == nil:
		out = append(out, "every agent was never seen on every replica after the last fault")
	case *back > goals.AllAgentsBack.Seconds():
		out = append(out, fmt.Sprintf("every agent was on every replica again %s after the last fault's end, more than %s",
			seconds(*back), goals.AllAgentsBack))
	}
	for _, c := range r.StateChanges {
		out = append(out, "the end state differs from the start: "+c)
	}
	end := map[string]Usage{}
	for _, u := range r.EndUsage {
		end[u.Component] = u
	}
	for _, was := range r.StartUsage {
		now, ok := end[was.Component]
		switch {
		case !ok:
			out = append(out, was.Component+": no figures at the end")
		case now.Goroutines-was.Goroutines > max(was.Goroutines*GoroutineGrowth, GoroutineGrowthAbsolute):
			out = append(out, fmt.Sprintf("%s: goroutines grew from %.0f to %.0f, by more than the larger of %.0f%% and %d",
				was.Component, was.Goroutines, now.Goroutines, GoroutineGrowth*100, GoroutineGrowthAbsolute))
		case now.RSSBytes-was.RSSBytes > max(was.RSSBytes*RSSGrowth, RSSGrowthAbsolute):
			out = append(out, fmt.Sprintf("%s: resident memory grew from %s to %s, by more than the larger of %.0f%% and %s",
				was.Component, mib(was.RSSBytes), mib(now.RSSBytes), RSSGrowth*100, mib(RSSGrowthAbsolute)))
		}
	}
	return out
}

func orNone(kinds []string) string {
	if len(kinds) == 0 {
		return "no fault"
	}
	return strings.Join(kinds, ", ")
}

func clockTime(t time.Time) string { return t.Format("15:04:05.000") }

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}
