package benchmeasure

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestMedian(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Median(nil)).To(BeZero())
	g.Expect(Median([]float64{3, 1, 2})).To(Equal(2.0))
	g.Expect(Median([]float64{4, 1, 3, 2})).To(Equal(2.5))
	in := []float64{3, 1, 2}
	Median(in)
	g.Expect(in).To(Equal([]float64{3, 1, 2}), "the input stays as it was")
}

func TestCPUTimesGrowWithWork(t *testing.T) {
	g := NewWithT(t)
	self, machine := SelfCPU(), MachineBusy()
	g.Expect(machine).To(BeNumerically(">", 0), "/proc/stat is read")
	// Busy work until this process has used 200 ms more: both counters include it.
	for SelfCPU()-self < 200*time.Millisecond {
	}
	g.Expect(SelfCPU() - self).To(BeNumerically(">=", 200*time.Millisecond))
	g.Expect(MachineBusy()-machine).To(BeNumerically(">=", 100*time.Millisecond), "the machine counts this process too (10 ms ticks)")
}
