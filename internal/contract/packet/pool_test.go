package packet

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/memtest"
)

func TestDirtyPoolHandsOutTheSmallestPowerOfTwoThatHolds(t *testing.T) {
	g := NewWithT(t)
	p := &dirtyPool{}
	for _, tc := range []struct{ n, capacity int }{
		{1, 256}, {256, 256}, {257, 512}, {4 << 10, 4 << 10}, {20 << 10, 32 << 10}, {32 << 10, 32 << 10},
		{32<<10 + 1, 32<<10 + 1}, // above the largest tier: its own allocation
	} {
		b := p.Get(tc.n)
		g.Expect(*b).To(HaveLen(tc.n))
		g.Expect(cap(*b)).To(Equal(tc.capacity), "Get(%d)", tc.n)
		p.Put(b)
	}
}

func TestDirtyPoolReusesWhatIsPutBack(t *testing.T) {
	g := NewWithT(t)
	p := &dirtyPool{}
	if memtest.PoolsReuse {
		g.Expect(testing.AllocsPerRun(1000, func() {
			b := p.Get(9 << 10)
			p.Put(b)
		})).To(BeZero())
	}
	// A capacity that is not a tier's is left to the garbage collector: Get never hands it out.
	odd := make([]byte, 3<<10)
	p.Put(&odd)
	g.Expect(cap(*p.Get(3 << 10))).To(Equal(4 << 10))
}
