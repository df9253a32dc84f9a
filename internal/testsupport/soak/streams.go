package soak

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// What a hang probe finds of a long-lived stream, and what became of a stream by the end of a run.
const (
	StreamEnded   = "ended"
	StreamCarried = "carried the mark"
	// StreamHung neither ended nor carried the probe's mark in time; the soak closed it.
	StreamHung = "hung"
	// StreamLasted ran until the run closed it.
	StreamLasted = "lasted"
)

// Probed is a live long-lived stream as a hang probe sees it.
type Probed interface {
	// Ended reports whether the stream has ended.
	Ended() bool
	// Carries reports whether the stream carries mark from end to end now; a probe asks again until it does.
	Carries(mark string) bool
}

// Probe gives each of streams until within has passed on clk to end or to carry mark, asking every poll, and returns
// what each did, in the order given: StreamEnded, StreamCarried, or StreamHung when it did neither.
func Probe(clk clock.Clock, mark string, within, poll time.Duration, streams []Probed) []string {
	out := make([]string, len(streams))
	deadline := clk.Now().Add(within)
	for {
		waiting := false
		for i, s := range streams {
			switch {
			case out[i] != "":
			case s.Ended():
				out[i] = StreamEnded
			case s.Carries(mark):
				out[i] = StreamCarried
			default:
				waiting = true
			}
		}
		if !waiting || !clk.Now().Before(deadline) {
			break
		}
		clk.Sleep(poll)
	}
	for i := range out {
		if out[i] == "" {
			out[i] = StreamHung
		}
	}
	return out
}

// StreamSlot names a long-lived stream the soak keeps open: its kind, through one way in, to one cluster. A stream
// that ends is replaced by another of the same slot.
type StreamSlot struct {
	Way     string `json:"way"`
	Cluster string `json:"cluster"`
	Kind    string `json:"kind"`
}

// Stream is one long-lived stream of a run, from its start to its end.
type Stream struct {
	StreamSlot
	Started time.Time `json:"started"`
	// Over is when the stream was seen to end, or was closed as hung; zero when it lasted.
	Over time.Time `json:"over,omitzero"`
	// Outcome is StreamEnded, StreamHung or StreamLasted.
	Outcome string `json:"outcome"`
	// Why is how the stream ended, or what it did not do in time.
	Why string `json:"why,omitempty"`
}

// StreamBook records the long-lived streams of a run as they start, end and hang, and the starts that failed. It is
// safe for concurrent use.
type StreamBook struct {
	mu           sync.Mutex
	streams      []Stream
	failedStarts map[StreamSlot]int
	closed       bool
}

// Started records a stream of slot started at at, and returns its id for Ended and Hung.
func (b *StreamBook) Started(slot StreamSlot, at time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streams = append(b.streams, Stream{StreamSlot: slot, Started: at, Outcome: StreamLasted})
	return len(b.streams) - 1
}

// StartFailed counts a start of a stream of slot that failed: the stream could not be opened, or ended before it
// carried anything. Once the book is closed it counts nothing.
func (b *StreamBook) StartFailed(slot StreamSlot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.failedStarts == nil {
		b.failedStarts = map[StreamSlot]int{}
	}
	b.failedStarts[slot]++
}

// Ended records that stream id ended at at, with why. It reports false, and records nothing, when the stream was over
// already (closed as hung) or the book is closed.
func (b *StreamBook) Ended(id int, at time.Time, why string) bool {
	return b.over(id, at, StreamEnded, why)
}

// Hung records that stream id neither ended nor carried a probe's mark in time, at at; why says what it did not do. It
// reports false, and records nothing, when the stream was over already or the book is closed.
func (b *StreamBook) Hung(id int, at time.Time, why string) bool {
	return b.over(id, at, StreamHung, why)
}

func (b *StreamBook) over(id int, at time.Time, outcome, why string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.streams[id].Outcome != StreamLasted {
		return false
	}
	b.streams[id].Over, b.streams[id].Outcome, b.streams[id].Why = at, outcome, why
	return true
}

// Close ends the book: the streams still running lasted, and what happens to them, or to a start, as the run closes
// them is not recorded.
func (b *StreamBook) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
}

// Streams are the streams recorded so far, in the order they started.
func (b *StreamBook) Streams() []Stream {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.streams)
}

// FailedStarts counts the failed starts by slot.
func (b *StreamBook) FailedStarts() map[StreamSlot]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.failedStarts)
}
