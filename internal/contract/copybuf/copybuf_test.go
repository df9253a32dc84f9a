package copybuf

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/memtest"
)

func TestBuffersAreReused(t *testing.T) {
	g := NewWithT(t)
	var b Pool
	buf := b.Get()
	g.Expect(buf).To(HaveLen(Size))
	b.Put(buf[:10])
	g.Expect(b.Get()).To(HaveLen(Size), "a buffer comes back whole whatever length it was put with")
	b.Put(make([]byte, 100)) // not ours: left to the garbage collector
	for range 10 {
		g.Expect(b.Get()).To(HaveLen(Size))
	}
	// A buffer put back is handed out again: a Get and Put cost the slice header Put boxes, not a new buffer.
	if memtest.PoolsReuse {
		g.Expect(memtest.BytesPerRun(100, func() { b.Put(b.Get()) })).To(BeNumerically("<", Size/4))
	}
}
