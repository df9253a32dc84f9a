package copybuf

import (
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
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
	g.Expect(bytesPerRun(100, func() { b.Put(b.Get()) })).To(BeNumerically("<", Size/4))
}

// bytesPerRun is testing.AllocsPerRun for bytes: the heap bytes f allocates per call, on average over runs calls
// after a warm-up call.
func bytesPerRun(runs int, f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs) //nolint:gosec // runs is positive
}
