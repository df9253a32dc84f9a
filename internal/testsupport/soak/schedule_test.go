package soak

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

var testKinds = []Kind{{Name: "pod delete"}, {Name: "kill"}, {Name: "self-signed CA", Group: "CA"}, {Name: "provided CA", Group: "CA"}}

func TestSchedulerDrawsTheSameFaultsFromTheSameSeed(t *testing.T) {
	g := NewWithT(t)
	draw := func(seed uint64) []string {
		s := NewScheduler(seed, testKinds)
		var out []string
		for range 20 {
			kind, r, ok := s.Pick(nil)
			g.Expect(ok).To(BeTrue())
			out = append(out, s.Gap().String(), kind.Name, time.Duration(r.Int64N(int64(time.Minute))).String())
		}
		return out
	}
	g.Expect(draw(7)).To(Equal(draw(7)))
	g.Expect(draw(7)).NotTo(Equal(draw(8)))
}

func TestSchedulerGapsStayWithinTheirBounds(t *testing.T) {
	g := NewWithT(t)
	s := NewScheduler(1, testKinds)
	for range 1000 {
		g.Expect(s.Gap()).To(And(BeNumerically(">=", MinGap), BeNumerically("<=", MaxGap)))
	}
}

func TestSchedulerPicksNoKindWhoseGroupRuns(t *testing.T) {
	g := NewWithT(t)
	s := NewScheduler(3, testKinds)
	for range 200 {
		kind, _, ok := s.Pick([]Kind{testKinds[0]})
		g.Expect(ok).To(BeTrue())
		g.Expect(kind.Name).NotTo(Equal("pod delete"), "a kind without a group does not overlap with itself")
		kind, _, ok = s.Pick([]Kind{testKinds[2]})
		g.Expect(ok).To(BeTrue())
		g.Expect(kind.Group).NotTo(Equal("CA"), "two CA rotations never run together")
	}
	_, _, ok := s.Pick([]Kind{testKinds[0], testKinds[1]})
	g.Expect(ok).To(BeFalse(), "MaxRunning faults already run")
	_, _, ok = NewScheduler(3, testKinds[:1]).Pick([]Kind{testKinds[0]})
	g.Expect(ok).To(BeFalse(), "no group is free")
}

// TestRunKeepsToItsLimits runs ten minutes of faults on a fake clock, each lasting 20 s to 2 min as its own random
// source says, and checks what Run promises: at most MaxRunning at once, never two of a group, starts at least
// MinGap apart and before the end, and every fault returned.
func TestRunKeepsToItsLimits(t *testing.T) {
	g := NewWithT(t)
	began := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(began)
	var mu sync.Mutex
	running, most := 0, 0
	inject := func(_ context.Context, kind Kind, r *rand.Rand) Fault {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-clk.After(20*time.Second + time.Duration(r.Int64N(int64(100*time.Second))))
		mu.Lock()
		running--
		mu.Unlock()
		return Fault{Target: kind.Name + " target"}
	}
	result := make(chan []Fault)
	go func() { result <- NewScheduler(42, testKinds).Run(context.Background(), clk, 10*time.Minute, inject) }()
	var faults []Fault
	for faults == nil {
		select {
		case faults = <-result:
		default:
			// Time moves only while everything waits on the clock.
			if clk.HasWaiters() {
				clk.Step(time.Second)
			} else {
				runtime.Gosched()
			}
		}
	}

	g.Expect(len(faults)).To(BeNumerically(">=", 5))
	g.Expect(most).To(BeNumerically("<=", MaxRunning))
	for i, f := range faults {
		g.Expect(f.Target).To(Equal(f.Kind+" target"), "the fault's own record is kept")
		g.Expect(f.Start.Before(began.Add(10*time.Minute))).To(BeTrue(), "fault %d starts before the end", i)
		g.Expect(f.End).To(BeTemporally(">=", f.Start.Add(20*time.Second)))
		if i > 0 {
			g.Expect(f.Start.Sub(faults[i-1].Start)).To(BeNumerically(">=", MinGap), "fault %d", i)
		}
		for _, other := range faults[:i] {
			if groupOf(other.Kind) == groupOf(f.Kind) {
				g.Expect(f.Start).To(BeTemporally(">=", other.End), "%s at %s overlaps %s", f.Kind, f.Start, other.Kind)
			}
		}
	}
}

func TestRunStartsNothingOnceItsContextEnds(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	faults := NewScheduler(1, testKinds).Run(ctx, clk, time.Hour, func(context.Context, Kind, *rand.Rand) Fault {
		t.Error("a fault started after the context ended")
		return Fault{}
	})
	g.Expect(faults).To(BeEmpty())
}

func groupOf(name string) string {
	for _, k := range testKinds {
		if k.Name == name {
			return k.group()
		}
	}
	return name
}
