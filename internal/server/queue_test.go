package server

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestQueuePolicyWaitsOnlyForAReaderThatTookDataLately(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := newQueuePolicy(100, time.Second, clk)
	recent, stalled := clk.Now().Add(-300*time.Millisecond), clk.Now().Add(-2*time.Second)
	cases := []struct {
		name           string
		queued, n      int
		since          time.Time
		wait, pausable bool
		paused         bool
		want           verdict
		wantWait       time.Duration
	}{
		{"room in the queue", 60, 40, stalled, true, false, false, queueIt, 0},
		{"an empty queue takes any packet", 0, 500, stalled, true, false, false, queueIt, 0},
		{"full, the reader took data lately: wait for the rest of the stall timeout", 90, 20, recent, true, false, false, waitFor, 700 * time.Millisecond},
		{"full, the reader stalled: go on without it", 90, 20, stalled, true, false, false, queueIt, 0},
		{"twice the queue behind: cut off", 190, 20, stalled, true, false, false, cutOff, 0},
		{"the frontend's own packets never wait", 90, 20, recent, false, false, false, queueIt, 0},
		{"pausable, full: wait briefly for a reader that keeps up", 90, 20, clk.Now().Add(-10 * time.Millisecond), true, true, false, waitFor, pauseWait - 10*time.Millisecond},
		{"pausable, the reader took nothing lately: queue past the bound and pause", 90, 20, recent, true, true, false, queueIt, 0},
		{"pausable, paused: never waits", 90, 20, clk.Now(), true, true, true, queueIt, 0},
		{"pausable, past the slack: its agent ignores Pause", 100 + flowSlack, 20, recent, true, true, true, cutOff, 0},
	}
	for _, c := range cases {
		v, d := p.decide(c.queued, c.n, c.since, c.wait, c.pausable, c.paused)
		g.Expect(v).To(Equal(c.want), c.name)
		g.Expect(d).To(Equal(c.wantWait), c.name)
	}
}

func TestQueuePolicyPausesPastTheBoundAndResumesAtHalf(t *testing.T) {
	g := NewWithT(t)
	p := newQueuePolicy(100, time.Second, nil)
	g.Expect(p.shouldPause(false, 100)).To(BeFalse())
	g.Expect(p.shouldPause(false, 101)).To(BeTrue(), "past the bound, once the reader was waited for")
	g.Expect(p.shouldPause(true, 51)).To(BeTrue(), "paused until the reader took half")
	g.Expect(p.shouldPause(true, 50)).To(BeFalse())
}
