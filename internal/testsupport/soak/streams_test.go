package soak

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeStream ends, or carries every mark, from a time of the probe's clock on; zero: never.
type fakeStream struct {
	clk           *clocktesting.FakeClock
	ends, carries time.Time
	asked         []string
}

func (s *fakeStream) Ended() bool { return !s.ends.IsZero() && !s.clk.Now().Before(s.ends) }

func (s *fakeStream) Carries(mark string) bool {
	s.asked = append(s.asked, mark)
	return !s.carries.IsZero() && !s.clk.Now().Before(s.carries)
}

func TestProbeGivesEveryStreamItsTimeToEndOrCarryTheMark(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	carries := &fakeStream{clk: clk, carries: at(12)}
	ends := &fakeStream{clk: clk, ends: at(29)}
	hangs := &fakeStream{clk: clk}
	late := &fakeStream{clk: clk, carries: at(31)}
	endedAlready := &fakeStream{clk: clk, ends: at(0), carries: at(0)}

	got := Probe(clk, "m1", 30*time.Second, time.Second, []Probed{carries, ends, hangs, late, endedAlready})
	g.Expect(got).To(Equal([]string{StreamCarried, StreamEnded, StreamHung, StreamHung, StreamEnded}))
	g.Expect(clk.Now()).To(Equal(at(30)), "the probe stops at its deadline")
	g.Expect(carries.asked).To(HaveLen(13), "asked every second until it carried the mark, and no more")
	g.Expect(carries.asked).To(HaveEach("m1"))
	g.Expect(endedAlready.asked).To(BeEmpty(), "an ended stream is not asked to carry anything")
}

func TestProbeReturnsOnceEveryStreamIsSettled(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	got := Probe(clk, "m", time.Minute, 250*time.Millisecond, []Probed{&fakeStream{clk: clk, carries: at(2)}, &fakeStream{clk: clk, ends: at(1)}})
	g.Expect(got).To(Equal([]string{StreamCarried, StreamEnded}))
	g.Expect(clk.Now()).To(Equal(at(2)))
	g.Expect(Probe(clk, "m", time.Minute, time.Second, nil)).To(BeEmpty())
}

func TestStreamBookKeepsEveryStreamFromItsStartToItsEnd(t *testing.T) {
	g := NewWithT(t)
	var b StreamBook
	exec := StreamSlot{Way: "gRPC frontend", Cluster: "cluster1", Kind: "exec"}
	watch := StreamSlot{Way: "user-server", Cluster: "1st-cluster", Kind: "watch"}
	first := b.Started(exec, at(0))
	b.Started(watch, at(1))
	g.Expect(b.Ended(first, at(20), "EOF")).To(BeTrue())
	g.Expect(b.Ended(first, at(21), "again")).To(BeFalse(), "a stream ends once")
	b.StartFailed(exec)
	b.StartFailed(exec)
	second := b.Started(exec, at(23))
	g.Expect(b.Hung(second, at(90), "neither ended nor carried mark 5 within 30s")).To(BeTrue())
	g.Expect(b.Ended(second, at(90.5), "context canceled")).To(BeFalse(), "closing a hung stream ends it, which is not counted again")
	third := b.Started(exec, at(92))
	b.Close()
	g.Expect(b.Ended(third, at(100), "context canceled")).To(BeFalse(), "what the run's own close does is not recorded")
	b.StartFailed(watch)

	g.Expect(b.Streams()).To(Equal([]Stream{
		{StreamSlot: exec, Started: at(0), Over: at(20), Outcome: StreamEnded, Why: "EOF"},
		{StreamSlot: watch, Started: at(1), Outcome: StreamLasted},
		{StreamSlot: exec, Started: at(23), Over: at(90), Outcome: StreamHung, Why: "neither ended nor carried mark 5 within 30s"},
		{StreamSlot: exec, Started: at(92), Outcome: StreamLasted},
	}))
	g.Expect(b.FailedStarts()).To(Equal(map[StreamSlot]int{exec: 2}), "a start the run's close failed is not counted")
}
