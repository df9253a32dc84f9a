package fanout

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestRunCallsEveryItemAtMostLimitAtATime(t *testing.T) {
	g := NewWithT(t)
	var running, peak atomic.Int32
	done := make([]bool, 20)
	Run(context.Background(), len(done), 3, func(i int) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		done[i] = true
		running.Add(-1)
	})
	g.Expect(done).NotTo(ContainElement(false), "every item is called, and Run waits for them")
	g.Expect(peak.Load()).To(BeEquivalentTo(3))
}

func TestRunStartsNothingMoreOnceTheContextEnds(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	Run(ctx, 10, 1, func(int) {
		calls.Add(1)
		cancel()
	})
	g.Expect(calls.Load()).To(BeEquivalentTo(1))
}
